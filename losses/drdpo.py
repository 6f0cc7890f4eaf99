r"""Dr. DPO: distributionally robustified DPO (Wu et al., 2024).

Paper: arXiv:2407.07880 (ICLR 2025); official code junkangwu/Dr_DPO.

A KL-constrained distributionally robust objective over the pairs of a batch has the dual
``-β' log E[exp(-ℓ/β')]`` of the per-pair DPO losses ``ℓ_i``: pairs with a high loss (likely
noisy labels) get exponentially less weight than under the plain mean.

.. math::

    \ell_i = -\log\sigma(\beta h_i),\qquad
    \mathcal{L}_{Dr.DPO} = -\beta'\log\Big(\frac{1}{B}\sum_{i=1}^{B} e^{-\ell_i/\beta'}\Big)

``β' → ∞`` gives the mean of ``ℓ_i`` (DPO). The effective weight of pair ``i`` in the gradient
is ``softmax_i(-ℓ/β')``. Computed with ``logsumexp`` for stability.

Inputs: the four summed log-probs (B,). Reduction: the log-mean-exp over the batch (the
paper's, so the loss depends on the micro-batch composition). TRL has no Dr. DPO.

Metrics: implicit rewards (detached), accuracy, margin, the plain DPO mean for comparison.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, reward_metrics
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def drdpo_loss(inputs: LossInputs, *, beta: float = 0.1, beta_prime: float = 1.0) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    losses = -F.logsigmoid(beta * (chosen - rejected))
    loss = -beta_prime * (torch.logsumexp(-losses / beta_prime, dim=0) - math.log(losses.numel()))
    metrics = reward_metrics(beta * chosen, beta * rejected)
    metrics["drdpo/dpo_loss"] = losses.mean().detach()
    return LossOutput(loss, metrics)


spec = pairs_spec(
    NAME,
    drdpo_loss,
    paper="arXiv:2407.07880",
    version=1,
    description="Dr. DPO: DPO losses aggregated by -beta' log mean exp(-loss/beta'), robust to noisy pairs.",
)
