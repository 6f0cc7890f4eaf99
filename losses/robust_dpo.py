r"""rDPO: provably robust DPO under label noise (Chowdhury et al., 2024).

Paper: arXiv:2403.00409, Sec. 3 (the de-biased loss); TRL ``loss_type="robust"``.

.. math::

    \ell(h) = -\log\sigma(\beta h),\qquad
    \mathcal{L}_{rDPO} = \frac{(1-\varepsilon)\,\ell(h) - \varepsilon\,\ell(-h)}{1-2\varepsilon}
                       = \frac{-(1-\varepsilon)\log\sigma(\beta h) + \varepsilon\log\sigma(-\beta h)}{1-2\varepsilon}

with ``h`` the DPO log-ratio margin and ε (``label_smoothing``, TRL's name) the probability that a
label is flipped, ε ∈ [0, 0.5). The loss is an unbiased estimate of the clean DPO loss: if the
observed label is flipped with probability ε, ``(1-ε)·L(h) + ε·L(-h) = ℓ(h)`` exactly.
Unlike cDPO's smoothed target, the ε term enters with a **minus** sign.

Deviation from the reference study (oxRL): oxRL added the ε term
(``-[(1-ε)logσ(βh) + ε logσ(-βh)]/(1-2ε)``), which is just cDPO rescaled by 1/(1-2ε) and is not
unbiased; we use the paper's (and TRL's) sign.

Default ε = 0.1, the typical value TRL cites from the paper.
Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
summed over response tokens. Reduction: mean over pairs. Metrics: implicit rewards ``β·log(π/π_ref)``.
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def robust_dpo_loss(inputs: LossInputs, *, beta: float = 0.1, label_smoothing: float = 0.1) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    eps = label_smoothing
    if not 0.0 <= eps < 0.5:
        raise ValueError(f"loss {NAME!r}: label_smoothing must lie in [0, 0.5), got {eps}")
    z = beta * (chosen - rejected)
    losses = (-(1 - eps) * F.logsigmoid(z) + eps * F.logsigmoid(-z)) / (1 - 2 * eps)
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    robust_dpo_loss,
    paper="arXiv:2403.00409 Sec. 3 (unbiased robust loss)",
    version=1,
    description="Robust DPO: de-biased DPO loss that is unbiased for the clean loss under flip rate ε.",
)
