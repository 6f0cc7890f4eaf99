"""Mid-run checkpoints and pre-emption: a cell killed at step k resumes at step k, bit for bit.

A checkpoint is a directory ``<run_dir>/checkpoints/step-<k>/`` holding, for each rank,
``rank<r>.safetensors`` (every tensor of its state) and ``rank<r>.json`` (the rest of the state, with
references to those tensors), ``engine<r>.safetensors`` (its share of the engine's master weights and
AdamW moments, by parameter name and at full shape: :mod:`oxbench.engine.universal`), and
``manifest.json`` (the step, the layout that wrote it and the SHA-256 of every file). Nothing in it is
a pickle: loading one runs no code. The loop's components (:mod:`oxbench.engine.loop`) say what their
state is: the engine's weights, optimiser and schedule, every RNG, the data position, the loss state,
the online loop's rollout weights and policy versions, and the metrics so far.

The engine's state is rank-free, so a checkpoint resumes at another world size or ZeRO stage (a job
pre-empted on 2 GPUs that comes back on 1): the global batch stays the one it was written with (the
builder reads :meth:`Checkpointer.layout` and takes more micro-batches per rank), each rank takes the
other components' state of rank ``r % world`` (the same on every rank, but for RNG streams), and the
data continue at the next optimiser step. On the same layout the resume is bitwise.

Writing is atomic: the files go to a hidden ``.step-<k>.partial`` directory, the manifest is written
last, and the directory is renamed into place. A reader takes the newest checkpoint whose manifest
matches its files, and falls back to the one before when it does not (a truncated or corrupted file,
a missing manifest). Only the newest ``checkpoint.keep`` are kept; all are deleted once the cell has
finished, unless ``checkpoint.keep_final``.

Pre-emption: :func:`signals_handled` turns SIGTERM, SIGUSR1 (Slurm's and submitit's warning signals)
and SIGINT (Ctrl-C) into a request. While a loop is in a phase that can checkpoint
(:func:`checkpointable`), the request is served at the next step boundary: a checkpoint, then
:class:`Preempted`. Anywhere else, :class:`Preempted` is raised at once. The cell records ``preempted``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from oxbench.engine import distributed as D
from oxbench.engine import universal as U
from oxbench.engine.manifest import MANIFEST, newest_usable, verify
from oxbench.utils import sha256_file

SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")


class Preempted(BaseException):  # noqa: N818  (like KeyboardInterrupt: no `except Exception` swallows it)
    """The cell was asked to stop (a signal); its state is in its latest checkpoint, if it has one."""


# --------------------------------------------------------------------------- signals

_requested: str | None = None
_deferred = False  # inside checkpointable(): a signal waits for the next step boundary
# how long a deferred signal waits for that boundary: a step that hangs (a loss that never returns) is
# stopped after it, without a new checkpoint (the latest one stands)
STOP_GRACE_S = float(os.environ.get("OXBENCH_STOP_GRACE_S", 60))


def _on_signal(signum, frame) -> None:
    global _requested
    first = _requested is None
    _requested = signal.Signals(signum).name
    if not _deferred:
        raise Preempted(f"{_requested} received")
    if first:  # the watchdog: the step must reach its boundary within the grace
        signal.signal(signal.SIGALRM, _on_overdue)
        signal.setitimer(signal.ITIMER_REAL, STOP_GRACE_S)


def _on_overdue(signum, frame) -> None:
    raise Preempted(
        f"{_requested} received; the step did not reach its boundary within {STOP_GRACE_S:g} s (a hung step), stopped without a checkpoint"
    )


def _disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


@contextlib.contextmanager
def signals_handled():
    """While inside (a cell), SIGTERM, SIGUSR1 and SIGINT pre-empt it; the previous handlers after."""
    global _requested
    _requested = None
    before = {name: signal.signal(getattr(signal, name), _on_signal) for name in SIGNALS}
    try:
        yield
    finally:
        _disarm()
        for name, handler in before.items():
            signal.signal(getattr(signal, name), handler)


@contextlib.contextmanager
def checkpointable():
    """While inside, a pre-emption signal waits for :meth:`Checkpointer.boundary` instead of raising."""
    global _deferred
    _deferred = True
    try:
        yield
        if _requested:  # arrived after the last boundary: nothing to lose by stopping now
            raise Preempted(f"{_requested} received")
    finally:
        _deferred = False


def requested() -> str | None:
    """The signal any rank received since the handlers were installed (a collective at world size > 1)."""
    if D.world_size() == 1:
        return _requested
    names = D.all_gather_objects(_requested)
    return next((n for n in names if n), None)


# --------------------------------------------------------------------------- state trees


def flatten(tree, tensors: dict[str, torch.Tensor], path: str = ""):
    """``tree`` as JSON with every tensor moved into ``tensors`` (and referenced by key)."""
    if isinstance(tree, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = tree.detach().cpu().contiguous().clone()
        return {"__tensor__": key}
    if isinstance(tree, np.ndarray):
        return {"__ndarray__": flatten(torch.from_numpy(tree.copy()), tensors, path)}
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, tuple):
        return {"__tuple__": [flatten(v, tensors, f"{path}/{i}") for i, v in enumerate(tree)]}
    if isinstance(tree, list):
        return [flatten(v, tensors, f"{path}/{i}") for i, v in enumerate(tree)]
    if isinstance(tree, dict):
        return {
            "__dict__": [
                [flatten(k, tensors, path), flatten(v, tensors, f"{path}/{k}")] for k, v in tree.items()
            ]
        }
    raise TypeError(f"checkpoint state {path or '/'}: cannot store a {type(tree).__name__}")


def unflatten(tree, tensors: dict[str, torch.Tensor]):
    if isinstance(tree, list):
        return [unflatten(v, tensors) for v in tree]
    if not isinstance(tree, dict):
        return tree
    if "__tensor__" in tree:
        return tensors[tree["__tensor__"]]
    if "__ndarray__" in tree:
        return unflatten(tree["__ndarray__"], tensors).numpy()
    if "__tuple__" in tree:
        return tuple(unflatten(v, tensors) for v in tree["__tuple__"])
    return {unflatten(k, tensors): unflatten(v, tensors) for k, v in tree["__dict__"]}


def rng_state() -> dict:
    """Every generator a resume must restore: torch's CPU one, Python's, numpy's and, on a GPU rank,
    the CUDA ones (sampling and dropout there draw from them)."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.stack(torch.cuda.get_rng_state_all())
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"]))
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def engine_state(engine) -> dict:
    """The DeepSpeed engine's state in the rank-free form of :mod:`oxbench.engine.universal`: this rank's
    share of every parameter's master weight and AdamW moments (``params``, by name; written to a file
    of its own), AdamW's step, the schedule and the step counters. Any world size and ZeRO stage resume
    from it."""
    share, adam_step = U.full_state(engine)
    return {
        "params": share,
        "adam_step": adam_step,
        "scheduler": engine.lr_scheduler.state_dict(),
        "zero_stage": engine.zero_optimization_stage(),
        "grad_accum": engine.gradient_accumulation_steps(),
        "counters": {k: getattr(engine, k) for k in ("global_steps", "global_samples")},
    }


