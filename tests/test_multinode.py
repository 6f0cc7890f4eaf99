"""Cells across nodes (issue 38): two torchrun agents on this machine, joined by torchrun's c10d
rendezvous over gloo, stand in for two nodes.

* a 2-node x 1-rank cell's records equal the standalone 2-rank cell's (online: sgrpo, whose rounds
  sample, score and train; until 2026-12-07 dpo too, whose path across ranks the lost-node, pre-emption
  and Ray tests below also run);
* a node lost mid-step (its agent and ranks killed) fails its cell with one line naming the node, and
  the grid goes on to its next cell;
* a cell pre-empted at 2 ranks resumes on 2 nodes and then on 1 rank, and ends where the
  never-stopped run ends;
* the Slurm script and ``srun`` line submitit writes for a 2-node cell.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_executors import records

from oxbench.config import RunConfig
from oxbench.grid.clusters import Resources, cell_request, slurm_parameters, slurm_rendezvous
from oxbench.grid.nodes import Rendezvous, agent_command, lost_node

pytestmark = pytest.mark.slow

BASE = {"data": {"n_train": 16, "max_new_tokens": 8}, "train": {"batch_size": 2, "max_steps": 2, "lr": 1e-3},
        "eval": {"n_test": 4, "n_ood": 0, "k": 0, "max_new_tokens": 8},
        "faults": {"collective_timeout_s": 30}}  # fmt: skip
TIMED = ("elapsed", "seconds", "_s")  # key endings of what a clock measures (the rest must be equal)


def _grid(tmp: Path, model_dir: str, methods: list[str], extra: dict | None = None) -> Path:
    known = {"dpo": {"data": {"chosen_source": "gold"}},
             "sgrpo": {"online": {"rounds": 2, "n": 2, "prompts_per_batch": 2}}, **(extra or {})}  # fmt: skip
    g = {"name": "mn", "base": {"model": {"name": model_dir}, **BASE}, "axes": {"method": methods},
         "methods": {m: known[m] for m in methods if m in known}}  # fmt: skip
    path = tmp / f"g-{len(list(tmp.glob('g-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(g))
    return path


def _run(grid: Path, out: Path, *flags: str, env: dict | None = None, timeout: float = 600):
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out), *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith(TIMED)} for r in rows]


def _metrics(out: Path, run_id: str) -> list[dict]:
    lines = (out / "mn" / run_id / "metrics.jsonl").read_text().splitlines()
    return _untimed([json.loads(line) for line in lines])


def test_a_two_node_cell_records_equal_the_two_rank_cell(tmp_path, micro_model_dir):
    grid = _grid(tmp_path, micro_model_dir, ["sgrpo"])
    one = _run(grid, tmp_path / "one", "--nproc", "2")
    two = _run(grid, tmp_path / "two", "--nnodes", "2", "--nproc", "1")
    assert one.returncode == 0 and two.returncode == 0, (one.stderr[-2000:], two.stderr[-2000:])
    a, b = records(tmp_path / "one"), records(tmp_path / "two")
    assert sorted(a) == sorted(b) and len(a) == 1
    for run_id in a:
        assert (a[run_id]["nodes"], b[run_id]["nodes"]) == (1, 2)
        assert a[run_id]["world_size"] == b[run_id]["world_size"] == 2
        differ = {k for k in a[run_id] if a[run_id][k] != b[run_id][k]} - {"nodes", "timing", "compute"}
        assert not differ, {k: (a[run_id][k], b[run_id][k]) for k in differ}
        assert _untimed([a[run_id]["compute"]]) == _untimed([b[run_id]["compute"]])
        assert _metrics(tmp_path / "one", run_id) == _metrics(tmp_path / "two", run_id)
        assert (tmp_path / "two" / "mn" / run_id / "train.node1.log").exists()


NODE_KILL = """
import os
import time
from pathlib import Path

from losses import LossSpec
from losses.sft import spec as sft


def waits_on_rank1(inputs):
    if os.environ.get("RANK") == "1":  # its pid, then it waits here, mid-step, for its node to be taken down
        Path(os.environ["FAULT_PID_DIR"], "rank1.pid").write_text(str(os.getpid()))
        time.sleep(600)
    return sft.fn(inputs)


spec = LossSpec(name="node_lost", fn=waits_on_rank1, paradigm="sft", data="sft", needs_reference=False,
                paper="none", description="rank 1 waits mid-step (tests only)")
