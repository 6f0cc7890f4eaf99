"""Experience sources: where an online round's rollouts come from. The learner does not know.

Every source hands :func:`~oxbench.engine.trainer.train_online` one graded rollout batch per round
(this rank's share) through :meth:`batch`, and is told after each optimiser step through
:meth:`after_update`. A rollout carries the version of the weights that sampled it, so the loss and
the diagnostics see its staleness (learner version − rollout version).

* :class:`SyncSource` (``online.source: sync``): the rollout worker copies the trainer's weights every
  ``online.sync_every`` rounds (1: on-policy); SPIN-style methods freeze an iterate for a whole
  iteration. This is the loop as it always was, bit for bit.
* :class:`DelayedSource` (``delayed``): a deterministic fixed lag S (``online.staleness``). The round
  the learner takes at version v is sampled by the weights of version max(0, v − S), kept in a ring
  buffer of the last S + 1 snapshots: the exact S of the staleness theory (arXiv 2607.01083),
  reproducible bit for bit. S = 0 is the synchronous loop.
"""

from __future__ import annotations

from collections.abc import Callable

from oxbench.engine.rollout import Rollout, RolloutWorker

Weights = Callable[[], dict]  # the policy's full state dict (every rank calls it: collective under ZeRO-3)


class SyncSource:
    def __init__(
        self, worker: RolloutWorker, sync_every: int, per_iteration: int | None = None, live_ref=None
    ):
        self.worker, self.sync_every, self.per_iteration, self.live_ref = (
            worker,
            sync_every,
            per_iteration,
            live_ref,
        )

    def batch(
        self, rnd: int, version: int, weights: Weights, sample: Callable[[], list[Rollout]]
    ) -> list[Rollout]:
        if self.per_iteration is not None:
            if rnd % self.per_iteration == 0:  # a new iterate: it samples this iteration and is the reference
                state = weights()
                self.worker.sync(state, version)
                if rnd > 0:
                    self.live_ref.refresh(state, 1.0)
        elif rnd % self.sync_every == 0:
            self.worker.sync(weights(), version)
        return sample()

    def after_update(self, version: int, weights: Weights) -> None:
        pass


class DelayedSource:
    def __init__(self, worker: RolloutWorker, staleness: int):
        self.worker, self.staleness = worker, staleness
        self.ring: dict[int, dict] = {}

    def batch(
        self, rnd: int, version: int, weights: Weights, sample: Callable[[], list[Rollout]]
    ) -> list[Rollout]:
        if not self.ring:
            self.ring[version] = weights()  # the initial policy, version 0
        behind = max(0, version - self.staleness)
        if self.worker.version != behind:
            self.worker.sync(self.ring[behind], behind)
        return sample()

    def after_update(self, version: int, weights: Weights) -> None:
        """Keep the snapshot of ``version``, and only the S + 1 newest (the oldest a batch may use)."""
        self.ring[version] = weights()
        for old in [v for v in self.ring if v < version - self.staleness]:
            del self.ring[old]


def make_source(cfg, worker: RolloutWorker, per_iteration: int | None, live_ref):
    o = cfg.online
    if o.source == "delayed":
        return DelayedSource(worker, o.staleness)
    return SyncSource(worker, o.sync_every, per_iteration, live_ref)
