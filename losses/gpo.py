r"""GPO: generalised preference optimisation (Tang et al., 2024).

Paper: arXiv:2402.05749 (the table of convex losses of the scaled margin).

Offline preference optimisation as binary classification of the margin
``ρ = β h``, ``h = log π_θ/π_ref(y_w) - log π_θ/π_ref(y_l)``, with a convex loss ``f``:

=======================  =======================  ============
``loss_type``            ``f(ρ)``                  known as
=======================  =======================  ============
logistic                 ``log(1 + e^{-ρ})``       DPO
exponential              ``e^{-ρ}``                (new)
truncated_quadratic      ``max(0, 1 - ρ)²``        (new)
savage                   ``1 / (1 + e^{ρ})²``      (new)
=======================  =======================  ============

.. math::  \mathcal{L}_{GPO} = \mathbb{E}\big[f(\beta h)\big]

(hinge ``max(0, 1-ρ)`` is SLiC and squared ``(ρ-1)²`` is IPO-like; they are the ``hinge`` and
``ipo`` losses of this package.) Default ``loss_type = "exponential"``, as in the reference study
(oxRL); the paper has no single default.

Inputs: the four summed log-probs (B,). Reduction: mean over pairs.
The exponential loss is ``exp(-ρ)`` with ``ρ`` clamped at ``-80`` so a badly misranked pair
cannot overflow float32. TRL has no GPO.

Metrics: implicit rewards (detached), accuracy, margin.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)

GPO_LOSSES = ("logistic", "exponential", "truncated_quadratic", "savage")


def convex_loss(rho: Tensor, loss_type: str) -> Tensor:
    """``f(ρ)`` from GPO's table of convex losses."""
    if loss_type == "logistic":
        return F.softplus(-rho)
    if loss_type == "exponential":
        return torch.exp(-rho.clamp(min=-80.0))
    if loss_type == "truncated_quadratic":
        return torch.relu(1.0 - rho) ** 2
    if loss_type == "savage":
        return torch.sigmoid(-rho) ** 2
    raise ValueError(f"loss {NAME!r}: loss_type {loss_type!r} is not one of {', '.join(GPO_LOSSES)}")


def gpo_loss(inputs: LossInputs, *, beta: float = 0.1, loss_type: str = "exponential") -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    losses = convex_loss(beta * (chosen - rejected), loss_type)
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    gpo_loss,
    paper="arXiv:2402.05749 (GPO convex losses)",
    version=1,
    description="GPO: a convex loss (logistic, exponential, truncated quadratic, savage) of the DPO margin.",
)
