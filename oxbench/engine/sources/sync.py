"""The synchronous source (:mod:`oxbench.engine.sources`)."""

from __future__ import annotations

from collections.abc import Callable

from oxbench.engine.rollout import Rollout, RolloutWorker

Weights = Callable[[], dict]  # the policy's full state dict (every rank calls it: collective under ZeRO-3)


class SyncSource:
    """``online.source: sync``: the rollout worker takes the learner's weights every ``sync_every`` rounds
    (SPIN-style methods: at each new iterate, which also becomes the reference)."""

    def __init__(
        self, worker: RolloutWorker, sync_every: int, per_iteration: int | None = None, live_ref=None
    ):
        self.stats: dict = {}  # nothing to time beyond the worker's own sync
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

    def after_step(self, version: int, weights: Weights) -> None:
        pass

    def state_dict(self) -> None:  # the rollout worker's weights are the whole state (the loop keeps them)
        return None

    def load_state_dict(self, state: None) -> None:
        pass

    def close(self) -> None:
        pass
