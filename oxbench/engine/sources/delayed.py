"""The fixed-lag source (:mod:`oxbench.engine.sources`)."""

from __future__ import annotations

from collections.abc import Callable

from oxbench.engine.rollout import Rollout
from oxbench.engine.sources.rollouts import RolloutSource, Rounds


class DelayedSource(RolloutSource):
    """``online.source: delayed``: the round at learner version v is sampled by version max(0, v − S)."""

    def __init__(self, rounds: Rounds, staleness: int):
        super().__init__(rounds)
        self.staleness, self.ring = staleness, {}  # version -> weights: the S + 1 newest

    def draw(self, rnd: int, sample: Callable[[], list[Rollout]]) -> list[Rollout]:
        if not self.ring:  # the initial policy, version 0 (snapshots: gathered host copies, timed as sync)
            self.ring[self.version] = self.worker.snapshot(self.r.weights)
        behind = max(0, self.version - self.staleness)
        if self.worker.version != behind:
            self.worker.sync(self.ring[behind], behind)
        return sample()

    def after_step(self, version: int) -> None:
        """Keep the snapshot of ``version``, and only the S + 1 newest (the oldest a batch may use). Its
        gather counts in the next round's ``sync_s``, with the load of the snapshot that round samples with."""
        super().after_step(version)
        self.ring[version] = self.worker.snapshot(self.r.weights)
        for old in [v for v in self.ring if v < version - self.staleness]:
            del self.ring[old]

    def state_dict(self) -> dict:
        return {**super().state_dict(), "ring": self.ring}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.ring = dict(state["ring"])
