r"""DPO: Direct Preference Optimization (Rafailov et al., 2023).

Paper: arXiv:2305.18290, Eq. 7.

.. math::

    \mathcal{L}_{DPO} = -\mathbb{E}\Big[\log\sigma\Big(\beta\big(\log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)}
                        - \log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)}\big)\Big)\Big]

With ``label_smoothing`` ε > 0 this becomes conservative DPO (see ``cdpo``):
``-(1-ε) logσ(βh) - ε logσ(-βh)`` (older TRL's ``sigmoid`` with ``label_smoothing``; TRL 1.16's
``sigmoid`` ignores ``label_smoothing``, so parity is tested at ε = 0).

Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps``,
each (B,), summed over response tokens. Reduction: mean over pairs.
Metrics: implicit rewards ``β·log(π/π_ref)`` (detached), their accuracy and margin.
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def dpo_loss(inputs: LossInputs, *, beta: float = 0.1, label_smoothing: float = 0.0) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    h = chosen - rejected
    losses = -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    dpo_loss,
    paper="arXiv:2305.18290 Eq. 7",
    version=1,
    description="Direct Preference Optimization: logistic loss on the reference-relative log-ratio margin.",
)
