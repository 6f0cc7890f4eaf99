r"""Cal-DPO: calibrated DPO (Xiao et al., 2024).

Paper: arXiv:2412.14516 (the Cal-DPO objective); official code Cal-DPO/Cal-DPO (``shift=0.5``).

With the log-ratios ``h_w = log π_θ/π_ref(y_w)`` and ``h_l = log π_θ/π_ref(y_l)``:

.. math::

    \mathcal{L}_{Cal\text{-}DPO} = \mathbb{E}\Big[-\log\sigma(h_w - h_l)
        + \big(h_w - \tfrac{1}{2\beta}\big)^2 + \big(h_l + \tfrac{1}{2\beta}\big)^2\Big]

The Bradley-Terry term has no β; β enters only through the calibration targets ``±1/(2β)``,
which pin the implicit rewards ``β·h`` to ``±1/2`` on an absolute scale, so the chosen
log-ratio is pushed up instead of drifting down together with the rejected one.

Inputs: the four summed log-probs (B,). Reduction: mean over pairs.

Deviation from the reference study (oxRL): oxRL adds a weight ``caldpo_lambda`` on the
calibration term; the paper and its code have none (weight 1), so neither do we.
TRL has no Cal-DPO.

Metrics: implicit rewards ``β·h`` (detached), accuracy, margin, and the two loss terms.
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import pair_logratios, reward_metrics
from losses.registry import LossSpec
from losses.types import LossInputs, LossOutput


def caldpo_loss(inputs: LossInputs, *, beta: float) -> LossOutput:
    inputs.require("caldpo", "chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps")
    chosen, rejected = pair_logratios(inputs)
    target = 1.0 / (2.0 * beta)
    bt = -F.logsigmoid(chosen - rejected)
    cal = (chosen - target) ** 2 + (rejected + target) ** 2
    metrics = reward_metrics(beta * chosen, beta * rejected)
    metrics.update({"caldpo/bt_loss": bt.mean().detach(), "caldpo/cal_loss": cal.mean().detach()})
    return LossOutput((bt + cal).mean(), metrics)


spec = LossSpec(
    name="caldpo",
    fn=caldpo_loss,
    paradigm="offline",
    data="pairs",
    needs_reference=True,
    defaults={"beta": 0.1},
    paper="arXiv:2412.14516 (Cal-DPO objective)",
    version=1,
    description="Cal-DPO: unscaled logistic loss plus a regression of the log-ratios onto +-1/(2 beta).",
)
