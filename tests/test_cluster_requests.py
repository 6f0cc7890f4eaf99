"""What each cell asks its cluster scheduler for (issue 38, item 2): its ranks' GPUs and CPUs, the vLLM
servers' own GPUs where they run apart, and Slurm's partition, account, QOS and extra options; checked in
the sbatch script submitit writes, in what Ray hands a task, and in ``--plan``."""

from __future__ import annotations

import json
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


@pytest.mark.slow
def test_ray_gives_each_cell_the_gpus_it_requested(tmp_path, micro_model_dir):
    """A local Ray cluster declared with 2 GPUs: each of two 1-rank cells asking 1 GPU per rank is handed
    one, and its cell process sees it as ``CUDA_VISIBLE_DEVICES`` (written by a loss that records it);
    both cells finish (the Ray executor's plain multi-cell run, here since 2026-12-07)."""
    (tmp_path / "gpu_probe.py").write_text(
        "import json, os\nfrom losses import LossSpec\nfrom losses.sft import spec as sft\n\n"
        "def probe(inputs):\n"
        "    with open(os.environ['PROBE_OUT'], 'a') as f:\n"
        "        f.write(json.dumps(os.environ.get('CUDA_VISIBLE_DEVICES')) + '\\n')\n"
        "    return sft.fn(inputs)\n\n"
        "spec = LossSpec(name='gpu_probe', fn=probe, paradigm='sft', data='sft', needs_reference=False,\n"
        "                paper='none', description='sft recording its CUDA_VISIBLE_DEVICES (tests only)')\n"
    )
    g = write(tmp_path, "g.yaml", grid(micro_model_dir, axes={"method": ["gpu_probe"], "seed": [0, 1]}))
    probe = tmp_path / "seen.jsonl"
    script = (
        "import ray, sys\n"
        "ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)\n"
        "from oxbench_cli import main\n"
        f"sys.argv = ['oxbench', 'run', '--grid', {str(g)!r}, '--out', {str(tmp_path / 'out')!r},\n"
        "            '--executor', 'ray', '--gpus-per-rank', '1', '--plugin', 'gpu_probe']\n"
        "main()\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PROBE_OUT": str(probe)}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ray: 2 cell(s) each request 1 rank(s), 1 GPU(s), 1 CPU(s)" in proc.stdout
    recs = [json.loads(p.read_text()) for p in (tmp_path / "out").rglob("run.json")]
    assert sorted((r["seed"], r["status"]) for r in recs) == [(0, "finished"), (1, "finished")], recs
    seen = {json.loads(line) for line in probe.read_text().splitlines()}
    assert seen and seen <= {"0", "1"}, seen  # each cell one of the two declared GPUs


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
