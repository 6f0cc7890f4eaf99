"""Process-group set-up for DeepSpeed: a single process or many (``torchrun``/``deepspeed``).

On CPU the backend is gloo. A single process launched with plain ``python`` gets the
environment variables a launcher would have set, so ``deepspeed.init_distributed`` never
falls back to MPI discovery.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def import_deepspeed():
    """``import deepspeed`` without the ``import mlflow`` its autotuner makes at import time: about 1 s of
    every rank's and cell's start-up when mlflow is installed (the ``track`` extra), for autotuning,
    which oxbench never runs (the autotuner then records ``has_mlflow = False``). Later imports of
    mlflow (live tracking) are untouched."""
    if "deepspeed" not in sys.modules and "mlflow" not in sys.modules:
        sys.modules["mlflow"] = None  # type: ignore[assignment]  # "import mlflow" raises ImportError
        try:
            import deepspeed
        finally:
            del sys.modules["mlflow"]
    import deepspeed

    return deepspeed


def init_distributed(timeout_s: float | None = None) -> None:
    """Join (or make) the process group. ``timeout_s``: the longest a collective waits for its peers
    (``faults.collective_timeout_s``); past it the collective raises instead of hanging."""
    if dist.is_available() and dist.is_initialized():
        return
    if "RANK" not in os.environ:
        os.environ.update(
            RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())
        )
    deepspeed = import_deepspeed()
    _skip_shm_op()
    extra = {} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}
    deepspeed.init_distributed(
        dist_backend="nccl" if torch.cuda.is_available() else "gloo",
        auto_mpi_discovery=False,
        verbose=False,
        **extra,
    )
    if world_size() > 1:
        _name_timeouts(timeout_s)


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


class CollectiveTimeout(RuntimeError):
    """A collective waited past its timeout (``faults.collective_timeout_s``): a peer stopped answering."""


# the torch.distributed calls (DeepSpeed's and oxbench's) whose timeout is raised as a CollectiveTimeout
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "scatter",
    "gather_object",
    "scatter_object_list",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "send",
    "recv",
)
TIMED_OUT_KEY = "oxbench/timed_out/"  # + rank: this rank's collective timed out (it is alive)
GRACE_S = 2.0  # how long a rank that timed out waits for its live peers to say they timed out too
_timeout_s: float | None = None


def _name_timeouts(timeout_s: float | None) -> None:
    """Wrap torch.distributed's collectives (once per process) so that one that times out raises a
    one-line :class:`CollectiveTimeout` naming the operation, where oxbench called it, and the ranks
    that did not answer, instead of gloo's bare "Timed out waiting 10000ms for recv operation"."""
    global _timeout_s
    _timeout_s = timeout_s
    for name in COLLECTIVES:
        fn = getattr(dist, name, None)
        if fn is not None and not getattr(fn, "_oxbench_named", False):
            setattr(dist, name, _named(name, fn))
    if not getattr(dist.new_group, "_oxbench_named", False):
        dist.new_group = _timed_groups(dist.new_group)


def _timed_groups(new_group):
    """``new_group`` whose groups (DeepSpeed's data-parallel group among them) wait as long as the world
    group: torch gives a group made without a ``timeout`` its 30-minute default, not the world's."""

    @functools.wraps(new_group)
    def made(*args, **kwargs):
        if _timeout_s is not None and len(args) < 2 and kwargs.get("timeout") is None:
            kwargs["timeout"] = timedelta(seconds=_timeout_s)
        return new_group(*args, **kwargs)

    made._oxbench_named = True
    return made


def _named(name: str, fn):
    @functools.wraps(fn)
    def collective(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as exc:  # gloo's timeout; torch's DistBackendError is a RuntimeError
            if isinstance(exc, CollectiveTimeout) or not re.search(r"timed out|timeout", str(exc), re.I):
                raise
            raise CollectiveTimeout(_timeout_line(name, exc)) from exc

    collective._oxbench_named = True
    return collective


def _timeout_line(name: str, exc: BaseException) -> str:
    """``"all_reduce (DeepSpeed allreduce_bucket, from oxbench/engine/learner.py, Learner._step_examples)
    timed out after 10 s: rank 1 did not answer (Timed out waiting 10000ms for recv operation to
    complete)"``: the operation, where oxbench called it, and who did not answer."""
    via, caller = None, None
    for frame in reversed(traceback.extract_stack()):  # innermost first
        f = frame.filename.replace(os.sep, "/")
        if "/torch/" in f or f == __file__.replace(os.sep, "/"):
            continue
        if "/deepspeed/" in f:  # the DeepSpeed step that called it (not its comm layer or wrappers)
            via = via or (None if "/deepspeed/comm/" in f or "/deepspeed/utils/" in f else frame.name)
            continue
        short = f[f.rfind("/oxbench/") + 1 :] if "/oxbench/" in f else Path(f).name
        caller = f"{short}:{frame.lineno} {frame.name}"
        break
    where = ", ".join(x for x in (via and f"DeepSpeed {via}", caller and f"from {caller}") if x)
    after = f"after {_timeout_s:g} s" if _timeout_s is not None else "after its timeout"
    silent = _silent_peers()
    who = (
        f"rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} did not answer"
        if silent
        else "its peers timed out too"
    )
    detail = re.sub(r"^\[[^\]]*\]\s*", "", " ".join(str(exc).split()))  # gloo's [file.cc:line] prefix
    return f"{name}{f' ({where})' if where else ''} timed out {after}: {who} ({detail})"


def _silent_peers() -> list[int]:
    """The other ranks that, within ``GRACE_S``, neither said their own collective timed out nor
    published a failure: the ones that stopped answering (all of them if the store cannot say)."""
    others = [r for r in range(world_size()) if r != rank()]
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set(f"{TIMED_OUT_KEY}{rank()}", "1")
        deadline = time.monotonic() + GRACE_S
        while True:
            failed = store.get(FAILED_KEY).decode() if store.check([FAILED_KEY]) else ""
            silent = [
                r
                for r in others
                if not store.check([f"{TIMED_OUT_KEY}{r}"]) and not failed.startswith(f"rank {r}:")
            ]
            if not silent or time.monotonic() > deadline:
                return silent
            time.sleep(0.1)
    except (RuntimeError, ValueError):  # the store's host is gone
        return others


def all_gather_objects(obj) -> list:
    if world_size() == 1:
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def rank_from_env() -> int:
    """The launcher's rank before the process group exists."""
    return int(os.environ.get("RANK", 0))
