r"""f-DPO: DPO under an f-divergence constraint (Wang et al., 2023).

Paper: arXiv:2309.16240 (the table of f-divergences and the f-DPO loss). Regularising with
``D_f(π_θ || π_ref)`` instead of the reverse KL makes the optimal policy satisfy
``r(x, y) = β f'(π_θ(y|x)/π_ref(y|x)) + const``, and the constant cancels in the Bradley-Terry
difference. With ``u = π_θ/π_ref`` (sequence level, ``u = exp(log-ratio)``):

.. math::

    \mathcal{L}_{f\text{-}DPO} = -\mathbb{E}\Big[\log\sigma\big(\beta f'(u_w) - \beta f'(u_l)\big)\Big]

=================  ===============================================  ============================
``f_divergence``   ``f'(u)``                                         gradient in ``log u`` at u=1
=================  ===============================================  ============================
reverse_kl         ``log u``  (DPO)                                  1
forward_kl         ``-1/u``                                           1
js_divergence      ``log(2u / (1 + u)) = log 2 + logσ(log u)``       1/2
alpha_divergence   ``(1 - u^{-α}) / α``, α = f_alpha_divergence_coef  1
=================  ===============================================  ============================

``α → 0`` recovers reverse KL and ``α = 1`` forward KL (the paper's convention, α ∈ (0, 1)).

Gradient at initialisation (policy == reference, every ``log u = 0``): the paper's forward-KL
score ``-1/u = -exp(-log u)`` has derivative ``exp(-log u) = 1`` in ``log u``, so the pair gets
the same push as in DPO. The reference study (oxRL) instead uses
``β(h_w - h_l) + β(e^{-h_w} - e^{-h_l})``, i.e. ``f'(u) = log u + 1/u``, whose derivative
``1 - e^{-log u}`` is 0 at ``u = 1``: its forward-KL f-DPO cannot move away from the
reference at all. Its JS and α variants also leave β off part of the score; we use the table
above for every type. ``tests/loss_algorithms/test_dpo_b.py`` checks the non-zero gradient at init.

Inputs: the four summed log-probs (B,). Reduction: mean over pairs.

Deviations, and why:

* TRL 1.16 writes the α-divergence score as ``(u^{a-1} - 1)/(a - 1)`` with
  ``a = f_alpha_divergence_coef``: that is our form with ``α = 1 - a``. Both agree at the
  default 0.5; elsewhere TRL's ``a`` is our ``1 - α`` (ours is the paper's α).
* The exponent in ``u^{-α}`` and ``1/u`` is clamped at 80 (``exp(80)`` is finite in float32), as
  TRL does for its α-divergence, so a very unlikely response cannot turn the loss into inf.

Metrics: implicit rewards ``β·log u`` (detached), accuracy, margin, and the mean score margin.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)

F_DIVERGENCES = ("reverse_kl", "forward_kl", "js_divergence", "alpha_divergence")
MAX_EXPONENT = 80.0


def capped_exp(x: Tensor) -> Tensor:
    return torch.exp(x.clamp(max=MAX_EXPONENT))


def f_prime(logratio: Tensor, f_divergence_type: str, alpha: float) -> Tensor:
    """``f'(u)`` of the chosen divergence, from ``log u``."""
    if f_divergence_type == "reverse_kl":
        return logratio
    if f_divergence_type == "forward_kl":
        return -capped_exp(-logratio)
    if f_divergence_type == "js_divergence":
        return math.log(2.0) + F.logsigmoid(logratio)
    if f_divergence_type == "alpha_divergence":
        return (1.0 - capped_exp(-alpha * logratio)) / alpha
    raise ValueError(
        f"loss {NAME!r}: f_divergence_type {f_divergence_type!r} is not one of {', '.join(F_DIVERGENCES)}"
    )


def fdpo_loss(
    inputs: LossInputs,
    *,
    beta: float = 0.1,
    f_divergence_type: str = "reverse_kl",
    f_alpha_divergence_coef: float = 0.5,
) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    score = f_prime(chosen, f_divergence_type, f_alpha_divergence_coef)
    score = score - f_prime(rejected, f_divergence_type, f_alpha_divergence_coef)
    losses = -F.logsigmoid(beta * score)
    return pair_output(
        losses, beta * chosen, beta * rejected, {"fdpo/score_margin": (beta * score).mean().detach()}
    )


spec = pairs_spec(
    NAME,
    fdpo_loss,
    paper="arXiv:2309.16240 (f-DPO loss)",
    version=1,
    description="f-DPO: DPO with the log link replaced by f'(pi/pi_ref) of a reverse/forward KL, JS or alpha divergence.",
)
