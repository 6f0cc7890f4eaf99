r"""APO-zero: anchored preference optimisation, "zero" anchor (D'Oosterlinck et al., 2024).

Paper: arXiv:2408.06266, Eq. 7; TRL ``loss_type="apo_zero"``.

.. math::

    r_w = \beta\log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)},\quad
    r_l = \beta\log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)},\qquad
    \mathcal{L}_{APO\text{-}zero} = \big(1 - \sigma(r_w)\big) + \sigma(r_l)

Each side is anchored to the reference (reward 0): the chosen likelihood is pushed up and the
rejected likelihood down, independently. Use it when the chosen answers are better than the
model's own outputs. The loss lies in (0, 2).
Deviation from the reference study (oxRL): oxRL wrote ``-σ(r_w) + σ(r_l)``, the same gradient
but offset by the constant -1; we keep TRL's values.

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


def apo_zero_loss(inputs: LossInputs, *, beta: float = 0.1) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    r_w, r_l = beta * chosen, beta * rejected
    losses = (1 - torch.sigmoid(r_w)) + torch.sigmoid(r_l)
    return pair_output(losses, r_w, r_l)


spec = pairs_spec(
    NAME,
    apo_zero_loss,
    paper="arXiv:2408.06266 Eq. 7",
    version=1,
    description="Anchored preference optimisation (zero): raise the chosen and lower the rejected likelihood.",
)
