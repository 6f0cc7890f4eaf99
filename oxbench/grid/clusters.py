"""Grid cells on a cluster: Ray tasks or Slurm jobs (submitit), one cell across one or several nodes.

Each cell asks for what its ranks use (:func:`cell_request`): per node, ``--nproc`` ranks with their
GPUs and CPUs (and the vLLM servers' own GPUs where they run apart), on ``--nnodes`` nodes.

* Ray, one node: a task with those ``num_gpus``/``num_cpus``; Ray hands it its GPUs as
  ``CUDA_VISIBLE_DEVICES`` and the cell's ranks inherit them.
* Ray, several nodes: a placement group of one bundle per node (``STRICT_SPREAD``: every bundle on
  another node), an actor in each (:class:`NodeAgent`) that starts that node's torchrun agent; the
  rendezvous is hosted on bundle 0's node.
* Slurm: a job of ``--nodes`` nodes and one task per node (submitit starts them with ``srun``); each
  task starts its node's agent, the rendezvous on the allocation's first host.

A task whose worker or node dies, or whose cell is pre-empted, is retried (Ray) or requeued (Slurm,
its cell checkpointed first) and resumes from the cell's checkpoint, at whatever size it gets back.
"""

from __future__ import annotations

import os
import subprocess
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from oxbench.config import RunConfig
from oxbench.grid.executors import (
    RUNNING,
    _child_env,
    _config_file,
    agents_outcome,
    failed_record,
    interrupt_subprocesses,
    run_agents,
    run_subprocess,
)
from oxbench.grid.nodes import Rendezvous, agent_command, free_endpoint
from oxbench.grid.runs import run_dir

RAY_RETRIES = 3  # a task whose worker or node died, or whose cell was pre-empted, runs again (and resumes)


class CellPreempted(RuntimeError):
    """A Ray task's cell was pre-empted (its record says so, its checkpoint holds it): Ray retries it."""


LAUNCH_VARS = ("OXBENCH_PLUGINS", "OXBENCH_ZERO_STAGE")  # what the grid's command line set for its cells


def launch_env() -> dict[str, str]:
    """The grid's launch settings a cell on another node needs (its plugins: a plugin's loss is part of
    its run_id; a ZeRO stage chosen at launch), which a scheduler's workers do not inherit."""
    return {k: os.environ[k] for k in LAUNCH_VARS if os.environ.get(k)}


def _enter_launch(env: dict[str, str]) -> None:
    """:func:`launch_env`'s settings, where a cell runs: set, and the plugins loaded."""
    from oxbench.plugins import load_env_plugins

    os.environ.update(env)
    if env.get("OXBENCH_PLUGINS"):
        load_env_plugins()


def _remote_cell(
    cfg_dict: dict, out: str, nproc: int, raise_preempted: bool = False, launch: dict | None = None
) -> dict:
    """The cell entry a one-node Ray task or Slurm job runs: plain arguments in, the run record out."""
    _enter_launch(launch or {})
    rec = run_subprocess(RunConfig(**cfg_dict), Path(out), nproc)
    if raise_preempted and rec.get("status") == "preempted":
        raise CellPreempted(rec.get("error"))
    return rec


def node_agent(
    cfg_dict: dict, out: str, nproc: int, rdzv: Rendezvous, node: int, host: str, launch: dict | None = None
) -> tuple[float, int, int, str]:
    """Run node ``node``'s torchrun agent of a multi-node cell here, to its end: ``(end time, node,
    return code, host)``, what :func:`~oxbench.grid.executors.agents_outcome` reads."""
    _enter_launch(launch or {})
    cfg = RunConfig(**cfg_dict)
    d = run_dir(Path(out), cfg.grid, cfg.run_id())
    cfg_file = _config_file(cfg, d)
    try:
        cmd = agent_command(cfg_file, Path(out), nproc, rdzv, node)
        env = _child_env(1, nproc)
        (end,) = run_agents([cmd], d, env, cfg.faults.collective_timeout_s, host=host, first_node=node)
    finally:
        cfg_file.unlink(missing_ok=True)
    return end


def stop_subprocesses(timeout: float = 120.0) -> None:
    """SIGTERM the running cell processes and give them ``timeout`` seconds to checkpoint and record."""
    interrupt_subprocesses()
    for proc in list(RUNNING):
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def slurm_cell():
    """A cell as a submitit job. Pre-empted or timed out (submitit's signal), it stops its cell process,
    which checkpoints, and asks submitit to requeue it; the requeued job resumes the cell from there.
    A job of several nodes runs one task per node, each its node's agent (:func:`slurm_rendezvous`)."""
    import submitit

    class SlurmCell(submitit.helpers.Checkpointable):
        def __call__(self, cfg_dict: dict, out: str, nproc: int, launch: dict | None = None, nnodes: int = 1):
            if nnodes == 1:
                return _remote_cell(cfg_dict, out, nproc, launch=launch)
            env = submitit.JobEnvironment()
            rdzv = slurm_rendezvous(env.job_id, env.hostnames, nnodes, RunConfig(**cfg_dict).run_id())
            return node_agent(cfg_dict, out, nproc, rdzv, env.global_rank, env.hostname, launch)

        def checkpoint(self, *args, **kwargs):
            stop_subprocesses()
            return super().checkpoint(*args, **kwargs)

    return SlurmCell()


