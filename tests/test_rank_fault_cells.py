"""One grid of 2-rank cells (torchrun, gloo) whose rank 1 fails a different way in each cell (issue 28):
it raises alone, it is killed with SIGKILL mid-step, or it stops answering (SIGSTOP) inside a
collective. The other rank leaves within its collective timeout instead of waiting at a barrier; each
cell is recorded with the failing rank's error (never as finished); and the grid goes on to its next
cell every time, ending with a healthy cell that finishes.

The healthy cell is issue 28's cold-cache cell: DPO at 2 ranks, whose ranks build the reference
log-prob cache cold (the cache is the fixture's own, empty at the start) and checkpoint every step.

The unit of replication is the fault. The three faults share one grid process and one healthy cell
(before: a grid and a healthy cell each, and a grid of three cold-cache cells of its own); the cell
after each fault running is what shows that the grid went on past it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
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


def _waits_on_rank1(name):
    def fn(inputs: LossInputs) -> LossOutput:
        if os.environ.get("RANK") == "1":  # its pid, then it waits here, mid-step, for the test's signal
            Path(os.environ["FAULT_PID_DIR"], name + ".pid").write_text(str(os.getpid()))
            time.sleep(600)
        return LossOutput(-inputs.logps.mean())
    return fn


def _spec(name, fn):
    return LossSpec(name=name, fn=fn, paradigm="sft", data="sft", needs_reference=False, paper="none",
                    description="a fault on rank 1 (tests only)")


raises = _spec("rank1_raises", rank1_raises)
killed = _spec("rank1_killed", _waits_on_rank1("rank1_killed"))
stopped = _spec("rank1_stopped", _waits_on_rank1("rank1_stopped"))
"""
TIMEOUT_S = 30.0  # the collective timeout of the cells (faults.collective_timeout_s)
HUNG_TIMEOUT_S = 10.0  # the stopped rank's cell: its peer waits this long in the all-reduce
KILLED_TIMEOUT_S = (
    15.0  # the killed rank's cell: its peer leaves within this (or sooner: torchrun sees the death)
)
ORDER = ["rank1_raises", "rank1_killed", "rank1_stopped", "dpo"]  # the grid's cells, in the order they run


@dataclass
class Outcome:
    records: dict[str, dict]
    cache: Path  # the grid's OXBENCH_CACHE, empty before it ran
    stderr: str
    returncode: int
    seconds: dict[str, float] = field(default_factory=dict)  # from each signal to its cell's record


def _records(out: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["method"]: json.loads(p.read_text()) for p in out.rglob("run.json")}


def _wait(what, until, timeout_s: float = 300.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        got = until()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _ended(out: Path, method: str) -> bool:
    return _records(out).get(method, {}).get("status") not in (None, "running")


def _signal_rank1(out: Path, pids: Path, method: str, sig: int, settle_s: float) -> tuple[int, float]:
    """Sends ``sig`` to rank 1 of ``method``'s cell once it waits in its loss; returns its pid and the
    seconds from the signal to the cell's record."""
    pid_file = pids / f"{method}.pid"
    _wait(f"rank 1 of {method} to reach its loss", pid_file.exists)
    time.sleep(settle_s)
    pid = int(pid_file.read_text())
    os.kill(pid, sig)
    sent = time.time()
    _wait(f"the record of {method}", lambda: _ended(out, method), timeout_s=TIMEOUT_S + 120)
    return pid, time.time() - sent


@pytest.fixture(scope="module")
def faults(tmp_path_factory, micro_model_dir) -> Outcome:
    tmp = tmp_path_factory.mktemp("rank_faults")
    (tmp / "fault_plugin.py").write_text(PLUGIN)
    pids, out = tmp / "pids", tmp / "out"
    pids.mkdir()
    grid = {
        "name": "faults",
        "base": {"model": {"name": micro_model_dir}, "data": {"n_train": 16, "max_new_tokens": 8},
                 "train": {"batch_size": 2, "max_steps": 2, "lr": 1e-3},
                 "eval": {"n_test": 4, "n_ood": 0, "k": 0, "max_new_tokens": 8},
                 "faults": {"collective_timeout_s": TIMEOUT_S}},
        "axes": {"method": ORDER},
        "methods": {"rank1_stopped": {"faults": {"collective_timeout_s": HUNG_TIMEOUT_S}},
                    "rank1_killed": {"faults": {"collective_timeout_s": KILLED_TIMEOUT_S}},
                    "dpo": {"data": {"chosen_source": "gold"}, "checkpoint": {"every": 1}}},
    }  # fmt: skip
    (tmp / "g.yaml").write_text(yaml.safe_dump(grid))
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(tmp / "g.yaml"), "--out", str(out),
           "--nproc", "2", "--plugin", "fault_plugin"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")]),
           "FAULT_PID_DIR": str(pids), "OXBENCH_CACHE": str(tmp / "cache")}  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped, seconds = None, {}
    try:
        _, seconds["rank1_killed"] = _signal_rank1(out, pids, "rank1_killed", signal.SIGKILL, settle_s=1.0)
        stopped, seconds["rank1_stopped"] = _signal_rank1(out, pids, "rank1_stopped", signal.SIGSTOP, 0.0)
        # the record is in; let the stopped rank take torchrun's SIGTERM now instead of waiting out
        # torchrun's 30 s grace (a real hung rank would), so the grid reaches its next cell sooner
        os.kill(stopped, signal.SIGCONT)
        _, err = proc.communicate(timeout=600)
    finally:
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGKILL)
        proc.kill()
    return Outcome(_records(out), tmp / "cache", err, proc.returncode, seconds)


