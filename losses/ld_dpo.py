r"""LD-DPO: length-desensitised DPO (Liu et al., 2024).

Paper: arXiv:2409.06411; TRL ``ld_alpha``.

The longer response of a pair carries "verbose" tokens past the shorter one's length
``l_p = min(|y_w|, |y_l|)``. LD-DPO keeps the shared prefix at full weight and scales the
verbose tail by ``α ∈ [0, 1]`` in every sequence log-prob, policy and reference alike:

.. math::

    \log\hat\pi(y|x) = \sum_{t \le l_p}\log\pi(y_t|x, y_{<t})
                     + \alpha\sum_{t > l_p}\log\pi(y_t|x, y_{<t})

    \mathcal{L}_{LD\text{-}DPO} = -\mathbb{E}\Big[\log\sigma\Big(\beta\big(
        \log\tfrac{\hat\pi_\theta(y_w)}{\hat\pi_{ref}(y_w)} - \log\tfrac{\hat\pi_\theta(y_l)}{\hat\pi_{ref}(y_l)}\big)\Big)\Big]

``α = 1`` is DPO; ``α = 0`` truncates both responses to the shared length. Positions count
response tokens only (``t`` is the index among the masked tokens), exactly as TRL does.

Inputs: token log-probs (B,T) of policy and reference for both responses and their masks.
Reduction: mean over pairs. Default ``ld_alpha = 0.5``, inside the paper's range; TRL has no
default (``None`` disables it).

Metrics: implicit rewards on the desensitised log-ratios (detached), accuracy, margin.
"""

from __future__ import annotations

import torch.nn.functional as F

from losses._common import pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.sampo import TOKEN_FIELDS
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)


def length_weights(mask: Tensor, shared_len: Tensor, ld_alpha: float) -> Tensor:
    """(B,T) weights: 1 on the first ``shared_len`` response tokens, ``α`` after, 0 off the mask."""
    position = mask.cumsum(-1)
    tail = (position > shared_len.unsqueeze(-1)).to(mask.dtype)
    return mask * (1.0 - tail + ld_alpha * tail)


def desensitised_logratios(inputs: LossInputs, ld_alpha: float) -> tuple[Tensor, Tensor]:
    """Chosen and rejected ``log π̂_θ - log π̂_ref``, each (B,)."""
    shared = inputs.chosen_mask.sum(-1).minimum(inputs.rejected_mask.sum(-1))
    w_c = length_weights(inputs.chosen_mask, shared, ld_alpha)
    w_r = length_weights(inputs.rejected_mask, shared, ld_alpha)
    chosen = ((inputs.chosen_token_logps - inputs.ref_chosen_token_logps) * w_c).sum(-1)
    rejected = ((inputs.rejected_token_logps - inputs.ref_rejected_token_logps) * w_r).sum(-1)
    return chosen, rejected


def ld_dpo_loss(inputs: LossInputs, *, beta: float = 0.1, ld_alpha: float = 0.5) -> LossOutput:
    inputs.require(NAME, *TOKEN_FIELDS)
    chosen, rejected = desensitised_logratios(inputs, ld_alpha)
    losses = -F.logsigmoid(beta * (chosen - rejected))
    return pair_output(losses, beta * chosen, beta * rejected)


spec = pairs_spec(
    NAME,
    ld_dpo_loss,
    paper="arXiv:2409.06411",
    version=1,
    description="LD-DPO: DPO with the log-probs of tokens past the shorter response's length scaled by ld_alpha.",
)
