r"""AlphaPO: SimPO with an α-shaped reward (Gupta et al., 2025).

Paper: arXiv:2501.03884 (the AlphaPO reward and loss).

.. math::

    r_\alpha(x, y) = \frac{1}{\alpha}\Big(1 - \bar p_\theta(y|x)^{-\alpha}\Big),
    \qquad \bar p_\theta(y|x) = \exp\Big(\tfrac{1}{|y|}\log\pi_\theta(y|x)\Big)

    \mathcal{L}_{AlphaPO} = -\mathbb{E}\big[\log\sigma\big(\beta\,(r_\alpha(x,y_w) - r_\alpha(x,y_l)) - \gamma\big)\big]

``p̄`` is the per-token geometric-mean probability, so ``p̄^{-α} = exp(-α·mean-logp)``. Up to
the additive constant ``1/α``, which cancels in the margin, this is the paper's ``-(1/α)·p̄^{-α}``
(and TRL's form). As
α → 0, ``r_α → mean-logp`` and the loss is exactly SimPO (we use that limit at α = 0).
``label_smoothing`` ε as in TRL (ε = 0 is the paper).

Inputs: ``chosen_logps``, ``rejected_logps`` (B,) summed, ``chosen_mask``, ``rejected_mask``
(B, T). Reduction: mean over pairs. Metrics: rewards ``β·r_α`` (detached), accuracy, margin.
Defaults (TRL names ``alpha``, ``beta``, ``simpo_gamma``): α = 0.25, β = 2.5, γ = 0.1, the
paper's Mistral-Instruct setting (Table 3) as given in TRL's paper index.

Parity: equals TRL 1.16 ``CPOTrainer(loss_type="alphapo")`` (= ``loss_type="simpo"``,
``cpo_alpha=0``, ``alpha`` ≠ 0). Note TRL also accepts ``alpha`` with ``loss_type="sigmoid"``,
where it is applied to *summed* log-probs; the paper's reward is length-normalised.

Deviations from the reference study (oxRL): its defaults were α = 1.0, β = 0.1, γ = 0.5 (we use
the paper's); and it clamps ``-α·mean-logp`` at 50 before ``exp``. We do not clamp (TRL does not):
mean log-probs of real text are far from that range for |α| ≤ 1.
"""

from __future__ import annotations

import torch

from losses._common import pair_output
from losses._families import ref_free_pairs_spec
from losses.registry import loss_name
from losses.simpo import mean_logps, sigmoid_margin_loss
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)


def alpha_reward(mean_logp: Tensor, alpha: float) -> Tensor:
    """``(1 - exp(-α·mean_logp)) / α``; the α → 0 limit is ``mean_logp``."""
    if alpha == 0.0:
        return mean_logp
    return (1 - torch.exp(-alpha * mean_logp)) / alpha


def alphapo_loss(
    inputs: LossInputs,
    *,
    alpha: float = 0.25,
    beta: float = 2.5,
    simpo_gamma: float = 0.1,
    label_smoothing: float = 0.0,
) -> LossOutput:
    inputs.require(NAME, "chosen_logps", "rejected_logps", "chosen_mask", "rejected_mask")
    chosen, rejected = (alpha_reward(m, alpha) for m in mean_logps(inputs))
    losses = sigmoid_margin_loss(beta * (chosen - rejected) - simpo_gamma, label_smoothing)
    return pair_output(losses, beta * chosen, beta * rejected)


spec = ref_free_pairs_spec(
    NAME,
    alphapo_loss,
    paper="arXiv:2501.03884 (AlphaPO reward, SimPO loss)",
    version=1,
    description="AlphaPO: SimPO with the reward reshaped as (1 - p^-alpha)/alpha of the per-token mean probability.",
)
