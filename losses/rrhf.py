r"""RRHF: Rank Responses to align Human Feedback (Yuan et al., 2023).

Paper: arXiv:2304.05302, Eqs. 1-4.

.. math::

    p_i = \frac{\sum_t \log\pi_\theta(y_{i,t}\mid x, y_{i,<t})}{\|y_i\|^{\,\ell}}, \qquad
    \mathcal{L}_{rank} = \sum_{r_i < r_j} \max(0,\; p_i - p_j)

    \mathcal{L}_{ft} = -\sum_t \log\pi_\theta(y_{i',t}\mid x, y_{i',<t}), \quad i' = \arg\max_i r_i,
    \qquad \mathcal{L} = w\,\mathcal{L}_{rank} + \mathcal{L}_{ft}

With pairs (two responses per prompt, the chosen ranked above the rejected) the ranking sum has
one term, ``max(0, p_l - p_w)``, and the best response is the chosen one. ``ℓ`` is
``length_penalty`` (1 = the paper's length-normalised score); ``w`` is ``rrhf_weight``.

Inputs: ``chosen_logps``, ``rejected_logps`` (B,) summed, ``chosen_mask``, ``rejected_mask``.
Reduction: both terms are per prompt (the paper's sums) and averaged over the B prompts.
Metrics: the scores ``p`` as rewards (detached), accuracy, margin; ``rank_loss``, ``nll``.
Defaults: ``rrhf_weight = 1`` and ``length_penalty = 1``, the paper's Eq. 4 (no weight).

Not in TRL. The authors' code (GanjinZero/RRHF ``train.py``) differs from the paper, and we
follow the paper: its fine-tuning term is ``-mean`` of the best response's token log-probs over
the *padded* sequence length L (prompt positions and padding count as zeros), and it multiplies
the ranking term by ``rrhf_weight = 100``. Relative to ``L_ft``, the code therefore weighs the
ranking term 100·L times more than Eq. 4 does; per token, the paper's ranking gradient is
``1/|y|`` of the NLL's, so with the defaults RRHF stays close to SFT on the chosen. To run the
code's balance, set ``rrhf_weight`` to about 100 × (typical padded length).
The reference study (oxRL) has no RRHF.
"""

from __future__ import annotations

from losses._common import lengths, reward_metrics
from losses.registry import LossSpec
from losses.types import LossInputs, LossOutput


def rrhf_loss(inputs: LossInputs, *, rrhf_weight: float, length_penalty: float) -> LossOutput:
    inputs.require("rrhf", "chosen_logps", "rejected_logps", "chosen_mask", "rejected_mask")
    chosen = inputs.chosen_logps / lengths(inputs.chosen_mask) ** length_penalty
    rejected = inputs.rejected_logps / lengths(inputs.rejected_mask) ** length_penalty
    rank = (rejected - chosen).clamp(min=0).mean()
    nll = -inputs.chosen_logps.mean()
    metrics = reward_metrics(chosen, rejected)
    metrics.update({"rank_loss": rank.detach(), "nll": nll.detach()})
    return LossOutput(rrhf_weight * rank + nll, metrics)


spec = LossSpec(
    name="rrhf",
    fn=rrhf_loss,
    paradigm="offline_ref_free",
    data="pairs",
    needs_reference=False,
    defaults={"rrhf_weight": 1.0, "length_penalty": 1.0},
    paper="arXiv:2304.05302 Eqs. 1-4",
    version=1,
    description="RRHF: hinge ranking loss on length-normalised log-probs plus the NLL of the best (chosen) response.",
)
