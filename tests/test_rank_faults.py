"""A cell of two ranks (torchrun, gloo) whose one rank fails (issue 28): the other rank leaves within
its collective timeout instead of waiting at a barrier, the cell is recorded with the failing rank's
error (never as finished), and the grid goes on to its next cell.

The unit of replication here is the fault: one rank raising alone, and one rank killed with SIGKILL
mid-step while its peer computes or waits in a collective.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

PLUGIN = """
import os
import time
from pathlib import Path

from losses import LossInputs, LossOutput, LossSpec


def rank1_raises(inputs: LossInputs) -> LossOutput:
    if os.environ.get("RANK") == "1":
        raise RuntimeError("rank one gave up [on purpose]")
    return LossOutput(-inputs.logps.mean())


def rank1_hangs(inputs: LossInputs) -> LossOutput:
    if os.environ.get("RANK") == "1":
        Path(os.environ["FAULT_PID_FILE"]).write_text(str(os.getpid()))
        time.sleep(600)  # killed here, mid-step
    return LossOutput(-inputs.logps.mean())


def _spec(name, fn):
    return LossSpec(name=name, fn=fn, paradigm="sft", data="sft", needs_reference=False, paper="none",
                    description="a fault on rank 1 (tests only)")


raises = _spec("rank1_raises", rank1_raises)
hangs = _spec("rank1_hangs", rank1_hangs)
"""
TIMEOUT_S = 30.0  # the collective timeout these cells run with (faults.collective_timeout_s)


def _grid(tmp_path: Path, model_dir: str, methods: list[str]) -> Path:
    g = {
        "name": "faults",
        "base": {
            "model": {"name": model_dir},
            "data": {"n_train": 16, "max_new_tokens": 8},
            "train": {"batch_size": 2, "max_steps": 2, "lr": 1e-3},
            "eval": {"n_test": 4, "n_ood": 0, "k": 0, "max_new_tokens": 8},
            "faults": {"collective_timeout_s": TIMEOUT_S},
        },
        "axes": {"method": methods},
    }
    (tmp_path / "fault_plugin.py").write_text(PLUGIN)
    p = tmp_path / "g.yaml"
    p.write_text(yaml.safe_dump(g))
    return p


def _start(tmp_path: Path, grid: Path, out: Path, **env) -> subprocess.Popen:
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out), "--nproc", "2"]
    return subprocess.Popen([*cmd, "--plugin", "fault_plugin"], env={**os.environ, "PYTHONPATH": path, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _records(out: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["method"]: json.loads(p.read_text()) for p in out.rglob("run.json")}


def test_a_rank_that_raises_alone_fails_the_cell_with_its_error(tmp_path, micro_model_dir):
    out = tmp_path / "out"
    proc = _start(tmp_path, _grid(tmp_path, micro_model_dir, ["rank1_raises", "sft"]), out)
    _, err = proc.communicate(timeout=600)
    recs = _records(out)
    assert recs["sft"]["status"] == "finished", err[-3000:]  # the grid went on
    bad = recs["rank1_raises"]
    assert bad["status"] == "failed", err[-3000:]
    assert bad["error"].startswith("rank 1: RuntimeError: rank one gave up [on purpose]"), bad["error"]
    assert bad["timing"]["total_s"] < TIMEOUT_S + 30  # nobody waited at a barrier for the dead rank
    assert proc.returncode == 1


def test_a_rank_killed_mid_step_leaves_the_cell_failed_and_the_grid_going(tmp_path, micro_model_dir):
    out, pid_file = tmp_path / "out", tmp_path / "rank1.pid"
    proc = _start(tmp_path, _grid(tmp_path, micro_model_dir, ["rank1_hangs", "sft"]), out,
                  FAULT_PID_FILE=str(pid_file))  # fmt: skip
    deadline = time.time() + 300
    while not pid_file.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert pid_file.exists(), "rank 1 never reached its loss"
    time.sleep(1.0)
    killed = time.time()
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    while time.time() - killed < TIMEOUT_S + 30:
        rec = _records(out).get("rank1_hangs", {})
        if rec.get("status") not in (None, "running"):
            break
        time.sleep(0.5)
    survived_s = time.time() - killed
    _, err = proc.communicate(timeout=600)
    recs = _records(out)
    assert recs["rank1_hangs"]["status"] in ("failed", "preempted"), (recs["rank1_hangs"], err[-3000:])
    assert survived_s < TIMEOUT_S + 30, survived_s  # the surviving rank left within its timeout + 30 s
    assert recs["rank1_hangs"]["error"], recs["rank1_hangs"]
    assert recs["sft"]["status"] == "finished", err[-3000:]


HUNG_TIMEOUT_S = 10.0  # the collective timeout of the hung-collective cell


def test_a_rank_that_stops_answering_ends_in_a_timeout_naming_it_and_the_operation(tmp_path, micro_model_dir):
    """Rank 1 stops (SIGSTOP) inside its loss: rank 0 waits in DeepSpeed's gradient all-reduce until its
    collective timeout, then the cell fails with one line naming the operation and rank 1, within
    the timeout + 30 s; the stopped rank is reaped with the cell and the grid goes on."""
    out, pid_file = tmp_path / "out", tmp_path / "rank1.pid"
    grid = _grid(tmp_path, micro_model_dir, ["rank1_hangs", "sft"])
    g = yaml.safe_load(grid.read_text())
    g["base"]["faults"]["collective_timeout_s"] = HUNG_TIMEOUT_S
    grid.write_text(yaml.safe_dump(g))
    proc = _start(tmp_path, grid, out, FAULT_PID_FILE=str(pid_file))
    pid = None
    try:
        deadline = time.time() + 300
        while not pid_file.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert pid_file.exists(), "rank 1 never reached its loss"
        pid = int(pid_file.read_text())
        os.kill(pid, signal.SIGSTOP)  # stops answering: its gloo threads too
        stopped = time.time()
        while time.time() - stopped < HUNG_TIMEOUT_S + 60:
            if _records(out).get("rank1_hangs", {}).get("status") not in (None, "running"):
                break
            time.sleep(0.5)
        ended_s = time.time() - stopped
        _, err = proc.communicate(timeout=600)
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
    recs = _records(out)
    bad = recs["rank1_hangs"]
    print(f"hung collective: the cell ended {ended_s:.1f} s after rank 1 stopped: {bad['error']}")
    assert bad["status"] == "failed", (bad, err[-3000:])
    assert ended_s < HUNG_TIMEOUT_S + 30, ended_s
    error = bad["error"]
    assert len(error.splitlines()) == 1, error
    assert error.startswith("rank 0: CollectiveTimeout: all_reduce"), error  # the operation, then where
    assert f"timed out after {HUNG_TIMEOUT_S:g} s: rank 1 did not answer" in error, error
    assert recs["sft"]["status"] == "finished", err[-3000:]  # the grid went on
