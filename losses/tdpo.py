r"""TDPO: token-level DPO (Zeng et al., 2024).

Paper: arXiv:2404.11999 (TDPO1 and TDPO2 losses); official code
Vance0124/Token-level-Direct-Preference-Optimization.

TDPO adds to DPO's margin the difference of the sequential (token-summed) KL divergences
between reference and policy on the two responses:

.. math::

    D_{SeqKL}(x, y) = \sum_t \mathrm{KL}\big(\pi_{ref}(\cdot|x, y_{<t})\,\|\,\pi_\theta(\cdot|x, y_{<t})\big)

    u = \log\tfrac{\pi_\theta(y_w)}{\pi_{ref}(y_w)} - \log\tfrac{\pi_\theta(y_l)}{\pi_{ref}(y_l)},\qquad
    \delta = D_{SeqKL}(x, y_l) - D_{SeqKL}(x, y_w)

    \text{TDPO}_1:\ \mathcal{L} = -\log\sigma\big(\beta(u - \delta)\big),\qquad
    \text{TDPO}_2:\ \mathcal{L} = -\log\sigma\big(\beta(u - \alpha\,\delta_2)\big),\
    \delta_2 = D_{SeqKL}(y_l) - \mathrm{sg}\big[D_{SeqKL}(y_w)\big]

TDPO2 (the default, ``tdpo2=True``) stops the gradient of the chosen KL and weights the KL
difference by ``alpha`` (0.5 in the paper). Each KL is over the whole vocabulary, so this loss
needs the full logits of policy and reference (``needs_full_logits=True``); no token-logp
approximation is used.

Inputs: summed log-probs (B,), logits (B,T,V) of policy and reference at the response
positions, masks (B,T). Reduction: mean over pairs.

Metrics: implicit rewards ``β·log(π/π_ref)`` (detached, as in the other pairwise losses; the
official code adds the KL to them), accuracy, margin, mean sequential KL of each response.
The reference study (oxRL) has no TDPO module; TRL has no TDPO.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)

#: read besides the pair's summed log-probs (``losses._common.PAIR_FIELDS``)
MORE_FIELDS = (
    *("chosen_mask", "rejected_mask"),
    *("chosen_logits", "rejected_logits", "ref_chosen_logits", "ref_rejected_logits"),
)


def sequential_kl(logits: Tensor, ref_logits: Tensor, mask: Tensor) -> Tensor:
    """``Σ_t KL(π_ref(·|t) || π_θ(·|t))`` over the masked positions, (B,)."""
    dtype = torch.promote_types(logits.dtype, torch.float32)  # bf16 logits: softmax in float32
    logp = F.log_softmax(logits.to(dtype), dim=-1)
    ref_logp = F.log_softmax(ref_logits.detach().to(dtype), dim=-1)
    kl = (ref_logp.exp() * (ref_logp - logp)).sum(-1)
    return (kl * mask).sum(-1).to(logits.dtype)


def tdpo_loss(inputs: LossInputs, *, beta: float = 0.1, alpha: float = 0.5, tdpo2: bool = True) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME, *MORE_FIELDS)
    kl_w = sequential_kl(inputs.chosen_logits, inputs.ref_chosen_logits, inputs.chosen_mask)
    kl_l = sequential_kl(inputs.rejected_logits, inputs.ref_rejected_logits, inputs.rejected_mask)
    delta = alpha * (kl_l - kl_w.detach()) if tdpo2 else kl_l - kl_w
    losses = -F.logsigmoid(beta * (chosen - rejected - delta))
    return pair_output(
        losses,
        beta * chosen,
        beta * rejected,
        {"tdpo/kl_chosen": kl_w.mean().detach(), "tdpo/kl_rejected": kl_l.mean().detach()},
    )


spec = pairs_spec(
    NAME,
    tdpo_loss,
    needs_full_logits=True,
    paper="arXiv:2404.11999 (TDPO2)",
    version=1,
    description="TDPO: DPO margin minus the (weighted) difference of token-level KL(ref||policy) on the two responses.",
)
