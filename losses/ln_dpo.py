r"""LN-DPO: length-normalised DPO (per-token averaged log-ratios).

Paper: the length-normalised DPO objective of Tülu 3, arXiv:2411.15124 Sec. 5 (DPO
hyper-parameters: length-normalised, β = 5); discussed as a baseline in SimPO, arXiv:2405.14734.
TRL ``loss_type="sigmoid_norm"``.

.. math::

    \mathcal{L}_{LN\text{-}DPO} = -\log\sigma\Big(\beta\Big(
        \frac{\log\pi_\theta(y_w|x) - \log\pi_{ref}(y_w|x)}{|y_w|}
      - \frac{\log\pi_\theta(y_l|x) - \log\pi_{ref}(y_l|x)}{|y_l|}\Big)\Big)

DPO's implicit reward summed over tokens grows with the response length, which rewards verbosity;
averaging the log-ratio per response token (``|y|`` from ``chosen_mask`` / ``rejected_mask``)
removes that. Per-token log-ratios are ~|y| times smaller than summed ones, hence the large
default β = 5 (Tülu 3's value).

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
``chosen_mask``, ``rejected_mask`` (B, T). Reduction: mean over pairs.
Metrics: the standard implicit rewards (β × *summed* log-ratios, as TRL logs them) and
``ln_dpo/normalized_margin`` (mean per-token log-ratio margin).
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import normalized_margin, normalized_margin_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def ln_dpo_loss(inputs: LossInputs, *, beta: float = 5.0) -> LossOutput:
    margin = normalized_margin(inputs, NAME)
    losses = -F.logsigmoid(beta * margin)
    return normalized_margin_output(losses, margin, inputs, beta, NAME)


spec = pairs_spec(
    NAME,
    ln_dpo_loss,
    paper="arXiv:2411.15124 Sec. 5 (length-normalised DPO)",
    version=1,
    description="Length-normalised DPO: the DPO logistic loss on per-token averaged log-ratios.",
)
