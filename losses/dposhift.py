r"""DPO-Shift: shifting the distribution of DPO (Yang et al., 2025).

Paper: arXiv:2502.07599; official code Meaquadddd/DPO-Shift (``dpo_lambda``).

DPO lowers the chosen likelihood along with the rejected one ("likelihood displacement").
DPO-Shift scales the rejected log-ratio by ``λ < 1``, trading some reward margin for a
higher chosen probability:

.. math::

    \mathcal{L}_{DPO\text{-}Shift} = -\mathbb{E}\Big[\log\sigma\Big(\beta\log\tfrac{\pi_\theta(y_w)}{\pi_{ref}(y_w)}
        - \lambda\,\beta\log\tfrac{\pi_\theta(y_l)}{\pi_{ref}(y_l)}\Big)\Big]

``λ = 1`` is DPO. The paper studies a fixed ``λ`` in [0.5, 0.95] and linear schedules of λ over
training; we implement the fixed form (a schedule needs the training step, which a pure loss
does not see). Default ``shift_lambda = 0.95``, the least aggressive value the paper sweeps
(the reference study, oxRL, uses 0.5).

Inputs: the four summed log-probs (B,). Reduction: mean over pairs. TRL has no DPO-Shift.

Metrics: implicit rewards (detached), accuracy, margin.
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import pair_logratios, reward_metrics
from losses.registry import LossSpec
from losses.types import LossInputs, LossOutput


def dposhift_loss(inputs: LossInputs, *, beta: float = 0.1, shift_lambda: float = 0.95) -> LossOutput:
    inputs.require("dposhift", "chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps")
    chosen, rejected = pair_logratios(inputs)
    losses = -F.logsigmoid(beta * chosen - shift_lambda * beta * rejected)
    return LossOutput(losses.mean(), reward_metrics(beta * chosen, beta * rejected))


spec = LossSpec(
    name="dposhift",
    fn=dposhift_loss,
    paradigm="offline",
    data="pairs",
    needs_reference=True,
    defaults={"beta": 0.1, "shift_lambda": 0.95},
    paper="arXiv:2502.07599 (fixed lambda)",
    version=1,
    description="DPO-Shift: DPO with the rejected log-ratio scaled by lambda < 1 to keep the chosen likelihood up.",
)
