"""What each cell asks its cluster scheduler for (issue 38, item 2): its ranks' GPUs and CPUs, the vLLM
servers' own GPUs where they run apart, and Slurm's partition, account, QOS and extra options; checked in
the sbatch script submitit writes and in ``--plan``; what Ray hands a task is checked by the Ray
pre-emption test (tests/test_preemption.py), whose cell asks for a GPU."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from test_cli import grid, write

from oxbench.config import RunConfig
from oxbench.grid.clusters import Resources, cell_request, slurm_parameters

GPU = Resources(gpus_per_rank=1, cpus_per_rank=4, partition="gpu", account="lab", qos="high",
                sbatch=("--constraint=h100", "--exclusive"))  # fmt: skip


@pytest.mark.parametrize(
    "online,nproc,gpus",
    [
        ({}, 2, 2),  # a GPU per rank
        ({"backend": "vllm", "vllm_placement": "colocate"}, 2, 2),  # the server shares its rank's GPU
        ({"backend": "vllm", "vllm_placement": "separate"}, 2, 4),  # one server GPU per rank
        ({"backend": "vllm", "vllm_placement": "auto"}, 1, 2),  # the asynchronous study's setting
        ({"backend": "vllm", "vllm_placement": "separate", "vllm_devices": [5]}, 1, 6),
    ],
)
def test_a_cell_requests_the_gpus_it_uses(online, nproc, gpus):
    cfg = RunConfig(method="sgrpo", online=online)
    assert cell_request(cfg, nproc, GPU) == {"nodes": 1, "ranks": nproc, "gpus": gpus, "cpus": 4 * nproc}
    assert cell_request(cfg, nproc, Resources()) == {
        "nodes": 1,
        "ranks": nproc,
        "gpus": 0,
        "cpus": nproc,
    }  # a CPU cluster


def test_the_sbatch_script_asks_for_them(tmp_path, monkeypatch):
    """The script submitit would submit for a 2-rank vLLM-separate cell (submitit's own writer; a stand-in
    ``srun`` on the PATH lets it start off a cluster, and nothing is submitted)."""
    import submitit

    (tmp_path / "bin").mkdir()
    srun = tmp_path / "bin" / "srun"
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cfg = RunConfig(method="sgrpo", online={"backend": "vllm", "vllm_placement": "separate"})
    ex = submitit.AutoExecutor(folder=tmp_path / "jobs", cluster="slurm")
    ex.update_parameters(**slurm_parameters(cell_request(cfg, 2, GPU), GPU, timeout_min=60))
    script = ex._executor._make_submission_file_text("python -m oxbench.grid.cell", "uid")
    for line in ("#SBATCH --gpus-per-node=4", "#SBATCH --cpus-per-task=8", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --nodes=1", "#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --qos=high",
                 "#SBATCH --constraint=h100", "#SBATCH --exclusive", "#SBATCH --time=60"):  # fmt: skip
        assert line in script, (line, script)


def test_the_grid_file_sets_the_requests_and_the_command_line_wins(tmp_path, micro_model_dir):
    """A grid's ``cluster`` section is the default of the run flags: ``--plan`` prints what each cell asks
    for from it; a flag given on the command line wins, and ``--sbatch`` lines add to the file's."""
    cluster = {"nproc": 2, "nnodes": 2, "gpus_per_rank": 1, "cpus_per_rank": 3, "partition": "gpu",
               "sbatch": ["--constraint=h100"]}  # fmt: skip
    g = write(tmp_path, "g.yaml", {**grid(micro_model_dir, axes={"method": ["sft"], "seed": [0]}),
                                   "cluster": cluster})  # fmt: skip
    base = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(g), "--out", str(tmp_path / "o")]
    plan = subprocess.run([*base, "--plan", "--executor", "slurm"], capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    assert ("slurm: 1 cell(s) each request 2 nodes, each 2 rank(s), 2 GPU(s), 6 CPU(s), partition gpu, "
            "--constraint=h100") in plan.stdout, plan.stdout  # fmt: skip
    mine = [
        *base,
        "--plan",
        "--executor",
        "ray",
        "--nnodes",
        "1",
        "--gpus-per-rank",
        "0",
        "--sbatch",
        "--x=1",
    ]
    plan = subprocess.run(mine, capture_output=True, text=True)
    assert (
        "ray: 1 cell(s) each request 2 rank(s), 0 GPU(s), 6 CPU(s), partition gpu, --constraint=h100, --x=1"
        in (plan.stdout)
    ), plan.stdout
    bad = write(tmp_path, "bad.yaml", {**grid(micro_model_dir), "cluster": {"nproc": 0}})
    proc = subprocess.run([*base[:5], str(bad), "--plan"], capture_output=True, text=True)
    assert (
        proc.returncode == 2 and "cluster.nproc" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    )