def test_every_fault_is_followed_by_the_next_cell_and_the_grid_ends_with_a_finished_one(faults):
    assert sorted(faults.records) == sorted(ORDER), (sorted(faults.records), faults.stderr[-3000:])
    assert faults.records["dpo"]["status"] == "finished", faults.stderr[-3000:]  # the grid went on
    assert [faults.records[m]["status"] != "finished" for m in ORDER] == [True, True, True, False]
    assert faults.returncode == 1  # the grid says that cells failed


def test_a_cold_cache_two_rank_cell_builds_its_reference_and_finishes(faults):
    """Issue 28's cold-cache race, end to end (the race itself, many builds at once, is in
    tests/test_rank_faults.py): both ranks of a DPO cell build its reference cache in an empty cache,
    checkpointing every step, and the cell finishes, neither hung nor resumed."""
    rec = faults.records["dpo"]
    assert rec["status"] == "finished", (rec["error"], faults.stderr[-3000:])
    assert rec["world_size"] == 2 and rec["resumed_from_step"] is None
    assert len(list((faults.cache / "ref").glob("ref-*.pt"))) == 1  # built here, cold
    assert rec["optimizer_steps"] == 2


def test_a_rank_that_raises_alone_fails_the_cell_with_its_error(faults):
    bad = faults.records["rank1_raises"]
    assert bad["status"] == "failed", faults.stderr[-3000:]
    assert bad["error"].startswith("rank 1: RuntimeError: rank one gave up [on purpose]"), bad["error"]
    assert bad["timing"]["total_s"] < TIMEOUT_S + 30  # nobody waited at a barrier for the dead rank


def test_a_rank_killed_mid_step_leaves_the_cell_failed_within_its_timeout(faults):
    bad = faults.records["rank1_killed"]
    assert bad["status"] in ("failed", "preempted"), (bad, faults.stderr[-3000:])
    assert bad["error"], bad
    assert (
        faults.seconds["rank1_killed"] < KILLED_TIMEOUT_S + 30
    )  # the surviving rank left within timeout + 30 s


def test_a_rank_that_stops_answering_ends_in_a_timeout_naming_it_and_the_operation(faults):
    """Rank 1 stops (SIGSTOP) inside its loss: rank 0 waits in DeepSpeed's gradient all-reduce until its
    collective timeout, then the cell fails with one line naming the operation and rank 1, within
    the timeout + 30 s."""
    bad = faults.records["rank1_stopped"]
    ended_s = faults.seconds["rank1_stopped"]
    print(f"hung collective: the cell ended {ended_s:.1f} s after rank 1 stopped: {bad['error']}")
    assert bad["status"] == "failed", (bad, faults.stderr[-3000:])
    assert ended_s < HUNG_TIMEOUT_S + 30, ended_s
    error = bad["error"]
    assert len(error.splitlines()) == 1, error
    assert error.startswith("rank 0: CollectiveTimeout: all_reduce"), error  # the operation, then where
    assert f"timed out after {HUNG_TIMEOUT_S:g} s: rank 1 did not answer" in error, error
