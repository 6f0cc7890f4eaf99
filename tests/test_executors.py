"""Executors: every cell in its own process; local pool, Ray and submitit; kill -9 and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from grids import write_grid

pytestmark = pytest.mark.slow


def micro_grid(tmp_path, model_dir, seeds=(0, 1)) -> Path:
    return write_grid(tmp_path, "ex", model_dir, {"method": ["sft"], "seed": list(seeds)})


def oxbench(*args, timeout=600, **kw):
    return subprocess.run(
        [sys.executable, "-m", "oxbench_cli", *args], capture_output=True, text=True, timeout=timeout, **kw
    )


def records(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in out.rglob("run.json")}


def test_the_local_executor_runs_every_cell(tmp_path, micro_model_dir):
    """Ray's and submitit's executors run their cells to finished records in tests/test_preemption.py
    (pre-empted, retried and resumed), tests/test_cluster_requests.py and tests/test_multinode.py (until
    2026-12-07 this test also ran each of them once more, plainly: 40 s of CI for no new path)."""
    out = tmp_path / "out"
    grid = str(micro_grid(tmp_path, micro_model_dir))
    proc = oxbench("run", "--grid", grid, "--out", str(out), "--executor", "local", "--workers", "2")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    recs = records(out)
    assert len(recs) == 2 and all(r["status"] == "finished" for r in recs.values())
    assert {r["seed"] for r in recs.values()} == {0, 1}
    said = proc.stdout + proc.stderr  # the shared preparation reports itself before the cells start
    assert "prepared" in said and ": base model in" in said, said[-2000:]


def test_kill_minus_9_then_resume_runs_only_missing_cells(tmp_path, micro_model_dir):
    """Kill the grid (and so its cell processes) mid-way; the restart finishes only what is missing."""
    grid = micro_grid(tmp_path, micro_model_dir, seeds=(0, 1, 2))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline:
        if any(r.get("status") == "finished" for r in records(out).values()):
            break
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(2)  # the cell processes die with their parent (PR_SET_PDEATHSIG)
    before = records(out)
    finished = {k for k, r in before.items() if r["status"] == "finished"}
    assert 1 <= len(finished) < 3
    for k in finished:  # nothing half-written looks finished
        assert "accuracy" in before[k]["metrics"] and (out / "ex" / k / "eval.jsonl").exists()
    stamps = {k: (out / "ex" / k / "run.json").stat().st_mtime_ns for k in finished}

    plan = oxbench("run", "--grid", str(grid), "--out", str(out), "--plan")
    assert f"finished {len(finished)}, to run {3 - len(finished)}" in plan.stdout
    again = oxbench("run", "--grid", str(grid), "--out", str(out))
    assert again.returncode == 0, again.stderr[-2000:]
    after = records(out)
    assert len(after) == 3 and all(r["status"] == "finished" for r in after.values())
    assert {k: (out / "ex" / k / "run.json").stat().st_mtime_ns for k in finished} == stamps  # none run twice


def test_small_scales_run_while_a_large_one_is_still_preparing(tmp_path, monkeypatch):
    """The local pool pipelines: a model's cells start as soon as *its* preparation is done.

    With 2 slots, the large model's preparation blocks until one of the small model's cells has
    run; if cells waited for every preparation to finish (as the first version did), the small
    cell could never start and the event would time out.
    """
    import threading

    from oxbench.config import RunConfig
    from oxbench.grid import executors

    small_cell_ran = threading.Event()
    order = []

    def fake_prepare(c, out, workers):
        if c.model.name == "big":
            assert small_cell_ran.wait(timeout=20), "small cells waited for the big preparation"
        order.append(f"prepared {c.model.name}")
        return 0.0, None

    def fake_cell(c, out, nproc, workers):
        order.append(f"ran {c.model.name}/{c.seed}")
        if c.model.name == "small":
            small_cell_ran.set()
        return {"run_id": c.run_id(), "status": "finished"}

    monkeypatch.setattr(executors, "_prepare_one", fake_prepare)
    monkeypatch.setattr(
        executors.WarmWorker, "prepare", lambda self, c, out, share: fake_prepare(c, out, share)
    )
    monkeypatch.setattr(executors.WarmWorker, "run", lambda self, c, out: fake_cell(c, out, 1, self.workers))
    cells = [RunConfig(method="sft", seed=s, model={"name": m}) for m in ("big", "small") for s in (0, 1)]
    prepared = []
    recs = executors.run_local(
        cells, tmp_path, workers=2, on_prepared=lambda c, secs, err: prepared.append(c.model.name)
    )
    assert len(recs) == 4 and sorted(prepared) == ["big", "small"]
    assert order.index("ran small/0") < order.index("prepared big")
    assert order.index("prepared big") < order.index("ran big/0")


def test_each_cell_gets_its_share_of_the_cores(monkeypatch):
    """Two workers on 2 cores get 1 thread each, whatever OMP_NUM_THREADS the user exported;
    OXBENCH_THREADS overrides; a single worker keeps the user's environment."""
    from oxbench.grid.executors import _child_env, cell_threads

    monkeypatch.delenv("OXBENCH_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert (
        cell_threads(2, cores=2) == 1 and cell_threads(2, 2, cores=8) == 2 and cell_threads(4, cores=2) == 1
    )
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert _child_env(2)["OMP_NUM_THREADS"] == "1"
    assert _child_env(1)["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("OXBENCH_THREADS", "3")
    assert _child_env(2)["OMP_NUM_THREADS"] == "3"


def test_a_prepared_shared_key_skips_its_preparation_process(micro_model_dir, monkeypatch, tmp_path):
    """Once a shared key is prepared (here the base evaluation in the cache), the pool starts
    no ``--prepare`` process for it (issue 13: a grid of one 2.7 s cell took 16.3 s); when something it
    made leaves the cache, it prepares again."""
    from oxbench.config import RunConfig
    from oxbench.grid import executors
    from oxbench.grid.prepare import prepare_shared
    from oxbench.grid.shared import is_prepared

    cfg = RunConfig(
        method="sft",
        model={"name": micro_model_dir},
        data={"n_train": 4},
        eval={"n_test": 4, "n_ood": 4, "k": 0, "max_new_tokens": 4},
    )
    assert not is_prepared(cfg)
    prepare_shared(cfg, verbose=False)
    assert is_prepared(cfg)
    calls = []
    monkeypatch.setattr(executors, "_prepare_one", lambda c, out, w: calls.append(c) or (0.0, None))
    monkeypatch.setattr(
        executors.WarmWorker, "prepare", lambda self, c, out, w: calls.append(c) or (0.0, None)
    )
    monkeypatch.setattr(executors.WarmWorker, "run", lambda self, c, out: {"status": "finished"})
    executors.run_local([cfg], tmp_path)
    assert calls == []
    from oxbench.utils import cache_root

    for f in (cache_root() / "base_eval").glob("*.json"):
        f.unlink()
    assert not is_prepared(cfg)
    executors.run_local([cfg], tmp_path)
    assert len(calls) == 1


def test_a_lone_preparation_gets_every_core(monkeypatch, tmp_path):
    """One base model to prepare with --workers 2: its preparation runs alone (the cells wait for it),
    so it gets the cores of both slots; two base models share them."""
    from oxbench.config import RunConfig
    from oxbench.grid import executors

    shares = []
    monkeypatch.setattr(executors, "_prepare_one", lambda c, out, w: shares.append(w) or (0.0, None))
    monkeypatch.setattr(
        executors.WarmWorker, "prepare", lambda self, c, out, w: shares.append(w) or (0.0, None)
    )
    monkeypatch.setattr(executors.WarmWorker, "run", lambda self, c, out: {"status": "finished"})
    executors.run_local([RunConfig(method="sft", seed=s) for s in (0, 1)], tmp_path, workers=2)
    assert shares == [1]
    shares.clear()
    cells = [RunConfig(method="sft", model={"name": m}) for m in ("tiny-xs", "tiny-s")]
    executors.run_local(cells, tmp_path, workers=2)
    assert shares == [2, 2]


SLOW_PLUGIN = """
import time

from losses import LossSpec
from losses.sft import spec as sft


def slow_sft(inputs):
    time.sleep(1.0)  # a cell of 6 steps takes 6 s or more: long enough to be interrupted
    return sft.fn(inputs)


spec = LossSpec(name="slow_sft", fn=slow_sft, paradigm="sft", data="sft", needs_reference=False,
                paper="none", description="sft, slowly (tests only)")
"""


COUNTING = """

import os

_plain = spec.fn


def counted(inputs):
    if os.environ.get("SLOW_CALLS"):
        with open(os.environ["SLOW_CALLS"], "a") as f:
            f.write(f"{os.getpid()}\\n")
    return _plain(inputs)


spec = LossSpec(name="slow_sft", fn=counted, paradigm="sft", data="sft", needs_reference=False,
                paper="none", description="sft, slowly, counting its calls (tests only)")
"""


def _as_from_a_shell() -> None:
    """The grid starts with SIGINT handled and unblocked, as from a terminal: a child inherits its parent's
    ignored and blocked signals, and in the full suite (twice in CI) the grid ran on after the SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_stops_the_grid_within_seconds_and_leaves_it_resumable(tmp_path, micro_model_dir):
    """Ctrl-C used to record the running cell failed and then train every queued cell to the end with
    no output (issue 16). Now the queued cells never start, the running one ends at once, and a rerun
    plans every unfinished cell."""
    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    g = yaml.safe_load(micro_grid(tmp_path, micro_model_dir, seeds=(0, 1, 2, 3)).read_text())
    g["axes"]["method"] = ["slow_sft"]
    g["base"]["train"]["max_steps"] = 6
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(g))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out)]
    proc = subprocess.Popen([*cmd, "--plugin", "slow_plugin"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_shell)  # fmt: skip
    deadline = time.time() + 300
    while time.time() < deadline and not any(r.get("status") == "running" for r in records(out).values()):
        time.sleep(0.2)
    time.sleep(1.0)
    finished_before = {k for k, r in records(out).items() if r["status"] == "finished"}
    start = time.time()
    proc.send_signal(signal.SIGINT)  # to the grid's process only, as `kill -INT` would
    proc.wait(timeout=120)
    assert time.time() - start < 15, "the grid did not stop within seconds"
    statuses = {k: r["status"] for k, r in records(out).items()}  # a failure says what the grid saw
    assert proc.returncode != 0, (finished_before, statuses, proc.stderr.read()[-3000:])
    after = records(out)
    assert {k for k, r in after.items() if r["status"] == "finished"} == finished_before  # nothing ran on
    assert not any(r["status"] == "running" for r in after.values())
    plan = oxbench(
        "run", "--grid", str(grid), "--out", str(out), "--plan", "--plugin", "slow_plugin", env=env
    )
    unfinished = 4 - sum(r["status"] == "finished" for r in after.values())
    assert f"to run {unfinished}" in plan.stdout, plan.stdout + plan.stderr


def test_two_runs_of_one_grid_share_the_work(tmp_path, micro_model_dir):
    """Two ``oxbench run`` of the same grid into one --out, started together (issue 16): no cell
    trained twice (the loss is called once per step of each cell, as by one run alone), no false
    failure, no truncated log; both exit 0."""
    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN + COUNTING)
    g = yaml.safe_load(micro_grid(tmp_path, micro_model_dir, seeds=(0, 1, 2, 3)).read_text())
    g["axes"]["method"] = ["slow_sft"]
    g["base"]["train"]["max_steps"] = 3  # (8 problems in batches of 4: 2 steps); a step is one loss call
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(g))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out, calls = tmp_path / "out", tmp_path / "shared.calls"
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out), "--plugin",
           "slow_plugin"]  # fmt: skip
    procs = [subprocess.Popen(cmd, env={**env, "SLOW_CALLS": str(calls)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    recs = records(out)
    assert len(recs) == 4 and all(r["status"] == "finished" for r in recs.values())
    trained = sum(r["optimizer_steps"] for r in recs.values())
    assert trained == 4 * 2 and calls.read_text().count("\n") == trained, "a cell was trained twice"
    for k in recs:  # the log of the process that trained the cell survived
        assert "slow_sft" in (out / "ex" / k / "train.log").read_text(), k


FULL_DISK_PLUGIN = """
import errno
import os

from oxbench.grid import executors, runs

_config_file = executors._config_file
_log = runs.MetricsLog.__call__


def config_file(cfg, d):  # the grid cannot write the run directory of seed 1
    if cfg.seed == 1 and os.environ.get("FULL_DISK"):
        raise OSError(errno.ENOSPC, "No space left on device", str(d))
    return _config_file(cfg, d)


def log(self, row):  # the cell of seed 2 cannot append its metrics at step 2
    if '-s2-' in str(self.path) and row["step"] == 2 and os.environ.get("FULL_DISK"):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
    return _log(self, row)


executors._config_file = config_file
runs.MetricsLog.__call__ = log

from losses import LossSpec
from losses.sft import spec as sft

spec = LossSpec(name="sft_full_disk", fn=sft.fn, paradigm="sft", data="sft", needs_reference=False,
                paper="none", description="sft on a disk that fills up (tests only)")
"""


def test_a_full_disk_mid_grid_is_a_one_line_failure_and_resumable(tmp_path, micro_model_dir):
    """ENOSPC where the grid writes a cell's files, and inside a cell while it trains: each is a one-line
    failure naming the file, the other cells finish, the grid exits 1 with no traceback, and a rerun
    (the disk freed) runs only the two that failed."""
    (tmp_path / "full_disk.py").write_text(FULL_DISK_PLUGIN)
    g = yaml.safe_load(micro_grid(tmp_path, micro_model_dir, seeds=(0, 1, 2)).read_text())
    g["base"]["train"]["max_steps"] = 2
    g["axes"]["method"] = ["sft_full_disk"]
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(g))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    cmd = ["run", "--grid", str(grid), "--out", str(out), "--plugin", "full_disk"]
    proc = oxbench(*cmd, env={**env, "FULL_DISK": "1"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    err = " ".join(proc.stderr.split())
    assert "cannot write its run directory: OSError: [Errno 28] No space left on device" in err, err
    assert (
        "OSError: [Errno 28] No space left on device"
        in records(out)[next(k for k in records(out) if "-s2-" in k)]["error"]
    )
    assert sorted(r["status"] for r in records(out).values()) == [
        "failed",
        "finished",
    ]  # seed 1: nothing written
    proc = oxbench(*cmd, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "to run 2" in proc.stdout and len(records(out)) == 3
    assert all(r["status"] == "finished" for r in records(out).values())
