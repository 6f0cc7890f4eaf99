"""The fault soak (issue 16): ``kill -9`` a grid (its worker and cell processes die with it) at seeded
random moments, restarting it after each kill, then let it finish. Compared with a run that was never
killed: no cell lost, none trained again after it finished, no record that says finished without
being so, and every ``eval.jsonl`` identical to the byte. Cells checkpoint every step, so kills land
before, during and after checkpoint writes as well as in training, evaluation and start-up."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import yaml
from test_executors import SLOW_PLUGIN, micro_grid, records

pytestmark = pytest.mark.slow

KILLS, SEEDS = 5, (0, 1, 2)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _finished(out) -> dict[str, str]:
    """run_id -> digest of its record, for every cell whose record says finished; such a cell must have
    its evaluation and metrics on disk (a record never looks finished before they are)."""
    done = {}
    for run_id, rec in records(out).items():
        if rec["status"] == "finished":
            d = out / "ex" / run_id
            assert (d / "eval.jsonl").exists() and (d / "metrics.jsonl").exists(), run_id
            done[run_id] = _digest(d / "run.json")
    return done


def test_kill_9_soak_loses_nothing_and_repeats_nothing(tmp_path, micro_model_dir):
    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    g = yaml.safe_load(micro_grid(tmp_path, micro_model_dir, seeds=SEEDS).read_text())
    g["axes"]["method"] = ["slow_sft"]
    g["base"]["data"]["n_train"] = 16
    g["base"]["train"]["max_steps"] = 4  # 4 s of training per cell: most kills land mid-cell
    g["base"]["checkpoint"] = {"every": 1}
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(g))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}

    def start(out):
        cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out)]
        return subprocess.Popen([*cmd, "--plugin", "slow_plugin"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip

    assert start(tmp_path / "whole").wait(timeout=600) == 0
    reference = {
        k: _digest(tmp_path / "whole" / "ex" / k / "eval.jsonl") for k in records(tmp_path / "whole")
    }

    out, rng, seen, twice, partial = tmp_path / "out", random.Random(0), {}, [], 0
    for _ in range(KILLS):
        proc = start(out)
        time.sleep(rng.uniform(5.0, 15.0))  # start-up takes ~7 s; each cell ~6 s
        os.killpg(proc.pid, signal.SIGKILL)  # the grid, its warm worker and the cell: kill -9 all
        proc.wait()
        partial += len(list(out.rglob(".step-*.partial")))
        now = _finished(out)
        twice += [k for k in seen if now.get(k) != seen[k]]  # a finished record rewritten: run again
        seen.update(now)
    assert start(out).wait(timeout=600) == 0
    final = _finished(out)
    twice += [k for k in seen if final.get(k) != seen[k]]
    lost = set(reference) - set(final)
    differ = [k for k in final if _digest(out / "ex" / k / "eval.jsonl") != reference[k]]
    resumed = sum(r.get("resumed_from_step") is not None for r in records(out).values())
    summary = {"kills": KILLS, "cells": len(reference), "lost": len(lost), "run_twice": len(twice),
               "eval_differs": len(differ), "finished_before_last_run": len(seen), "resumed_cells": resumed,
               "partial_checkpoints_seen": partial}  # fmt: skip
    print("soak:", json.dumps(summary))
    assert not lost and not twice and not differ, summary