def slurm_rendezvous(job_id: str, hostnames: list[str], nnodes: int, run_id: str) -> Rendezvous:
    """The rendezvous of a multi-node Slurm job, the same in each of its tasks: on its first host, at a
    port derived from the job's id (every task computes it without talking to the others)."""
    port = 20000 + zlib.crc32(str(job_id).encode()) % 20000
    return Rendezvous(nnodes, f"{hostnames[0]}:{port}", run_id)


@dataclass(frozen=True)
class Resources:
    """What each cell asks a cluster scheduler (Ray, Slurm) for: per rank, and the cluster's own names.
    ``sbatch``: extra Slurm options, ``--key=value`` or ``--flag``."""

    gpus_per_rank: int = 0
    cpus_per_rank: int = 1
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    sbatch: tuple[str, ...] = ()


def cell_request(cfg: RunConfig, nproc: int, res: Resources, nnodes: int = 1) -> dict[str, int]:
    """``{"nodes", "ranks", "gpus", "cpus"}`` a cell of ``nproc`` ranks per node on ``nnodes`` nodes uses
    on each node: a GPU per rank (times ``gpus_per_rank``) plus, for the vLLM backend on GPUs of its own
    (``online.vllm_placement`` separate, or auto, which takes one when there is one: the asynchronous
    study's setting), the servers' GPUs; and ``cpus_per_rank`` per rank."""
    gpus = nproc * res.gpus_per_rank
    o = cfg.online
    if gpus and o.backend == "vllm" and o.vllm_placement in ("separate", "auto"):
        gpus = max(gpus + nproc, max(o.vllm_devices) + 1 if o.vllm_devices else 0)  # one server per rank
    return {"nodes": nnodes, "ranks": nproc, "gpus": gpus, "cpus": nproc * res.cpus_per_rank}


def slurm_parameters(req: dict[str, int], res: Resources, timeout_min: int = 240) -> dict:
    """submitit's parameters for one cell's job: its nodes, one task on each that starts the node's ranks
    (torchrun), holding their GPUs and CPUs, in the partition, account and QOS asked for."""
    params: dict = {
        "timeout_min": timeout_min,
        "nodes": req.get("nodes", 1),
        "tasks_per_node": 1,
        "cpus_per_task": req["cpus"],
    }
    if req["gpus"]:
        params["gpus_per_node"] = req["gpus"]
    names = {"slurm_partition": res.partition, "slurm_account": res.account, "slurm_qos": res.qos}
    params |= {k: v for k, v in names.items() if v}
    extra = dict(o.lstrip("-").split("=", 1) if "=" in o else (o.lstrip("-"), True) for o in res.sbatch)
    return params | ({"slurm_additional_parameters": extra} if extra else {})


def request_line(req: dict[str, int], res: Resources) -> str:
    """What ``--plan`` prints of one cell's request."""
    names = [
        f"{k} {v}" for k, v in (("partition", res.partition), ("account", res.account), ("qos", res.qos)) if v
    ]
    line = ", ".join(
        [f"{req['ranks']} rank(s)", f"{req['gpus']} GPU(s)", f"{req['cpus']} CPU(s)", *names, *res.sbatch]
    )
    return f"{req['nodes']} nodes, each {line}" if req.get("nodes", 1) > 1 else line


def _ray_multinode_cell(cfg_dict: dict, out: str, nproc: int, nnodes: int, req: dict, launch: dict) -> dict:
    """A cell across ``nnodes`` Ray nodes (a Ray task of its own, holding no resources): a
    ``STRICT_SPREAD`` placement group of one bundle per node, an actor in each that runs its node's
    agent; the rendezvous on bundle 0's node. Raises :class:`CellPreempted` for Ray to retry."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundle = {"CPU": req["cpus"], **({"GPU": req["gpus"]} if req["gpus"] else {})}
    pg = placement_group([bundle] * nnodes, strategy="STRICT_SPREAD")
    ray.get(pg.ready())
    try:
        agents = [
            ray.remote(NodeAgent)
            .options(
                num_cpus=req["cpus"],
                num_gpus=req["gpus"],
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=i
                ),
            )
            .remote()
            for i in range(nnodes)
        ]
        cfg = RunConfig(**cfg_dict)
        rdzv = Rendezvous(nnodes, ray.get(agents[0].endpoint.remote()), cfg.run_id())
        runs = [a.run.remote(cfg_dict, out, nproc, rdzv, i, launch) for i, a in enumerate(agents)]
        ends = [_end_or_lost(ref, i) for i, ref in enumerate(runs)]
    finally:
        remove_placement_group(pg)
    rec = agents_outcome(cfg, Path(out), ends, nnodes)
    if rec.get("status") == "preempted":
        raise CellPreempted(rec.get("error"))
    return rec


def _end_or_lost(ref, node: int) -> tuple[float, int, int, str]:
    """A node agent's end; an actor that died with its node ends as killed (SIGKILL), naming Ray."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        return (time.time(), node, -9, f"its Ray actor was lost: {type(exc).__name__}")