def load_engine_state(engine, state: dict) -> None:
    """Resume ``engine`` (of any world size and ZeRO stage) from :func:`engine_state`'s, every rank's
    share of ``params`` gathered (:class:`Shares`). The micro-step counter follows the engine's own
    accumulation (it decides where DeepSpeed's optimiser steps fall)."""
    U.load_full_state(engine, state["params"], state["adam_step"])
    sched = engine.lr_scheduler
    sched.load_state_dict(state["scheduler"])
    for group, lr in zip(sched.optimizer.param_groups, sched.get_last_lr()):
        group["lr"] = lr  # the schedule sets it when it steps: resumed, it has not yet
    for k, v in state["counters"].items():
        setattr(engine, k, v)
    engine.micro_steps = engine.global_steps * engine.gradient_accumulation_steps()


class Shares:
    """Every rank's share of the engine's parameters (``engine<r>.safetensors`` of one checkpoint), read
    one tensor at a time: a rank holds at most one full tensor of them at once while it loads."""

    def __init__(self, d: Path):
        self.files = sorted(d.glob("engine*.safetensors"))
        self.where: dict[str, Path] = {}
        for f in self.files:
            with safe_open(str(f), framework="pt") as h:
                self.where |= dict.fromkeys(h.keys(), f)

    def __contains__(self, key: str) -> bool:
        return key in self.where

    def __getitem__(self, key: str) -> torch.Tensor:
        with safe_open(str(self.where[key]), framework="pt") as h:
            return h.get_tensor(key)


