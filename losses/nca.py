r"""NCA: noise-contrastive alignment, pairwise form (Chen et al., 2024).

Paper: arXiv:2402.05369, Sec. 3 (NCA loss for K = 2 responses); TRL ``loss_type="nca_pair"``.

.. math::

    r_w = \beta\log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)},\quad
    r_l = \beta\log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)}

    \mathcal{L}_{NCA} = -\log\sigma(r_w) - \tfrac12\log\sigma(-r_w) - \tfrac12\log\sigma(-r_l)

NCA classifies each response's *absolute* implicit reward against noise instead of comparing the
two: the first term raises the chosen reward, the other two keep both rewards from growing without
bound. Unlike DPO it does not let the chosen likelihood fall as long as the margin grows.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs. Metrics: implicit rewards ``r_w``, ``r_l``.
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def nca_loss(inputs: LossInputs, *, beta: float = 0.1) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    r_w, r_l = beta * chosen, beta * rejected
    losses = -F.logsigmoid(r_w) - 0.5 * F.logsigmoid(-r_w) - 0.5 * F.logsigmoid(-r_l)
    return pair_output(losses, r_w, r_l)


spec = pairs_spec(
    NAME,
    nca_loss,
    paper="arXiv:2402.05369 Sec. 3 (NCA, K=2)",
    version=1,
    description="Noise-contrastive alignment: per-response classification of absolute implicit rewards.",
)
