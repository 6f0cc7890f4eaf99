"""What a source hands the learner: one :class:`Batch` per round (:mod:`oxbench.engine.sources`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

Weights = Callable[[], dict]  # the policy's full state dict (every rank calls it: collective under ZeRO-3)


@dataclass
class Batch:
    """One round of training data, this rank's share, for :meth:`Learner.step
    <oxbench.engine.learner.Learner.step>`: either a dataset's micro-batches (``examples``) or graded
    rollouts (``rollouts``)."""

    round: int
    passes: int  # optimiser steps the learner takes on it (offline 1; online ``inner_epochs``)
    last: bool  # the run's last batch
    row: dict  # what each of its metrics rows carries (offline: the epoch; online: the round's statistics)
    trained_tokens: int  # one pass's tokens (prompt + completion, as collated), summed over every rank
    compute: dict = field(default_factory=dict)  # ledger amounts on arrival (rollouts, generated tokens...)
    examples: list[list[dict]] | None = None  # offline: ``train.grad_accum`` micro-batches of examples
    reference: object | None = None  # offline: the reference's cached log-probs (a RefCache), if any
    rollouts: list | None = None  # online: this rank's graded rollouts, grouped by prompt
    rewards: torch.Tensor | None = None  # online: their rewards (host bookkeeping)
    started: float = 0.0  # online: when sampling began (for rollouts_per_s)
    policy_version: int = 0  # online: the rollout worker's version after sampling
    prepared: object | None = None  # the learner's cache of what stays fixed over the passes

    def fields(self, now: float) -> dict:
        """The batch's part of a metrics row logged at ``now``."""
        if self.rollouts is None:
            return dict(self.row)
        rate = self.row["rollouts"] / max(1e-9, now - self.started)
        return {**self.row, "rollouts_per_s": rate, "policy_version": self.policy_version}
