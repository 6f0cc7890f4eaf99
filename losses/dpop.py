r"""DPOP: DPO-Positive, the Smaug loss (Pal et al., 2024).

Paper: arXiv:2402.13228, Eq. 3. Not in TRL 1.16 (TRL's ``rpo_alpha`` is a different method).

.. math::

    \mathcal{L}_{DPOP} = -\log\sigma\Big(\beta\Big(
        \log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)} - \log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)}
        - \lambda\max\big(0,\ \log\tfrac{\pi_{ref}(y_w|x)}{\pi_\theta(y_w|x)}\big)\Big)\Big)

DPO can lower the likelihood of the *chosen* answer as long as the rejected one falls faster,
which hurts most on pairs with small edit distance (e.g. maths). DPOP subtracts a hinge penalty,
inside the sigmoid and scaled by β, whenever the policy's chosen log-prob drops below the
reference's. λ = ``dpop_lambda``; λ = 0 is DPO, and so is any pair with ``π_θ(y_w) ≥ π_ref(y_w)``.

Defaults: λ = 50 (the paper's value for the Smaug models); β = 0.1, DPO's default.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs.
Metrics: implicit rewards ``β·log(π/π_ref)`` and ``dpop/penalty`` (mean of the max(0, ·) term).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def dpop_loss(inputs: LossInputs, *, beta: float = 0.1, dpop_lambda: float = 50.0) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    penalty = torch.relu(-chosen)  # max(0, log π_ref(y_w) - log π_θ(y_w))
    losses = -F.logsigmoid(beta * (chosen - rejected - dpop_lambda * penalty))
    return pair_output(losses, beta * chosen, beta * rejected, {"dpop/penalty": penalty.detach().mean()})


spec = pairs_spec(
    NAME,
    dpop_loss,
    paper="arXiv:2402.13228 Eq. 3",
    version=1,
    description="DPO-Positive: DPO with a penalty when the chosen log-prob falls below the reference's.",
)