class NodeAgent:
    """A Ray actor on one node of a multi-node cell (one per placement-group bundle)."""

    def endpoint(self) -> str:
        import ray

        return free_endpoint(ray.util.get_node_ip_address())

    def run(self, cfg_dict: dict, out: str, nproc: int, rdzv: Rendezvous, node: int, launch: dict):
        import ray

        return node_agent(cfg_dict, out, nproc, rdzv, node, ray.util.get_node_ip_address(), launch)


def run_ray(
    cells: list[RunConfig],
    out: Path,
    *,
    workers: int = 1,
    nproc: int = 1,
    nnodes: int = 1,
    address: str | None = None,
    resources: Resources = Resources(),
    on_done: Callable[[RunConfig, dict], None] | None = None,
) -> list[dict]:
    """Each cell a Ray task that asks for the GPUs and CPUs its ranks use (:func:`cell_request`): Ray
    gives the task those GPUs (its ``CUDA_VISIBLE_DEVICES``), and the cell's ranks inherit them. A cell
    of several nodes: :func:`_ray_multinode_cell`."""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        per_cell = nproc * resources.cpus_per_rank
        kwargs = {"address": address} if address else {"num_cpus": max(1, workers) * per_cell}
        ray.init(include_dashboard=False, log_to_driver=False, **kwargs)
    retry = {"max_retries": RAY_RETRIES, "retry_exceptions": [CellPreempted]}
    task = ray.remote(**retry)(_remote_cell)
    spread = ray.remote(num_cpus=0, **retry)(_ray_multinode_cell)
    launch, where = launch_env(), str(Path(out).resolve())
    refs = {}
    for c in cells:
        req = cell_request(c, nproc, resources, nnodes)
        if nnodes > 1:
            ref = spread.remote(c.model_dump(), where, nproc, nnodes, req, launch)
        else:
            ask = task.options(num_cpus=req["cpus"], num_gpus=req["gpus"])
            ref = ask.remote(c.model_dump(), where, nproc, True, launch)
        refs[ref] = c
    results = _gather_ray(refs, out, on_done)
    if started_here:
        ray.shutdown()
    return results


def _gather_ray(refs: dict, out: Path, on_done) -> list[dict]:
    """The cells' records as their tasks end; a dead task is a failed cell, never a lost one (a cell still
    pre-empted after its retries keeps its own record, which says so)."""
    import ray

    results, pending = [], list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            try:
                rec = ray.get(ref)
            except Exception as exc:
                rec = failed_record(refs[ref], out, f"ray task failed: {type(exc).__name__}")
            results.append(rec)
            if on_done:
                on_done(refs[ref], rec)
    return results


def run_slurm(
    cells: list[RunConfig],
    out: Path,
    *,
    nproc: int = 1,
    nnodes: int = 1,
    cluster: str | None = None,
    folder: str | None = None,
    slurm_kwargs: dict | None = None,
    resources: Resources = Resources(),
    on_done: Callable[[RunConfig, dict], None] | None = None,
) -> list[dict]:
    """Each cell a submitit job asking for what its ranks use (:func:`slurm_parameters`); a job of several
    nodes returns each node's agent's end, from which the cell's outcome is read."""
    import submitit

    folder = folder or str(Path(out) / ".submitit")
    ex = submitit.AutoExecutor(folder=folder, cluster=cluster)
    kwargs = dict(slurm_kwargs or {})
    timeout = kwargs.pop("timeout_min", 240)
    launch, where = launch_env(), str(Path(out).resolve())
    jobs = []
    for c in cells:
        req = cell_request(c, nproc, resources, nnodes)
        ex.update_parameters(**slurm_parameters(req, resources, timeout), **kwargs)
        jobs.append((c, ex.submit(slurm_cell(), c.model_dump(), where, nproc, launch, nnodes)))
    results = []
    for c, job in jobs:
        try:
            rec = job.result() if nnodes == 1 else agents_outcome(c, out, job.results(), nnodes)
        except Exception as exc:
            rec = failed_record(c, out, f"slurm job failed: {type(exc).__name__}")
        results.append(rec)
        if on_done:
            on_done(c, rec)
    return results
