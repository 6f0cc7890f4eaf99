"""One lock discipline (issue 37): ``run --config`` takes the run directory's lock as a grid's cells do,
never retrains a finished cell unless ``--rerun`` says so, and leaves a cell another process is training
to that process, said in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import yaml
from test_cli import micro_cell, write
from typer.testing import CliRunner

from oxbench.config import RunConfig
from oxbench.grid.runs import REPLACED, run_dir
from oxbench_cli import app

runner = CliRunner()


def _cell(tmp_path, model_dir):
    path = write(tmp_path, "c.yaml", micro_cell(model_dir) | {"method": "sft"})
    cfg = RunConfig(**yaml.safe_load(path.read_text()))
    return path, run_dir(tmp_path / "out", cfg.grid, cfg.run_id())


def _run(path, tmp_path, *more):
    return runner.invoke(app, ["run", "--config", str(path), "--out", str(tmp_path / "out"), *more])


def test_a_finished_cell_is_not_trained_again_unless_rerun(tmp_path, micro_model_dir):
    path, d = _cell(tmp_path, micro_model_dir)
    first = _run(path, tmp_path)
    assert first.exit_code == 0, first.output
    record = (d / "run.json").read_bytes()
    again = _run(path, tmp_path)
    assert again.exit_code == 0 and "is finished" in again.output and "--rerun" in again.output
    assert (d / "run.json").read_bytes() == record  # not trained, not rewritten
    rerun = _run(path, tmp_path, "--rerun")
    assert rerun.exit_code == 0, rerun.output
    new = json.loads((d / "run.json").read_text())
    assert new["status"] == "finished" and new["rerun"] is True
    assert (d / REPLACED).read_bytes() == record  # the record it replaced, kept
    assert json.loads(record)["rerun"] is False


def test_a_cell_another_process_holds_is_left_to_it(tmp_path, micro_model_dir):
    path, d = _cell(tmp_path, micro_model_dir)
    d.mkdir(parents=True)
    hold = "import fcntl,sys,time; f=open(sys.argv[1],'w'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(d / ".lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        res = _run(path, tmp_path)
        assert res.exit_code == 0, res.output
        assert "already running elsewhere" in res.output and len(res.output.strip().splitlines()) == 1
        assert time.monotonic() - t0 < 30 and not (d / "run.json").exists()  # skipped, nothing written
        rerun = _run(path, tmp_path, "--rerun")
        assert "already running elsewhere" in rerun.output and not (d / "run.json").exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_grid_rerun_retrains_its_finished_cells(tmp_path, micro_model_dir):
    g = {"name": "g", "base": micro_cell(micro_model_dir), "axes": {"method": ["sft"], "seed": [0]}}
    path = write(tmp_path, "g.yaml", g)
    args = ["run", "--grid", str(path), "--out", str(tmp_path / "out")]
    first = runner.invoke(app, args)
    said = [
        (r.get("status"), r.get("error"))
        for r in map(json.loads, (p.read_text() for p in (tmp_path / "out").rglob("run.json")))
    ]
    assert first.exit_code == 0, (said, first.output[-1500:])
    (rec,) = (tmp_path / "out" / "g").glob("*/run.json")
    old = rec.read_bytes()
    plan = runner.invoke(app, [*args, "--plan"])
    assert "to run 0" in plan.output, plan.output
    res = runner.invoke(app, [*args, "--rerun"])
    assert res.exit_code == 0, res.output
    assert json.loads(rec.read_text())["rerun"] is True and (rec.parent / REPLACED).read_bytes() == old
