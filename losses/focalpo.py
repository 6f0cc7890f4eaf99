r"""FocalPO: focal preference optimisation (Liu et al., 2025).

Paper: arXiv:2501.06645 (ACL 2025 short).

DPO's gradient is largest on pairs the model ranks wrongly; FocalPO inverts the focal-loss
idea and scales the DPO loss by the model's confidence in the correct ranking, so misranked
pairs are down-weighted and correctly ranked ones emphasised:

.. math::

    p = \sigma(\beta h),\qquad h = \log\tfrac{\pi_\theta(y_w)}{\pi_{ref}(y_w)} - \log\tfrac{\pi_\theta(y_l)}{\pi_{ref}(y_l)}

    \mathcal{L}_{FocalPO} = -\mathbb{E}\big[p^{\gamma}\log p\big]

The modulating factor ``p^γ`` is part of the loss (its gradient is kept), so
``∂L/∂h = -β p^γ (1 - p)(1 + γ log p)``, the gradient the paper analyses. ``γ = 0`` is DPO.
Default ``γ = 0.05``, the single value the paper fixes across its experiments.

Inputs: the four summed log-probs (B,). Reduction: mean over pairs.

Deviation from the reference study (oxRL): oxRL detaches ``p^γ`` (a per-pair weight with no
gradient of its own) and uses ``γ = 1``; we keep the paper's loss and γ. TRL has no FocalPO.

Metrics: implicit rewards (detached), accuracy, margin, mean ``p^γ``.
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import checked_logratios, reward_metrics
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def focalpo_loss(inputs: LossInputs, *, beta: float = 0.1, gamma: float = 0.05) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    log_p = F.logsigmoid(beta * (chosen - rejected))
    factor = (gamma * log_p).exp()
    metrics = reward_metrics(beta * chosen, beta * rejected)
    metrics["focalpo/factor"] = factor.mean().detach()
    return LossOutput(-(factor * log_p).mean(), metrics)


spec = pairs_spec(
    NAME,
    focalpo_loss,
    paper="arXiv:2501.06645",
    version=1,
    description="FocalPO: DPO loss scaled by sigma(beta h)^gamma, down-weighting misranked pairs.",
)
