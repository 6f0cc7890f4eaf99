r"""χPO: chi-squared preference optimisation (Huang et al., 2024).

Paper: arXiv:2407.13399 (ICLR 2025), the χPO objective.

A one-line change to DPO: the log link ``φ(z) = log z`` of the density ratio
``z = π_θ(y|x)/π_ref(y|x)`` becomes ``φ(z) = z + log z``, which corresponds to regularising
with the mixed χ² + KL divergence and penalises policies that put far more mass than the
reference on a response (pessimism against over-optimisation):

.. math::

    \mathcal{L}_{\chi PO} = -\mathbb{E}\Big[\log\sigma\Big(\mathrm{clip}_{2R_{max}}\big[
        \beta\varphi(z_w) - \beta\varphi(z_l)\big]\Big)\Big],\qquad \varphi(z) = z + \log z

``z = exp(log-ratio)`` of the whole sequence. Near ``z = 1`` (at initialisation) the gradient in
``log z`` is ``z + 1 = 2``: twice DPO's.

Inputs: the four summed log-probs (B,). Reduction: mean over pairs.

Deviations, and why:

* The clip to ``[-2R_max, 2R_max]`` is optional (``r_max=None``, the default, disables it): it
  serves the paper's bounded-reward analysis and needs a reward bound we do not know.
* ``z`` is computed as ``exp(min(log-ratio, 80))`` so it stays finite in float32; the log part
  keeps its gradient above the cap. (oxRL clamps the log-ratio to [-20, 20] inside the exp.)

TRL has no χPO. Metrics: implicit rewards ``β·log z`` (detached), accuracy, margin.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)

MAX_LOG_RATIO = 80.0


def chi_link(logratio: Tensor) -> Tensor:
    """``φ(z) = z + log z`` from ``log z``."""
    return torch.exp(logratio.clamp(max=MAX_LOG_RATIO)) + logratio


def chipo_loss(inputs: LossInputs, *, beta: float = 0.1, r_max: float | None = None) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    margin = beta * (chi_link(chosen) - chi_link(rejected))
    if r_max is not None:
        margin = margin.clamp(min=-2.0 * r_max, max=2.0 * r_max)
    losses = -F.logsigmoid(margin)
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    chipo_loss,
    paper="arXiv:2407.13399 (chi-PO objective)",
    version=1,
    description="chi-PO: DPO with the link log z replaced by z + log z (chi-squared + KL regularisation).",
)
