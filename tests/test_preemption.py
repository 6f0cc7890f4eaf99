"""Pre-emption through real signals and processes (issue 16), through each executor: Slurm (submitit's
pre-emption signal, the job requeued), Ray (SIGTERM to the cell, the task retried), and a cell whose
loss hangs. The local executor's SIGTERM to the grid (its exit status, its message, the checkpoint
kept and the resume) is tests/test_multinode.py's pre-emption test, at 2 ranks and then 2 nodes; the
resume to the byte of ``eval.jsonl`` is tests/test_soak.py's (``resumed_bitwise``). (A 1-rank copy of
the SIGTERM test, with its own never-stopped reference, ran here until 2026-12-07: 31 s of CI.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from test_executors import SLOW_PLUGIN, micro_grid, records

pytestmark = pytest.mark.slow


def _grid(tmp_path, model_dir):
    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    g = yaml.safe_load(micro_grid(tmp_path, model_dir, seeds=(0,)).read_text())
    g["axes"]["method"] = ["slow_sft"]
    g["base"]["train"]["max_steps"] = 6
    g["base"]["data"]["n_train"] = 24  # 6 steps of 4
    g["base"]["checkpoint"] = {"every": 2}
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(g))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    return grid, env


def _start(grid, out, env) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out)]
    return subprocess.Popen([*cmd, "--plugin", "slow_plugin"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _losses(run_dir) -> list[float]:
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _process_with(*words: bytes) -> int:
    """The pid of the process whose command line has every one of ``words`` as an argument."""
    for proc in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{proc}/cmdline", "rb").read().split(b"\0")
        except (OSError, ValueError):
            continue
        if all(w in cmd for w in words):
            return int(proc)
    raise AssertionError(f"no process with {words}")


def _submitit_task(folder) -> int:
    """The pid of the process running submitit's job (``python -m submitit.core._submit FOLDER``)."""
    return _process_with(b"submitit.core._submit", str(folder).encode())


def test_a_preempted_slurm_job_checkpoints_is_requeued_and_resumes(tmp_path, micro_model_dir):
    """submitit's pre-emption signal (SIGUSR2 to the job, as Slurm sends before pre-empting) makes the
    job stop its cell, which checkpoints; submitit requeues the job, and the requeued job resumes the
    cell from that checkpoint to a finished record. (submitit's local cluster: its job id is the pid.)"""
    pytest.importorskip("submitit")
    grid, env = _grid(tmp_path, micro_model_dir)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out),
           "--plugin", "slow_plugin", "--executor", "slurm", "--slurm-cluster", "local"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list(out.glob("ex/*/checkpoints/step-00000002")):
        time.sleep(0.1)
    (job,) = {p.name.split("_")[0] for p in (out / ".submitit").glob("*_submitted.pkl")}
    os.kill(_submitit_task(out / ".submitit"), signal.SIGUSR2)  # the job's task, as Slurm signals it
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    (rec,) = records(out).values()
    assert rec["status"] == "finished" and rec["resumed_from_step"] >= 2, rec
    logs = " ".join(p.read_text() for p in (out / ".submitit").glob(f"{job}_*_log.*"))
    assert "this job is preempted" in logs and f"Requeued job {job}" in logs, logs[-2000:]


GPU_PROBE = """
import dataclasses
import json
import os

from slow_plugin import spec as slow


def probe(inputs):
    with open(os.environ["PROBE_OUT"], "a") as f:
        f.write(json.dumps(os.environ.get("CUDA_VISIBLE_DEVICES")) + "\\n")
    return slow.fn(inputs)


spec = dataclasses.replace(slow, name="gpu_probe", fn=probe,
                           description="slow sft recording its CUDA_VISIBLE_DEVICES (tests only)")
"""


