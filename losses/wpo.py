r"""WPO: weighted preference optimisation (Zhou et al., 2024).

Paper: arXiv:2406.11827 (Eq. 2 with the "sampled" weight alignment); TRL ``use_weighting=True``.

Off-policy pairs are re-weighted by how likely the current policy is to produce them, which
simulates on-policy data. The weight of a response is its length-normalised probability,
aligned so that a response sampled from the policy itself gets weight 1 in expectation:

.. math::

    w(x, y) = \exp\Big(\frac{1}{|y|}\sum_t \log\frac{\pi_\theta(y_t|x, y_{<t})}
              {\sum_{v\in V}\pi_\theta(v|x, y_{<t})^2}\Big)\quad\text{(detached)}

    \mathcal{L}_{WPO} = -\mathbb{E}\big[w(x, y_w)\,w(x, y_l)\,\log\sigma(\beta h)\big],\qquad
    h = \log\tfrac{\pi_\theta(y_w)}{\pi_{ref}(y_w)} - \log\tfrac{\pi_\theta(y_l)}{\pi_{ref}(y_l)}

``Σ_v π(v)²`` is the probability that a sample from the policy's next-token distribution equals
another sample (the expected probability of a sampled token): dividing by it is the paper's
sampled alignment. It needs the full next-token distribution, hence ``needs_full_logits``.

Inputs: summed log-probs (B,), policy token log-probs and masks (B,T), policy logits
``chosen_logits``/``rejected_logits`` (B,T,V) at the response positions. Reduction: mean over
pairs of the weighted loss (no renormalisation by the weights, as in the paper and TRL).

Deviation from the reference study (oxRL): oxRL uses ``min(exp(mean log π(y_w) + mean log π(y_l)), 1)``
without alignment and divides by the sum of the weights; we follow the paper and TRL.

Metrics: implicit rewards (detached), accuracy, margin, mean pair weight.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, masked_mean, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)

#: read besides the pair's summed log-probs (``losses._common.PAIR_FIELDS``)
MORE_FIELDS = (
    *("chosen_token_logps", "rejected_token_logps", "chosen_mask", "rejected_mask"),
    *("chosen_logits", "rejected_logits"),
)


@torch.no_grad()
def response_weight(token_logps: Tensor, logits: Tensor, mask: Tensor) -> Tensor:
    """``exp(mean_t [log π(y_t) - log Σ_v π(v)²])`` per response, (B,), without gradient."""
    dtype = torch.promote_types(logits.dtype, torch.float32)  # bf16 logits: sum the squares in float32
    log_sum_sq = torch.logsumexp(2.0 * F.log_softmax(logits.to(dtype), dim=-1), dim=-1)
    return torch.exp(masked_mean(token_logps.to(dtype) - log_sum_sq, mask)).to(token_logps.dtype)


def wpo_loss(inputs: LossInputs, *, beta: float = 0.1) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME, *MORE_FIELDS)
    w_c = response_weight(inputs.chosen_token_logps, inputs.chosen_logits, inputs.chosen_mask)
    w_r = response_weight(inputs.rejected_token_logps, inputs.rejected_logits, inputs.rejected_mask)
    weight = w_c * w_r
    losses = -weight * F.logsigmoid(beta * (chosen - rejected))
    return pair_output(losses, beta * chosen, beta * rejected, {"wpo/weight": weight.mean()})


spec = pairs_spec(
    NAME,
    wpo_loss,
    needs_full_logits=True,
    paper="arXiv:2406.11827 Eq. 2 (sampled alignment)",
    version=1,
    description="WPO: DPO with each pair weighted by the policy's aligned, length-normalised probability of it.",
)
