r"""ODPO: DPO with an offset (Amini, Vieira & Cotterell, 2024).

Paper: arXiv:2402.10571 (the ODPO loss with the log-scaled offset); official code rycolab/odpo.

.. math::

    \mathcal{L}_{ODPO} = -\mathbb{E}\Big[\log\sigma\big(\beta h - \Delta_r\big)\Big],\qquad
    h = \log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)} - \log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)},

    \Delta_r = \alpha\,\log\big(r(x, y_w) - r(x, y_l)\big)

``r`` are the grader scores of the two responses (``chosen_rewards``, ``rejected_rewards``): the
implicit reward margin must exceed an offset that grows with how much better the chosen
response scored. ``Δ_r = 0`` is DPO.

Inputs: the four summed log-probs (B,) and, when present, ``chosen_rewards``/``rejected_rewards``
(B,). Reduction: mean over pairs.

Deviations, and why:

* No scores (``chosen_rewards`` or ``rejected_rewards`` is None): ``Δ_r`` falls back to the
  constant ``offset`` hyper-parameter (default 1.0, the reference study's (oxRL) constant
  ``odpo_delta``), because the paper's offset is undefined without scores.
* A score gap ``≤ 0`` makes the paper's log undefined; it is clamped at ``1e-6`` (offset
  ``α·log 1e-6 ≈ -13.8α``: a tie asks for almost no margin, as the log scaling implies).
* With 0/1 correctness scores every gap is 1, so ``Δ_r = α·log 1 = 0`` and ODPO is exactly
  DPO; this is what the paper's formula says, not a bug.

Metrics: implicit rewards ``β·log(π/π_ref)`` (detached), accuracy, margin, and the mean offset.
TRL has no ODPO; the official code (rycolab/odpo, ``alpha=1``) computes the same expression.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)

MIN_SCORE_GAP = 1e-6


def score_offset(inputs: LossInputs, *, alpha: float, offset: float) -> Tensor:
    """``α·log(r_w - r_l)`` per pair, or the constant ``offset`` when the scores are missing."""
    if inputs.chosen_rewards is None or inputs.rejected_rewards is None:
        return torch.full_like(inputs.chosen_logps, float(offset)).detach()
    gap = (inputs.chosen_rewards - inputs.rejected_rewards).detach().to(inputs.chosen_logps)
    return alpha * torch.log(gap.clamp(min=MIN_SCORE_GAP))


def odpo_loss(
    inputs: LossInputs, *, beta: float = 0.1, alpha: float = 1.0, offset: float = 1.0
) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    delta = score_offset(inputs, alpha=alpha, offset=offset)
    losses = -F.logsigmoid(beta * (chosen - rejected) - delta)
    return pair_output(losses, beta * chosen, beta * rejected, {"odpo/offset": delta.mean()})


spec = pairs_spec(
    NAME,
    odpo_loss,
    paper="arXiv:2402.10571 (ODPO loss, log-scaled offset)",
    version=1,
    description="DPO with an offset: the reward margin must exceed alpha*log(score gap) of the pair.",
)
