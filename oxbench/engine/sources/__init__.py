"""Sources: where the learner's batches come from. The learner and the loop do not know which.

The one loop (:class:`~oxbench.engine.loop.Loop`) takes :class:`Batch` es from a source's
:meth:`Source.batches`, hands each to :meth:`Learner.step <oxbench.engine.learner.Learner.step>` once per
pass (``Batch.passes``: 1 offline, ``online.inner_epochs`` online) and tells the source after every
optimiser step (:meth:`Source.after_step`). A checkpoint keeps each source's :meth:`Source.state_dict`.

* :class:`DatasetSource` (:mod:`.dataset`, every offline method): a fixed dataset in a seeded,
  sharded order, ``train.grad_accum`` micro-batches per optimiser step, and the reference's log-probs
  cached once when the loss needs a fixed reference.
* :class:`SyncSource` (``online.source: sync``, :mod:`.sync`): the rollout worker copies the learner's
  weights every ``online.sync_every`` rounds (1: on-policy); SPIN-style methods freeze an iterate for a
  whole iteration.
* :class:`DelayedSource` (``delayed``, :mod:`.delayed`): a deterministic fixed lag S
  (``online.staleness``). The round the learner takes at version v is sampled by the weights of version
  max(0, v − S), kept in a ring buffer of the last S + 1 snapshots: the exact S of the staleness theory
  (arXiv 2607.01083), reproducible bit for bit. S = 0 is the synchronous loop.
* :class:`AsyncSource` (``async``, :mod:`.asynchronous`): real concurrency. A producer process
  (:mod:`oxbench.engine.producer`) with its own model copy generates the rounds ahead of the learner,
  takes the learner's weights through shared memory after each step, and is admitted to a round only
  when that round will be at most S versions stale when consumed (AReaL-style throttling); finished
  rounds wait in a bounded queue of ``online.queue_size`` rounds. Each round arrives exactly once and in
  order (checked); the producer dying is a :class:`ProducerError` naming it, never a hang. One process
  (world size 1). Its job is a typed :class:`RoundPlan`.

The three online sources share :class:`~.rollouts.RolloutSource` (the prompt order, the sampling seeds,
the rollout statistics) and differ only in which weights sample a round (:meth:`RolloutSource.draw`).
A rollout carries the version of the weights that sampled it, so the loss and the diagnostics see its
staleness (learner version − rollout version).

A new source is one module here implementing :class:`Source`, plus one line in :func:`make_source`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from oxbench.engine.sources.asynchronous import AsyncSource, ProducerError, RoundPlan
from oxbench.engine.sources.batch import Batch, Weights
from oxbench.engine.sources.dataset import DatasetSource
from oxbench.engine.sources.delayed import DelayedSource
from oxbench.engine.sources.rollouts import RolloutSource, Rounds
from oxbench.engine.sources.sync import SyncSource

__all__ = [
    "AsyncSource",
    "Batch",
    "DatasetSource",
    "DelayedSource",
    "ProducerError",
    "RolloutSource",
    "RoundPlan",
    "Rounds",
    "Source",
    "SyncSource",
    "Weights",
    "make_source",
]


class Source(Protocol):
    """What the loop asks of a source."""

    stats: dict  # the source's timings since the last batch (queue and producer waits, sync), for its row
    total_steps: int  # the optimiser steps its batches make in all (the learning-rate schedule's length)

    def batches(self, start: int) -> Iterator[Batch]:
        """The batches from round ``start`` on (a resumed run starts past 0), in order."""
        ...

    def after_step(self, version: int) -> None:
        """The learner took an optimiser step and is now at ``version``."""
        ...

    def order_sha(self) -> str:
        """The digest of every rank's data order (offline: planned; online: consumed so far)."""
        ...

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the source."""
        ...

    def load_state_dict(self, state: dict) -> None: ...

    def close(self) -> None:
        """Stop whatever the source started (a producer process, a vLLM server)."""
        ...


def make_source(
    plan,
    *,
    examples: list[dict] | None = None,
    grad_accum: int | None = None,
    rounds: Rounds | None = None,
    backend: str = "hf",
    per_iteration: int | None = None,
    live_ref=None,
) -> Source:
    """The source the run's plan names (``RunPlan.source``, a :class:`~oxbench.engine.plan.RunPlan`):
    ``dataset`` over the encoded ``examples`` (``grad_accum`` micro-batches a step: the plan's, or a
    resumed layout's), or a rollout source over ``rounds`` (:class:`Rounds`: the settings, the prompts,
    the worker, the learner's weights). ``backend``: the sampler an asynchronous producer runs;
    ``per_iteration`` and ``live_ref``: a SPIN-style method's iteration and reference."""
    if plan.source == "dataset":
        t = plan.cfg.train
        return DatasetSource(
            examples,
            plan.caps.data,
            seed=plan.seeds["data"],
            batch_size=t.batch_size,
            grad_accum=grad_accum or plan.micro_batches,
            epochs=t.epochs,
            max_steps=t.max_steps,
            run=plan.run_id,
        )
    o = rounds.online
    if plan.source == "delayed":
        return DelayedSource(rounds, o.staleness)
    if plan.source == "async":
        return AsyncSource(rounds, o.staleness, o.queue_size, backend)
    return SyncSource(rounds, o.sync_every, per_iteration, live_ref)