# --------------------------------------------------------------------------- files


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a failing mount); its partial directory is gone."""


@contextlib.contextmanager
def _writing(final: Path, tmp: Path):
    """Inside, a failed write removes the partial directory ``tmp`` (it never becomes ``final``) and is
    raised as one line naming ``final``."""
    try:
        yield
    except (OSError, SafetensorError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise CheckpointWriteError(f"cannot write checkpoint {final}: {why}") from exc


class Checkpointer:
    """Saves and finds one run's checkpoints (every rank calls every method: they are collective)."""

    def __init__(self, run_dir: Path, every: int | None = None, keep: int = 2, keep_final: bool = False):
        self.root = Path(run_dir) / "checkpoints"
        self.every, self.keep, self.keep_final = every, keep, keep_final
        self.saved: list[int] = []
        self._last = 0  # the step of the last boundary (or of the checkpoint resumed from)
        self.fell_back: list[str] = []  # why newer checkpoints were passed over at the last load
        self._verified: str | None = None  # the checkpoint layout() has just checked whole (rank 0)

    @classmethod
    def from_config(cls, run_dir: Path, cfg) -> Checkpointer:
        c = cfg.checkpoint
        return cls(run_dir, c.every, c.keep, c.keep_final)

    def boundary(self, step: int, state_fn, *, last: bool = False) -> None:
        """After optimiser step ``step`` (a loop's state is whole here): save when a multiple of ``every``
        was reached since the last boundary, at the ``last`` one when checkpointing is on, or when a
        signal asked; then stop if one did."""
        _disarm()  # the step reached its boundary: the watchdog's work is done
        signalled = requested()
        due = self.every is not None and (step // self.every > self._last // self.every or last)
        self._last = step
        if signalled or due:
            self.save(step, state_fn())
        if signalled:
            raise Preempted(f"{signalled} received; checkpoint at step {step}")

    def save(self, step: int, state: dict) -> Path:
        """Write ``state`` as checkpoint ``step``. A write that fails (a full disk) removes what it wrote
        and raises :class:`CheckpointWriteError` naming the checkpoint; the ones before it stand."""
        final = self.root / f"step-{step:08d}"
        tmp = self.root / f".step-{step:08d}.partial"
        if D.is_main():
            shutil.rmtree(tmp, ignore_errors=True)
            with _writing(final, tmp):
                tmp.mkdir(parents=True)
        D.barrier()
        engine = state.get("engine") or {}
        share = engine.get("params", {})
        tensors: dict[str, torch.Tensor] = {}
        skeleton = flatten({**state, "engine": {k: v for k, v in engine.items() if k != "params"}}, tensors)
        rk = D.rank()
        with _writing(final, tmp):
            save_file(tensors, str(tmp / f"rank{rk}.safetensors"))
            save_file(share, str(tmp / f"engine{rk}.safetensors"))
            _write(tmp / f"rank{rk}.json", json.dumps(skeleton).encode())
        D.barrier()
        if D.is_main():
            with _writing(final, tmp):
                files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
                layout = {
                    "world_size": D.world_size(),
                    "zero_stage": engine.get("zero_stage"),
                    "grad_accum": engine.get("grad_accum"),
                }
                manifest = {"step": step, "world_size": D.world_size(), "layout": layout, "files": files}
                _write(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
                shutil.rmtree(final, ignore_errors=True)
                os.replace(tmp, final)
            self.saved.append(step)
            self._prune()
        D.barrier()
        return final

    def _steps(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(
            (int(p.name[5:]) for p in self.root.glob("step-*") if p.name[5:].isdigit()), reverse=True
        )

    def _prune(self) -> None:
        for step in self._steps()[self.keep :]:
            shutil.rmtree(self.root / f"step-{step:08d}", ignore_errors=True)

    def layout(self) -> dict | None:
        """The layout (``world_size``, ``zero_stage``, ``grad_accum``) of the newest whole checkpoint, or
        None: what a run resuming at another world size keeps its global batch from (every rank calls it).
        """
        found = None
        if D.is_main():
            d, _ = newest_usable(self.root)
            self._verified = None if d is None else d.name
            found = None if d is None else json.loads((d / MANIFEST).read_text()).get("layout")
        return D.all_gather_objects(found)[0]

    def latest(self) -> tuple[int, dict] | None:
        """(step, this rank's state) of the newest whole checkpoint, or None; a corrupt or partial one
        is passed over (and said so on stderr) for the one before it. Written at another world size,
        rank ``r`` takes the state of rank ``r % world`` that wrote it, and the engine's state is read
        from every rank's share (:class:`Shares`)."""
        choice = None
        if D.is_main():
            for partial in self.root.glob(".step-*.partial"):  # a write that died (killed, a full disk)
                shutil.rmtree(partial, ignore_errors=True)
            self.fell_back = []
            verified, self._verified = self._verified, None  # layout()'s check serves this load only
            for step in self._steps():
                name = f"step-{step:08d}"  # its files were hashed by layout() just before, when it ran
                why = None if name == verified else verify(self.root / name)
                if why is None:
                    choice = step
                    break
                self.fell_back.append(f"step-{step:08d}: {why}")
                print(
                    f"checkpoint step-{step:08d} is not usable ({why}); trying an older one", file=sys.stderr
                )
        choice = D.all_gather_objects(choice)[0]
        if choice is None:
            return None
        self._last = choice
        d = self.root / f"step-{choice:08d}"
        rk = D.rank() % json.loads((d / MANIFEST).read_text())["world_size"]
        skeleton = json.loads((d / f"rank{rk}.json").read_text())
        # onto the host: RNG states must be CPU tensors, and load_state_dict / DeepSpeed copy the rest
        # onto the rank's device where its parameters live
        state = unflatten(skeleton, load_file(str(d / f"rank{rk}.safetensors"), device="cpu"))
        if state.get("engine") is not None:
            state["engine"]["params"] = Shares(d)
        return choice, state

    def finish(self) -> None:
        """The cell finished: drop its checkpoints (all but the newest with ``keep_final``)."""
        if not D.is_main() or not self.root.exists():
            return
        if self.keep_final:
            self.keep = 1
            self._prune()
        else:
            shutil.rmtree(self.root, ignore_errors=True)
