"""``oxbench status DIR`` (issue 17): a study in progress from its records alone."""

from __future__ import annotations

import fcntl
import json
import re

from test_analysis_runs import record, write_run
from test_cli import grid, write
from typer.testing import CliRunner

from oxbench_cli import app


def test_status_shows_each_cell_where_it_is_and_the_partial_leaderboard(tmp_path):
    write_run(tmp_path, record("dpo", seed=0))
    write_run(tmp_path, record("dpo", seed=1))
    failed = write_run(tmp_path, record("kto", seed=0, status="failed", error="NonFiniteLoss: loss is nan"))
    running = write_run(tmp_path, record("grpo", seed=0, status="running"))
    (running / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (1, 2, 3))
    )
    killed = write_run(tmp_path, record("grpo", seed=1, status="running"))
    (killed / "metrics.jsonl").write_text(json.dumps({"step": 4, "loss": 1.0}) + "\n")
    good, bad = killed / "checkpoints" / "step-00000004", killed / "checkpoints" / "step-00000006"
    for d in (good, bad):
        d.mkdir(parents=True)
        (d / "rank0.json").write_text("{}")
        sha = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"  # of "{}"
        (d / "manifest.json").write_text(
            json.dumps({"step": 4, "world_size": 1, "files": {"rank0.json": sha}})
        )
    (bad / "rank0.json").write_text("{ }")  # damaged since it was written: a rerun passes it over
    (tmp_path / "g1" / "cut").mkdir()
    (tmp_path / "g1" / "cut" / "run.json").write_text('{"run_id": "cu')
    with open(running / ".lock", "w") as lock:  # held, as by the process training the cell
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = CliRunner().invoke(app, ["status", str(tmp_path)])
    out = " ".join(re.sub(r"[\u2500-\u257f]", " ", r.output).split())  # without the table's box lines
    assert r.exit_code == 0, r.output
    assert "tiny-xs-grpo-s0 running step 3" in out
    assert "tiny-xs-grpo-s1 killed at step 4; resumes from step-00000004" in out
    assert "(step-00000006: rank0.json does not match its checksum: passed over)" in out
    assert "tiny-xs-kto-s0 failed NonFiniteLoss: loss is nan" in out
    assert "cut corrupt" in out and "tiny-xs-dpo-s0 finished accuracy" in out
    assert "1 corrupt, 1 failed, 2 finished, 1 killed, 1 running" in out
    assert "accuracy (%) so far" in out and failed.exists()


def test_status_with_the_grid_lists_the_cells_not_started(tmp_path, micro_model_dir):
    g = write(tmp_path, "g.yaml", grid(micro_model_dir))
    (tmp_path / "out").mkdir()
    r = CliRunner().invoke(app, ["status", str(tmp_path / "out"), "--grid", str(g)])
    assert r.exit_code == 0 and "2 to run" in r.output, r.output
    r = CliRunner().invoke(app, ["status", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "no such results directory" in r.output
