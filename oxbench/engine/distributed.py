"""Process-group set-up for DeepSpeed: a single process or many (``torchrun``/``deepspeed``).

On CPU the backend is gloo. A single process launched with plain ``python`` gets the
environment variables a launcher would have set, so ``deepspeed.init_distributed`` never
falls back to MPI discovery.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(timeout_s: float | None = None) -> None:
    """Join (or make) the process group. ``timeout_s``: the longest a collective waits for its peers
    (``faults.collective_timeout_s``); past it the collective raises instead of hanging."""
    if dist.is_available() and dist.is_initialized():
        return
    if "RANK" not in os.environ:
        os.environ.update(
            RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())
        )
    import deepspeed

    _skip_shm_op()
    extra = {} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}
    deepspeed.init_distributed(
        dist_backend="nccl" if torch.cuda.is_available() else "gloo",
        auto_mpi_discovery=False,
        verbose=False,
        **extra,
    )


def _skip_shm_op() -> None:
    """Do not JIT-build DeepSpeed's CPU shared-memory all-reduce op (``deepspeed_shm_comm``).

    DeepSpeed builds it when its process group starts: 50-125 s of C++ on 2 cores, a toolchain needed,
    into a cache that every virtualenv on the machine shares and rebuilds in turn (its flags name the
    venv). Only ``inference_all_reduce`` (tensor-parallel inference) uses it; ZeRO training reduces
    through torch.distributed, so the op buys oxbench nothing. ``OXBENCH_DS_SHM_OP=1`` keeps it, built
    once per virtualenv under ``<venv>/torch_extensions``.
    """
    if os.environ.get("OXBENCH_DS_SHM_OP") == "1":
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
        check_build_lock("deepspeed_shm_comm")
        return
    import importlib

    # by module path: the attribute deepspeed.comm.torch is the torch package (a star import shadows it)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


class StaleLockError(RuntimeError):
    """A JIT extension build's lock outlived any build: a process was killed while holding it."""


def check_build_lock(name: str, max_age_s: float = 900.0) -> None:
    """torch's extension builder waits forever on a ``lock`` file that a killed build left behind (it
    records no owner). One older than any build (``max_age_s``; the op builds in ≤ 2 min) is an error
    naming it, before anything waits on it."""
    from torch.utils.cpp_extension import _get_build_directory

    lock = Path(_get_build_directory(name, False)) / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return
    if age > max_age_s:
        raise StaleLockError(
            f"{lock}: a build lock {age / 60:.0f} min old, left by a killed build; delete it to build again"
        )


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    if dist.is_initialized() and world_size() > 1:
        dist.barrier()


_was_distributed = False  # this process ran in a world of several ranks (see exit_process)


def exit_process(code: int) -> None:
    """End a rank's process with ``code`` after :func:`shutdown`. A process that ran with other ranks
    leaves through ``os._exit`` (streams flushed), skipping the interpreter's and C++'s teardown, where
    gloo's threads can still be torn down joinable and abort the process ("terminate called without an
    active exception", seen once in a CI run) after its work is done and recorded."""
    if not _was_distributed:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def shutdown() -> None:
    """Leave the process group cleanly: every rank waits, then the group is destroyed.

    Without this, a rank that finishes first tears gloo's threads down at interpreter exit
    while a peer still talks to it, and aborts with "terminate called without an active exception".
    Through DeepSpeed, so that it also drops the groups it cached (its world group among them): a later
    ``init_distributed`` in the same process (a test, a warm worker) then starts from a clean slate
    instead of meeting a destroyed group ("Group ... is not registered").
    """
    global _was_distributed
    if dist.is_available() and dist.is_initialized():
        _was_distributed = _was_distributed or world_size() > 1
        barrier()
        if "deepspeed" in sys.modules:
            import deepspeed.comm

            deepspeed.comm.destroy_process_group()
        else:
            dist.destroy_process_group()


FAILED_KEY = "oxbench/failed"  # in the process group's store: the first rank's error, for its peers


def publish_failure(error: str) -> None:
    """Tell the other ranks, through the process group's store (no collective: they may be blocked in
    one), that this rank failed and why. The first rank to fail keeps the key."""
    if world_size() > 1:
        store = dist.distributed_c10d._get_default_store()
        if not store.check([FAILED_KEY]):
            store.set(FAILED_KEY, f"rank {rank()}: {error}")


def peer_failure() -> str | None:
    """The error a rank published with :func:`publish_failure` (``"rank R: ..."``), if one did."""
    if world_size() <= 1:
        return None
    try:
        store = dist.distributed_c10d._get_default_store()
        return store.get(FAILED_KEY).decode() if store.check([FAILED_KEY]) else None
    except (RuntimeError, ValueError):  # the store's host (rank 0) is gone
        return None


def all_gather_objects(obj) -> list:
    if world_size() == 1:
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def rank_from_env() -> int:
    """The launcher's rank before the process group exists."""
    return int(os.environ.get("RANK", 0))
