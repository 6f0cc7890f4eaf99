"""Run grid cells, each in its own process, so one crash or leak never takes the grid down.

* ``local``: a pool of ``--workers`` subprocesses on this machine.
* ``ray``: one Ray task per cell with its CPU/GPU resources (``--ray-address`` for a cluster).
* ``slurm``: one submitit job per cell (``cluster="local"`` runs them on this machine, for tests).

Every executor launches the same command, ``python -m oxbench.cell CONFIG.json OUT``, whose
process holds an exclusive lock on the run directory while it runs and dies with its parent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from oxbench.config import RunConfig
from oxbench.runs import read_record, run_dir


def _config_file(cfg: RunConfig, d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".config.", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg.model_dump(), f)
    return Path(tmp)


def _die_with_parent() -> None:  # runs in the child between fork and exec (Linux)
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def cell_command(cfg_file: Path, out: Path, nproc: int = 1) -> list[str]:
    if nproc > 1:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "oxbench.cell",
            str(cfg_file),
            str(out),
        ]
    return [sys.executable, "-m", "oxbench.cell", str(cfg_file), str(out)]


def run_subprocess(cfg: RunConfig, out: Path, nproc: int = 1, workers: int = 1) -> dict:
    """Run one cell in a child process; its output goes to ``<run_dir>/train.log``."""
    d = run_dir(out, cfg.grid, cfg.run_id())
    cfg_file = _config_file(cfg, d)
    try:
        with open(d / "train.log", "w") as log:
            proc = subprocess.run(
                cell_command(cfg_file, out, nproc),
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
                env=_child_env(workers),
            )
    finally:
        cfg_file.unlink(missing_ok=True)
    rec = read_record(d)
    if rec is None or rec.get("status") not in ("finished", "failed"):
        tail = (d / "train.log").read_text().strip().splitlines()[-1:] if (d / "train.log").exists() else []
        rec = {
            **(rec or {}),
            "run_id": cfg.run_id(),
            "status": "failed",
            "method": cfg.method,
            "scale": cfg.model.name,
            "seed": cfg.seed,
            "error": f"process exited with code {proc.returncode}: {' '.join(tail)[:300]}",
        }
        from oxbench.runs import write_record

        write_record(d, rec)
    return rec


def prepare_local(cells: list[RunConfig], out: Path, *, workers: int = 1) -> list[str]:
    """Run the shared preparation (pre-training, self-play) once per distinct key; returns errors."""
    from oxbench.runner import shared_key

    reps: dict[str, RunConfig] = {}
    for c in cells:
        reps.setdefault(shared_key(c), c)
    # pre-training first (one per scale), then the self-play data that needs it
    by_scale: dict[str, list[RunConfig]] = {}
    for c in reps.values():
        by_scale.setdefault(c.model.name, []).append(c)
    errors = []

    def prep(c: RunConfig) -> str | None:
        d = Path(out) / ".prepare"
        cfg_file = _config_file(c, d)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "oxbench.cell", "--prepare", str(cfg_file)],
                capture_output=True,
                text=True,
                preexec_fn=_die_with_parent,
                env=_child_env(workers),
            )
        finally:
            cfg_file.unlink(missing_ok=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return f"preparing {c.model.name} for {c.method}: {last}"
        return None

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for err in pool.map(lambda group: [prep(c) for c in group], by_scale.values()):
            errors += [e for e in err if e]
    return errors


DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _child_env(workers: int) -> dict:
    """Each cell is its own distributed world: never inherit the parent's rank or port."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env["PYTHONUNBUFFERED"] = "1"
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    return env


def run_local(
    cells: list[RunConfig],
    out: Path,
    *,
    workers: int = 1,
    nproc: int = 1,
    on_done: Callable[[RunConfig, dict], None] | None = None,
) -> list[dict]:
    results = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(run_subprocess, c, out, nproc, workers): c for c in cells}
        for fut in as_completed(futures):
            rec = fut.result()
            results.append(rec)
            if on_done:
                on_done(futures[fut], rec)
    return results


def _ray_cell(cfg_dict: dict, out: str, nproc: int) -> dict:
    return run_subprocess(RunConfig(**cfg_dict), Path(out), nproc)


def run_ray(
    cells: list[RunConfig],
    out: Path,
    *,
    workers: int = 1,
    nproc: int = 1,
    address: str | None = None,
    cpus_per_cell: float = 1.0,
    gpus_per_cell: float = 0.0,
    on_done: Callable[[RunConfig, dict], None] | None = None,
) -> list[dict]:
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        kwargs = {"address": address} if address else {"num_cpus": max(1, workers) * cpus_per_cell}
        ray.init(include_dashboard=False, log_to_driver=False, **kwargs)
    task = ray.remote(num_cpus=cpus_per_cell, num_gpus=gpus_per_cell, max_retries=0)(_ray_cell)
    refs = {task.remote(c.model_dump(), str(Path(out).resolve()), nproc): c for c in cells}
    results = []
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            try:
                rec = ray.get(ref)
            except Exception as exc:  # a dead worker is a failed cell, never a lost one
                c = refs[ref]
                rec = {
                    "run_id": c.run_id(),
                    "status": "failed",
                    "method": c.method,
                    "scale": c.model.name,
                    "seed": c.seed,
                    "error": f"ray task failed: {type(exc).__name__}",
                }
            results.append(rec)
            if on_done:
                on_done(refs[ref], rec)
    if started_here:
        ray.shutdown()
    return results


def run_slurm(
    cells: list[RunConfig],
    out: Path,
    *,
    nproc: int = 1,
    cluster: str | None = None,
    folder: str | None = None,
    slurm_kwargs: dict | None = None,
    on_done: Callable[[RunConfig, dict], None] | None = None,
) -> list[dict]:
    import submitit

    folder = folder or str(Path(out) / ".submitit")
    ex = submitit.AutoExecutor(folder=folder, cluster=cluster)
    ex.update_parameters(timeout_min=(slurm_kwargs or {}).pop("timeout_min", 240), **(slurm_kwargs or {}))
    jobs = [(c, ex.submit(_ray_cell, c.model_dump(), str(Path(out).resolve()), nproc)) for c in cells]
    results = []
    for c, job in jobs:
        try:
            rec = job.result()
        except Exception as exc:
            rec = {
                "run_id": c.run_id(),
                "status": "failed",
                "method": c.method,
                "scale": c.model.name,
                "seed": c.seed,
                "error": f"slurm job failed: {type(exc).__name__}",
            }
        results.append(rec)
        if on_done:
            on_done(c, rec)
    return results
