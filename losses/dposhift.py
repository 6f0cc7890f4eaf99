r"""DPO-Shift: shifting the distribution of DPO (Yang et al., 2025).

Paper: arXiv:2502.07599; official code Meaquadddd/DPO-Shift (``dpo_lambda``).

DPO lowers the chosen likelihood along with the rejected one ("likelihood displacement").
DPO-Shift scales the rejected log-ratio by ``λ < 1``, trading some reward margin for a
higher chosen probability:

.. math::

    \mathcal{L}_{DPO\text{-}Shift} = -\mathbb{E}\Big[\log\sigma\Big(\beta\log\tfrac{\pi_\theta(y_w)}{\pi_{ref}(y_w)}
        - \lambda\,\beta\log\tfrac{\pi_\theta(y_l)}{\pi_{ref}(y_l)}\Big)\Big]

``λ = 1`` is DPO. The paper studies a fixed ``λ`` in [0.5, 0.95] and linear schedules of λ over
training, named as in the authors' code (``fixed``, ``increase_linear``, ``decrease_linear``; runs
such as "increase_linear-0.75to1.0" and "decrease_linear-1.0to0.75"). ``shift_schedule``:

- ``"fixed"`` (default): ``λ = shift_lambda``;
- ``"increase_linear"``: ``λ(p) = shift_lambda + (1 − shift_lambda)·p``, from ``shift_lambda`` to 1;
- ``"decrease_linear"``: ``λ(p) = 1 − (1 − shift_lambda)·p``, from 1 to ``shift_lambda``;

where ``p = inputs.progress`` is the share of optimiser steps done (filled by the trainer; a
schedule is a function of training progress, not of earlier batches, so it needs no loss state).
Default ``shift_lambda = 0.95``, the least aggressive value the paper sweeps (the reference
study, oxRL, uses 0.5). Version 2 adds the schedules; ``fixed`` is version 1's loss.

Inputs: the four summed log-probs (B,). Reduction: mean over pairs. TRL has no DPO-Shift.

Metrics: implicit rewards (detached), accuracy, margin.
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)

SCHEDULES = ("fixed", "increase_linear", "decrease_linear")


def shift_at(progress: float | None, shift_lambda: float, shift_schedule: str) -> float:
    """λ at training progress ``p`` in [0, 1] (``None``: the start of training)."""
    if shift_schedule not in SCHEDULES:
        raise ValueError(
            f"loss {NAME!r}: shift_schedule must be one of {', '.join(SCHEDULES)}, got {shift_schedule!r}"
        )
    p = 0.0 if progress is None else float(progress)
    if shift_schedule == "increase_linear":
        return shift_lambda + (1.0 - shift_lambda) * p
    if shift_schedule == "decrease_linear":
        return 1.0 - (1.0 - shift_lambda) * p
    return shift_lambda


def dposhift_loss(
    inputs: LossInputs, *, beta: float = 0.1, shift_lambda: float = 0.95, shift_schedule: str = "fixed"
) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    lam = shift_at(inputs.progress, shift_lambda, shift_schedule)
    losses = -F.logsigmoid(beta * chosen - lam * beta * rejected)
    return pair_output(losses, beta * chosen, beta * rejected, {"dposhift/lambda": lam})


spec = pairs_spec(
    NAME,
    dposhift_loss,
    paper="arXiv:2502.07599 (fixed or linearly scheduled lambda)",
    version=2,
    description="DPO-Shift: DPO with the rejected log-ratio scaled by lambda < 1 to keep the chosen likelihood up.",
)
