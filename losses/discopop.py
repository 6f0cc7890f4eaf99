r"""DiscoPOP: the LLM-discovered log-ratio modulated loss, LRML (Chris Lu et al., 2024).

Paper: arXiv:2406.08414, Eq. 5; TRL ``loss_type="discopop"``.

.. math::

    \rho = \beta h,\qquad m = \sigma(\rho/\tau),\qquad
    \mathcal{L}_{LRML} = (1 - m)\,\big(-\log\sigma(\rho)\big) + m\, e^{-\rho}

with ``h`` the DPO log-ratio margin and τ = ``discopop_tau``. The mixing weight ``m`` blends the
logistic (DPO) loss, used where the margin is negative, with the exponential loss, used where it
is positive; τ sets how sharp the switch is (τ → 0: hard switch at ρ = 0; τ → ∞: an even mix).
The loss is not monotone in ρ near 0 (for τ = 0.05 it rises between ρ ≈ 0 and small positive ρ);
this is the published loss, not a bug.

Defaults: τ = 0.05 (the paper's value, TRL's default) and β = 0.05 (the β of the paper's
experiments; TRL's generic default is 0.1).

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs. Metrics: implicit rewards ``β·log(π/π_ref)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def discopop_loss(inputs: LossInputs, *, beta: float = 0.05, discopop_tau: float = 0.05) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    rho = beta * (chosen - rejected)
    mix = torch.sigmoid(rho / discopop_tau)
    losses = (1 - mix) * -F.logsigmoid(rho) + mix * torch.exp(-rho)
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    discopop_loss,
    paper="arXiv:2406.08414 Eq. 5 (LRML)",
    version=1,
    description="DiscoPOP: log-ratio modulated blend of the logistic and exponential losses.",
)
