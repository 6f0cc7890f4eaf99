r"""R-DPO: length-regularised DPO (Park et al., 2024).

Paper: arXiv:2403.19159, Sec. 4 (length-regularised objective and its DPO loss). Not in TRL 1.16.

.. math::

    \mathcal{L}_{R\text{-}DPO} = -\log\sigma\big(\beta h + \alpha(|y_w| - |y_l|)\big),\qquad
    h = \log\tfrac{\pi_\theta(y_w|x)}{\pi_{ref}(y_w|x)} - \log\tfrac{\pi_\theta(y_l|x)}{\pi_{ref}(y_l|x)}

Derivation (why the sign is ``+``): the paper regularises the RLHF objective with a length
penalty, ``max_π E[r(x, y) − α|y|] − β KL(π‖π_ref)``. Its optimum gives
``r(x, y) = β log(π/π_ref) + α|y| + const``, and the Bradley–Terry likelihood of ``r`` is
``σ(βh + α(|y_w| − |y_l|))``. The length term does not depend on θ; it only reweights pairs: the
gradient weight ``σ(−βh − αΔ|y|)`` is *smaller* when the chosen answer is longer (a preference
that length alone could explain) and larger when it is shorter, so the policy cannot buy margin
with verbosity.

``|y|`` is the number of response tokens (sum of ``chosen_mask`` / ``rejected_mask``).
α = 0, or equal lengths, is DPO.

Deviation from the reference study (oxRL): oxRL computed ``βh − α(|y_w| − |y_l|)`` (the length
term inverted), which up-weights pairs whose chosen answer is longer and so *encourages* length
exploitation; its own docstring describes the paper's behaviour, not its code.

Default α = 0.01 (the reference study's default; the paper tunes α per dataset, and the value
needed scales with typical length differences).
Inputs: ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``, ``ref_rejected_logps`` (B,),
``chosen_mask``, ``rejected_mask`` (B, T). Reduction: mean over pairs.
Metrics: implicit rewards ``β·log(π/π_ref)`` and ``rdpo/length_diff`` (mean ``|y_w| − |y_l|``).
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def rdpo_loss(inputs: LossInputs, *, beta: float = 0.1, alpha: float = 0.01) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME, "chosen_mask", "rejected_mask")
    length_diff = inputs.chosen_mask.sum(-1) - inputs.rejected_mask.sum(-1)
    losses = -F.logsigmoid(beta * (chosen - rejected) + alpha * length_diff)
    return pair_output(
        losses, beta * chosen, beta * rejected, {"rdpo/length_diff": length_diff.detach().float().mean()}
    )


spec = pairs_spec(
    NAME,
    rdpo_loss,
    paper="arXiv:2403.19159 Sec. 4 (R-DPO)",
    version=1,
    description="Length-regularised DPO: a +α(|y_w|-|y_l|) term in the logit stops DPO buying margin with length.",
)
