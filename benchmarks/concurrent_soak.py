"""The concurrent soak (issue 37): grids, ``run --config`` runs and resumes on one results directory at
once, all killed with ``kill -9`` at seeded random moments, then a last grid run to the end. Counts what
must be zero: cells trained twice (a finished record rewritten), duplicated steps in a record's
``metrics.jsonl``, corrupt records; and says how many cells finished.

    python benchmarks/concurrent_soak.py [--rounds 8] [--seed 0]

Each round starts one grid (6 cells of a slow SFT, 8 steps, a checkpoint every step) and two ``--config``
processes for two of its cells, kills all three process groups after 3-12 s, and checks the directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import make_micro_model  # noqa: E402
from test_executors import SLOW_PLUGIN  # noqa: E402

from oxbench.grid.runs import inspect_record  # noqa: E402
from oxbench.grid.spec import expand, load_grid  # noqa: E402

CELLS = [0, 1, 2, 3, 4, 5]  # the grid's seeds


def setup(tmp: Path) -> tuple[Path, list[Path], dict]:
    model, tok = make_micro_model()
    model.save_pretrained(tmp / "model")
    tok.save_pretrained(tmp / "model")
    (tmp / "slow_plugin.py").write_text(SLOW_PLUGIN)
    base = {"model": {"name": str(tmp / "model")}, "data": {"n_train": 32, "max_new_tokens": 8},
            "train": {"batch_size": 4, "max_steps": 8, "lr": 1e-3}, "checkpoint": {"every": 1},
            "eval": {"n_test": 4, "n_ood": 0, "k": 0, "max_new_tokens": 8}}  # fmt: skip
    grid = tmp / "g.yaml"
    grid.write_text(
        yaml.safe_dump({"name": "soak", "base": base, "axes": {"method": ["slow_sft"], "seed": CELLS}})
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")])}
    sys.path.insert(0, str(tmp))
    from oxbench.plugins import load_plugins

    load_plugins(["slow_plugin"])
    configs = []
    for i, cell in enumerate(expand(load_grid(grid), str(grid))[:2]):
        path = tmp / f"cell{i}.json"
        path.write_text(json.dumps(cell.model_dump()))
        configs.append(path)
    return grid, configs, env


def start(args: list[str], env: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "oxbench_cli", *args, "--plugin", "slow_plugin"]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def check(out: Path, seen: dict[str, str]) -> dict[str, int]:
    """Counts over every record now under ``out``; ``seen``: run_id -> digest of each finished record."""
    counts = {"finished": 0, "trained twice": 0, "duplicated steps": 0, "corrupt": 0}
    for d in sorted(p.parent for p in out.rglob("run.json")):
        rec, problem = inspect_record(d)
        counts["corrupt"] += problem is not None
        if rec is None or rec["status"] != "finished":
            continue
        counts["finished"] += 1
        digest = hashlib.sha256((d / "run.json").read_bytes()).hexdigest()
        counts["trained twice"] += seen.setdefault(rec["run_id"], digest) != digest
        steps = [json.loads(line)["step"] for line in (d / "metrics.jsonl").read_text().splitlines()]
        counts["duplicated steps"] += len(steps) - len(set(steps))
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="oxbench-soak-"))
    grid, configs, env = setup(tmp)
    out, rng, seen, kills, t0 = tmp / "out", random.Random(a.seed), {}, 0, time.monotonic()
    for r in range(a.rounds):
        procs = [start(["run", "--grid", str(grid), "--out", str(out)], env)]
        procs += [start(["run", "--config", str(c), "--out", str(out)], env) for c in configs]
        time.sleep(rng.uniform(3.0, 12.0))
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                kills += 1
            p.wait()
        print(f"round {r + 1}: {check(out, seen)}", flush=True)
    final = start(["run", "--grid", str(grid), "--out", str(out)], env).wait(timeout=900)
    again = [start(["run", "--config", str(c), "--out", str(out)], env).wait(timeout=300) for c in configs]
    counts = check(out, seen)
    print(f"after {a.rounds} rounds ({kills} processes killed) and a last grid run (exit {final}; "
          f"--config of finished cells: exit {again}) in {time.monotonic() - t0:.0f} s: {counts}")  # fmt: skip
    ok = (
        counts["finished"] == len(CELLS)
        and final == 0
        and not any(counts[k] for k in ("trained twice", "duplicated steps", "corrupt"))
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
