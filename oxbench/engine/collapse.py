"""Collapse detection for online runs (issue 15): stop a run that has collapsed, record when and why.

A run has collapsed at optimiser step t when, with ``online.collapse`` set,

* its rollout reward, averaged over the last ``window`` rounds, falls below ``reward_fraction`` of its
  early level (the mean over its first ``window`` rounds), once there are ``2 · window`` rounds;
* its verified validation accuracy (learning curves, ``eval.every``) falls more than
  ``verified_drop`` below the best it reached; or
* its loss is not finite (the step is not taken: the weights stay finite).

The run then stops (``stop``, the default: the rest of its compute is saved), is evaluated as it is,
and its record says ``collapse: {step, reason}``; the grid goes on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class CollapseDetector:
    reward_fraction: float
    window: int
    verified_drop: float | None = None
    stop: bool = True
    rewards: list[float] = field(default_factory=list)
    best_verified: float = -math.inf

    def observe_reward(self, reward: float) -> str | None:
        """One round's mean reward (over every rank); the reason if the run has now collapsed."""
        self.rewards.append(reward)
        w = self.window
        if len(self.rewards) < 2 * w:
            return None
        early = sum(self.rewards[:w]) / w
        recent = sum(self.rewards[-w:]) / w
        if early > 0 and recent < self.reward_fraction * early:
            return f"reward fell to {recent:.3f} over the last {w} rounds (early level {early:.3f})"
        return None

    def observe_verified(self, verified: float | None) -> str | None:
        """A learning-curve point's verified accuracy; the reason if it fell past the threshold."""
        if verified is None or self.verified_drop is None:
            return None
        self.best_verified = max(self.best_verified, verified)
        if verified < self.best_verified - self.verified_drop:
            return f"verified accuracy fell to {verified:.3f} from {self.best_verified:.3f}"
        return None