"""


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_lost_node_fails_its_cell_naming_the_node_and_the_grid_goes_on(tmp_path, micro_model_dir):
    """Rank 1's node is taken down mid-step: its torchrun agent's process group and rank 1 get SIGKILL,
    as a machine that loses power would. The cell fails with one line naming that node; the grid's next
    cell (sft, 2 nodes) finishes."""
    (tmp_path / "node_plugin.py").write_text(NODE_KILL)
    pids = tmp_path / "pids"
    pids.mkdir()
    grid = _grid(tmp_path, micro_model_dir, ["node_lost", "sft"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "FAULT_PID_DIR": str(pids)}  # fmt: skip
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(tmp_path / "out"),
           "--nnodes", "2", "--plugin", "node_plugin"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while not (pids / "rank1.pid").exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        time.sleep(1.0)
        rank1 = int((pids / "rank1.pid").read_text())
        agent = _parent(rank1)
        os.killpg(os.getpgid(agent), signal.SIGKILL)
        os.kill(rank1, signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    recs = {r["method"]: r for r in records(tmp_path / "out").values()}
    lost = recs["node_lost"]
    assert lost["status"] == "failed", (lost, err[-2000:])
    assert len(lost["error"].splitlines()) == 1, lost["error"]
    assert lost["error"].startswith(("node 0 of 2 (localhost) killed by SIGKILL",
                                     "node 1 of 2 (localhost) killed by SIGKILL")), lost["error"]  # fmt: skip
    assert recs["sft"]["status"] == "finished" and recs["sft"]["nodes"] == 2, (recs["sft"], err[-2000:])
    assert proc.returncode == 1


def test_a_cell_preempted_on_two_ranks_resumes_on_two_nodes_then_one_rank(tmp_path, micro_model_dir):
    """A 6-step sft cell checkpointing every step, pre-empted (SIGTERM) while it runs on 2 ranks at
    ``--zero-stage 3``, resumes on 2 nodes without ZeRO (pre-empted again), then on 1 rank (2 micro-batches per step: the global batch kept), and
    its losses equal the never-stopped 2-rank run's (to 1e-4: sft normalises by tokens per micro-batch,
    and 1 rank cuts the batch into micro-batches otherwise than 2 ranks do)."""
    slow = {"slow_sft": {"checkpoint": {"every": 1}}}
    from test_executors import SLOW_PLUGIN

    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    grid = _grid(tmp_path, micro_model_dir, ["slow_sft"], slow)
    g = yaml.safe_load(grid.read_text())
    g["base"]["train"]["max_steps"], g["base"]["data"]["n_train"] = 6, 24
    grid.write_text(yaml.safe_dump(g))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    whole = _run(grid, tmp_path / "whole", "--nproc", "2", "--plugin", "slow_plugin", env=env)
    assert whole.returncode == 0, whole.stderr[-2000:]
    out = tmp_path / "out"
    for flags, at in ((["--nproc", "2", "--zero-stage", "3"], 2), (["--nnodes", "2"], 4)):
        _preempt_at(grid, out, [*flags, "--plugin", "slow_plugin"], env, at)
    last = _run(grid, out, "--plugin", "slow_plugin", env=env)
    assert last.returncode == 0, last.stderr[-2000:]
    (run_id,) = records(out)
    rec = records(out)[run_id]
    assert rec["status"] == "finished" and rec["resumed_from_step"] >= 4 and rec["world_size"] == 1
    assert rec["zero_stage"] == 0 and rec["nodes"] == 1
    assert not (out / "mn" / run_id / "checkpoints").exists()  # deleted once the cell finished
    mine, ref = _metrics(out, run_id), _metrics(tmp_path / "whole", run_id)
    assert [r["step"] for r in mine] == [r["step"] for r in ref] == [1, 2, 3, 4, 5, 6]
    for r, w in zip(mine, ref):  # sft's loss is a token mean per micro-batch: 1 rank x 2 micro-batches
        assert r["loss"] == pytest.approx(w["loss"], rel=1e-4), (r, w)  # splits the batch unlike 2 x 1


def _preempt_at(grid: Path, out: Path, flags: list[str], env: dict, step: int) -> None:
    """Run the grid until its cell has checkpointed ``step``, then SIGTERM it (a scheduler's warning)."""
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out), *flags]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list(out.glob(f"mn/*/checkpoints/step-{step:08d}")):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)  # the grid's process only, as a scheduler's `kill -TERM` would
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "stopped by SIGTERM: 1 cell(s) preempted" in err, err[-2000:]
    (rec,) = records(out).values()
    assert rec["status"] == "preempted" and "SIGTERM received; checkpoint at step" in rec["error"], rec
    kept = [p.name for p in (out / "mn" / rec["run_id"] / "checkpoints").iterdir()]
    assert kept and all(name.startswith("step-") for name in kept), kept  # no partial one left


