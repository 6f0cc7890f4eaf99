"""Experience sources: where an online round's rollouts come from. The learner does not know.

Every source hands the online loop (:class:`~oxbench.engine.trainer.OnlineLoop`) one graded rollout
batch per round (this rank's share) through :meth:`Source.batch`, and is told after each optimiser step
through :meth:`Source.after_step`. A rollout carries the version of the weights that sampled it, so the
loss and the diagnostics see its staleness (learner version − rollout version).

* :class:`SyncSource` (``online.source: sync``, :mod:`.sync`): the rollout worker copies the trainer's
  weights every ``online.sync_every`` rounds (1: on-policy); SPIN-style methods freeze an iterate for a
  whole iteration. This is the loop as it always was, bit for bit.
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

A new source is one module here implementing :class:`Source`, plus one line in :func:`make_source`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from oxbench.engine.rollout import Rollout, RolloutWorker
from oxbench.engine.sources.asynchronous import AsyncSource, ProducerError, RoundPlan
from oxbench.engine.sources.delayed import DelayedSource
from oxbench.engine.sources.sync import SyncSource

Weights = Callable[[], dict]  # the policy's full state dict (every rank calls it: collective under ZeRO-3)

__all__ = [
    "AsyncSource",
    "DelayedSource",
    "ProducerError",
    "RoundPlan",
    "Source",
    "SyncSource",
    "make_source",
]


class Source(Protocol):
    """An experience source, as the online loop uses it."""

    stats: dict  # the last round's timings (queue and producer waits, sync time), for its metrics row

    def batch(
        self, rnd: int, version: int, weights: Weights, sample: Callable[[], list[Rollout]]
    ) -> list[Rollout]:
        """Round ``rnd``'s graded rollouts for a learner at ``version`` (``sample()`` draws them with the
        rollout worker as it stands; ``weights()`` gives the learner's current weights)."""
        ...

    def after_step(self, version: int, weights: Weights) -> None:
        """The learner took an optimiser step and is now at ``version``."""
        ...

    def state_dict(self) -> dict | None:
        """What a checkpoint keeps of the source (None: nothing beyond the rollout worker's weights)."""
        ...

    def load_state_dict(self, state: dict | None) -> None: ...

    def close(self) -> None:
        """Stop whatever the source started (a producer process)."""
        ...


def make_source(
    cfg,
    worker: RolloutWorker,
    per_iteration: int | None,
    live_ref,
    plan: Callable[[], RoundPlan] | None = None,
) -> Source:
    """The source ``online.source`` names; ``plan()`` gives the async producer its job (every round's
    prompts and sampling seed, the reward function...)."""
    o = cfg.online
    if o.source == "delayed":
        return DelayedSource(worker, o.staleness)
    if o.source == "async":
        return AsyncSource(worker, plan(), o.queue_size)
    return SyncSource(worker, o.sync_every, per_iteration, live_ref)
