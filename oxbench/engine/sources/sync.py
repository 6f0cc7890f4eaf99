"""The synchronous source (:mod:`oxbench.engine.sources`)."""

from __future__ import annotations

from collections.abc import Callable

from oxbench.engine.rollout import Rollout
from oxbench.engine.sources.rollouts import RolloutSource, Rounds


class SyncSource(RolloutSource):
    """``online.source: sync``: the rollout worker takes the learner's weights every ``sync_every`` rounds
    (SPIN-style methods, ``per_iteration`` not None: at each new iterate, which also becomes the
    reference ``live_ref``)."""

    def __init__(self, rounds: Rounds, sync_every: int, per_iteration: int | None = None, live_ref=None):
        super().__init__(rounds)
        self.sync_every, self.per_iteration, self.live_ref = sync_every, per_iteration, live_ref

    def draw(self, rnd: int, sample: Callable[[], list[Rollout]]) -> list[Rollout]:
        if self.per_iteration is not None:
            if rnd % self.per_iteration == 0:  # a new iterate: it samples this iteration and is the reference
                self.worker.pull(self.version)
                if rnd > 0:
                    self.live_ref.refresh(self.worker.model.state_dict(), 1.0)
        elif rnd % self.sync_every == 0:
            self.worker.pull(self.version)  # gather + copy in (+ to a vLLM server): the round's sync_s
        return sample()