def test_the_slurm_script_of_a_two_node_cell(tmp_path, monkeypatch):
    """submitit's sbatch script for a 2-node x 2-rank GPU cell: 2 nodes, one task (one ``srun`` task,
    one torchrun agent) per node with its 2 GPUs; and each task's agent command joins the same c10d
    rendezvous on the allocation's first host."""
    import submitit

    (tmp_path / "bin").mkdir()
    srun = tmp_path / "bin" / "srun"
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    res = Resources(gpus_per_rank=1, cpus_per_rank=4, partition="gpu")
    req = cell_request(RunConfig(method="dpo"), 2, res, nnodes=2)
    assert req == {"nodes": 2, "ranks": 2, "gpus": 2, "cpus": 8}
    ex = submitit.AutoExecutor(folder=tmp_path / "jobs", cluster="slurm")
    ex.update_parameters(**slurm_parameters(req, res, timeout_min=60))
    script = ex._executor._make_submission_file_text("python -m oxbench.grid.cell", "uid")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=2",
                 "#SBATCH --cpus-per-task=8", "#SBATCH --partition=gpu"):  # fmt: skip
        assert line in script, (line, script)
    assert "srun --unbuffered" in script, script
    rdzv = [slurm_rendezvous("4242", ["gpu-a", "gpu-b"], 2, "run") for _ in range(2)]
    assert rdzv[0] == rdzv[1] and rdzv[0].endpoint.startswith("gpu-a:")
    cmds = [agent_command(Path("c.json"), Path("out"), 2, rdzv[0], node) for node in (0, 1)]
    for node, cmd in enumerate(cmds):
        assert "--nnodes=2" in cmd and "--nproc_per_node=2" in cmd and "--rdzv_backend=c10d" in cmd
        assert f"--rdzv_endpoint={rdzv[0].endpoint}" in cmd and f"--rdzv_conf=is_host={int(node == 0)}" in cmd


def test_the_node_blamed_is_the_one_lost_first():
    ends = [(10.0, 0, 1, "a"), (10.5, 1, -9, "b")]  # node 0 failed because node 1 was killed
    assert lost_node(ends, 2) == "node 1 of 2 (b) killed by SIGKILL"
    assert lost_node([(1.0, 0, 0, "a"), (2.0, 1, 3, "b")], 2) == "node 1 of 2 (b) exited with code 3"
    assert lost_node([(1.0, 0, 0, "a"), (1.0, 1, 0, "b")], 2) is None
    assert agent_command(Path("c"), Path("o"), 1, Rendezvous(1, "h:1", "r"))[1:3] == [
        "-m",
        "oxbench.grid.cell",
    ]


def test_a_cell_spans_two_ray_nodes(tmp_path, micro_model_dir):
    """A local Ray cluster of two nodes (two raylets, 1 CPU each: no node holds both bundles): a 2-node
    cell takes a STRICT_SPREAD placement group, an agent on each node, and finishes at world size 2 (what
    a 2-node cell's records hold is compared with the 2-rank cell's by the local stand-in's test)."""
    grid = _grid(tmp_path, micro_model_dir, ["dpo"])
    script = (
        "import sys, ray\nfrom ray.cluster_utils import Cluster\n"
        "c = Cluster(initialize_head=True, head_node_args={'num_cpus': 1})\nc.add_node(num_cpus=1)\n"
        "ray.init(address=c.address, include_dashboard=False, log_to_driver=False)\n"
        "assert len([n for n in ray.nodes() if n['Alive']]) == 2\n"
        "from oxbench_cli import main\n"
        f"sys.argv = ['oxbench', 'run', '--grid', {str(grid)!r}, '--out', {str(tmp_path / 'ray')!r},\n"
        "            '--executor', 'ray', '--nnodes', '2']\n"
        "try:\n    main()\nfinally:\n    ray.shutdown()\n    c.shutdown()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ray: 1 cell(s) each request 2 nodes, each 1 rank(s), 0 GPU(s), 1 CPU(s)" in proc.stdout
    ((run_id, a),) = records(tmp_path / "ray").items()
    assert a["status"] == "finished" and a["nodes"] == 2 and a["world_size"] == 2, a
    assert (tmp_path / "ray" / "mn" / run_id / "train.node1.log").exists()


def test_a_bad_zero_stage_is_one_line_before_any_work(tmp_path, micro_model_dir):
    proc = _run(_grid(tmp_path, micro_model_dir, ["dpo"]), tmp_path / "out", "--zero-stage", "5")
    assert proc.returncode == 2 and "--zero-stage: must be 0, 1, 2 or 3, got 5" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()
