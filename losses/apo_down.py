r"""APO-down: anchored preference optimisation, "down" anchor (D'Oosterlinck et al., 2024).

Paper: arXiv:2408.06266, Eq. 8; TRL ``loss_type="apo_down"``.

.. math::

    r_w = \beta\log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)},\quad
    r_l = \beta\log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)},\qquad
    \mathcal{L}_{APO\text{-}down} = \sigma(r_w) + \big(1 - \sigma(r_w - r_l)\big)

Both likelihoods are pushed down, the rejected one more (the second term keeps the margin
growing). Use it when the chosen answers are worse than the model's own outputs. Note that,
unlike every other loss of this family, raising the chosen log-prob can *raise* this loss.
The loss lies in (0, 2).
Deviation from the reference study (oxRL): oxRL wrote ``σ(r_w) - σ(r_w - r_l)``, the same
gradient but offset by -1; we keep TRL's values.

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs. Metrics: implicit rewards ``r_w``, ``r_l``.
"""

from __future__ import annotations

import torch

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def apo_down_loss(inputs: LossInputs, *, beta: float = 0.1) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    r_w, r_l = beta * chosen, beta * rejected
    losses = torch.sigmoid(r_w) + (1 - torch.sigmoid(r_w - r_l))
    return pair_output(losses, r_w, r_l)


spec = pairs_spec(
    NAME,
    apo_down_loss,
    paper="arXiv:2408.06266 Eq. 8",
    version=1,
    description="Anchored preference optimisation (down): lower both likelihoods, the rejected one more.",
)
