"""The fixed-lag source (:mod:`oxbench.engine.sources`)."""

from __future__ import annotations

from collections.abc import Callable

from oxbench.engine.rollout import Rollout, RolloutWorker

Weights = Callable[[], dict]  # the policy's full state dict (every rank calls it: collective under ZeRO-3)


class DelayedSource:
    """``online.source: delayed``: round at learner version v sampled by version max(0, v − S)."""

    def __init__(self, worker: RolloutWorker, staleness: int):
        self.worker, self.staleness, self.stats = worker, staleness, {}
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

    def after_step(self, version: int, weights: Weights) -> None:
        """Keep the snapshot of ``version``, and only the S + 1 newest (the oldest a batch may use)."""
        self.ring[version] = weights()
        for old in [v for v in self.ring if v < version - self.staleness]:
            del self.ring[old]

    def state_dict(self) -> dict:
        return {"ring": self.ring}

    def load_state_dict(self, state: dict) -> None:
        self.ring = dict(state["ring"])

    def close(self) -> None:
        pass