def test_a_preempted_ray_cell_gets_its_gpu_is_retried_and_resumes(tmp_path, micro_model_dir):
    """A local Ray cluster declared with 2 GPUs; a 1-rank cell asking 1 GPU per rank is handed one (its
    cell process sees it as ``CUDA_VISIBLE_DEVICES``, written by a loss that records it, issue 38.2).
    Then SIGTERM to the cell process (a node being drained): the cell checkpoints and records
    ``preempted``, the task raises, Ray retries it, and the retry resumes from the checkpoint. (One Ray
    cluster for both since 2026-12-07: each start costs CI about 15 s.)"""
    pytest.importorskip("ray")
    grid, env = _grid(tmp_path, micro_model_dir)
    g = yaml.safe_load(grid.read_text())
    g["axes"]["method"] = ["gpu_probe"]
    grid.write_text(yaml.safe_dump(g))
    (tmp_path / "gpu_probe.py").write_text(GPU_PROBE)
    out, probe = tmp_path / "out", tmp_path / "seen.jsonl"
    script = (
        "import ray, sys\n"
        "ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)\n"
        "from oxbench_cli import main\n"
        f"sys.argv = ['oxbench', 'run', '--grid', {str(grid)!r}, '--out', {str(out)!r},\n"
        "            '--executor', 'ray', '--gpus-per-rank', '1', '--plugin', 'gpu_probe']\n"
        "main()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], env={**env, "PROBE_OUT": str(probe)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.time() + 300
    while time.time() < deadline and not list(out.glob("ex/*/checkpoints/step-00000002")):
        time.sleep(0.1)
    os.kill(_process_with(b"oxbench.grid.cell", str(out).encode()), signal.SIGTERM)
    said, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, said[-2000:] + err[-3000:]
    assert "ray: 1 cell(s) each request 1 rank(s), 1 GPU(s), 1 CPU(s)" in said, said[-2000:]
    (rec,) = records(out).values()
    assert rec["status"] == "finished" and rec["resumed_from_step"] >= 2, rec
    seen = {json.loads(line) for line in probe.read_text().splitlines()}
    assert seen and seen <= {"0", "1"}, seen  # one of the two declared GPUs, in both attempts


HUNG_PLUGIN = """
import os
import time
from pathlib import Path

from losses import LossSpec
from losses.sft import spec as sft

_calls = 0


def hung_sft(inputs):
    global _calls
    _calls += 1
    if _calls == 3:  # the third step never returns
        Path(os.environ["HUNG_MARK"]).write_text("hung")
        while True:
            time.sleep(0.05)
    return sft.fn(inputs)


spec = LossSpec(name="hung_sft", fn=hung_sft, paradigm="sft", data="sft", needs_reference=False,
                paper="none", description="sft whose third step hangs (tests only)")
"""


@pytest.mark.parametrize("signals", [1, 2])
def test_the_first_sigterm_stops_a_cell_whose_loss_hangs(tmp_path, micro_model_dir, signals):
    """A step that never reaches its boundary (a loss that never returns) is stopped by the watchdog within
    ``OXBENCH_STOP_GRACE_S`` of the first SIGTERM: the cell is recorded pre-empted, never left running,
    and the grid's summary says what the record says, a second SIGTERM on the way or not."""
    (tmp_path / "hung_plugin.py").write_text(HUNG_PLUGIN)
    g = yaml.safe_load(micro_grid(tmp_path, micro_model_dir, seeds=(0,)).read_text())
    g["axes"]["method"] = ["hung_sft"]
    g["base"]["train"]["max_steps"] = 6
    g["base"]["data"]["n_train"] = 24
    g["base"]["checkpoint"] = {"every": 1}
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(g))
    mark = tmp_path / "hung"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "HUNG_MARK": str(mark), "OXBENCH_STOP_GRACE_S": "3"}  # fmt: skip
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(tmp_path / "out")]
    proc = subprocess.Popen([*cmd, "--plugin", "hung_plugin"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.time() + 300
    while time.time() < deadline and not mark.exists():
        time.sleep(0.1)
    assert mark.exists(), "the loss never hung"
    t0 = time.monotonic()
    for _ in range(signals):
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
    _, err = proc.communicate(timeout=120)
    assert time.monotonic() - t0 < 30, err[-2000:]
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    (rec,) = records(tmp_path / "out").values()
    assert rec["status"] == "preempted" and "did not reach its boundary within 3 s" in rec["error"], rec[
        "error"
    ]
    assert "1 cell(s) preempted" in err and "0 not run" in err and "Traceback" not in err, err[-2000:]
