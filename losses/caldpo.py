r"""Cal-DPO: calibrated DPO (Xiao et al., 2024).

Paper: arXiv:2412.14516 (the Cal-DPO objective); authors' code tengxiao1/Cal-DPO,
``scripts/dpo_trainer.py`` (``loss_type="Cal-DPO"``).

With the log-ratios ``h_w = log π_θ/π_ref(y_w)`` and ``h_l = log π_θ/π_ref(y_l)``:

.. math::

    \mathcal{L}_{Cal\text{-}DPO} = \mathbb{E}\Big[-\log\sigma(h_w - h_l)
        + \tfrac{1}{2}\Big(\big(h_w - \tfrac{1}{2\beta}\big)^2 + \big(h_l + \tfrac{1}{2\beta}\big)^2\Big)\Big]

The Bradley-Terry term has no β; β enters only through the calibration targets ``±1/(2β)``,
which pin the implicit rewards ``β·h`` to ``±1/2`` on an absolute scale, so the chosen
log-ratio is pushed up instead of drifting down together with the rejected one.

The weight ½ on the calibration term is the authors' code: ``DPO_loss + 0.5*Cal_loss`` with
``Cal_loss = mse(h_w, 1/(2β)) + mse(h_l, −1/(2β))`` (each ``mse`` a mean over the batch, so the
total is the batch mean of the bracket above). Version 1 used weight 1; version 2 uses ½.

Defaults: β = 1e-3, the authors' released run script (``run/beta001_sametokenize.sh``,
``loss_type=Cal-DPO beta=0.001``, Zephyr-7B on UltraFeedback); the paper searches
β ∈ {1e-3, 2e-3, 3e-3, 1e-2, 1e-1} and the base config the script overrides
(``zephyr-selm/dpo_config_full.yaml``) has β = 0.002. With β = 1e-3 the targets are ±500 nats,
far beyond any summed log-ratio a short answer reaches, so the calibration term acts as a
steady push up on the chosen and down on the rejected response. Version 2 (β was 0.1, the
TRL-generic value, in version 1).

Inputs: the four summed log-probs (B,). Reduction: mean over pairs.

Deviation from the reference study (oxRL): oxRL adds a weight ``caldpo_lambda`` on the
calibration term; we use the authors' fixed ½. TRL has no Cal-DPO.

Metrics: implicit rewards ``β·h`` (detached), accuracy, margin, and the two loss terms
(``caldpo/cal_loss`` is the unweighted sum of squares, before the ½).
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import checked_logratios, reward_metrics
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)

CAL_WEIGHT = 0.5  # the authors' code: DPO_loss + 0.5 * Cal_loss


def caldpo_loss(inputs: LossInputs, *, beta: float = 0.001) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    target = 1.0 / (2.0 * beta)
    bt = -F.logsigmoid(chosen - rejected)
    cal = (chosen - target) ** 2 + (rejected + target) ** 2
    metrics = reward_metrics(beta * chosen, beta * rejected)
    metrics.update({"caldpo/bt_loss": bt.mean().detach(), "caldpo/cal_loss": cal.mean().detach()})
    return LossOutput((bt + CAL_WEIGHT * cal).mean(), metrics)


spec = pairs_spec(
    NAME,
    caldpo_loss,
    paper="arXiv:2412.14516 (Cal-DPO objective)",
    version=2,
    description="Cal-DPO: unscaled logistic loss plus half a squared regression of the log-ratios onto +-1/(2 beta).",
)
