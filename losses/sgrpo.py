r"""SGRPO: the reference study's (oxRL's) token-level GRPO.

Paper: GRPO, arXiv:2402.03300 (Eq. 3), in the token-level form of oxRL ``algs/losses/sgrpo.py``.

.. math::

    \mathcal{L} = -\frac{1}{\sum_{i,t} m_{i,t}} \sum_{i,t} m_{i,t}
        \min\big(r_{i,t} A_{i,t},\ \mathrm{clip}(r_{i,t}, 1-\varepsilon, 1+\varepsilon_{high}) A_{i,t}\big)
        \;+\; \beta\,\frac{\sum_{i,t} m_{i,t}\,\mathrm{k3}_{i,t}}{\sum_{i,t} m_{i,t}}

``r = π_θ/π_old`` per token (1 with gradient when ``old_token_logps`` is None);
``A_i = (R_i − mean_g R) / (std_g R + 1e-8)`` per prompt group, unbiased std, eps 1e-8 =
oxRL's ``eps_reward_norm`` default (groups with identical rewards get exactly 0). The loss
is a mean over every response token of the batch (TRL ``loss_type="bnpo"``), not the
paper's per-response mean. k3 KL ``π_ref/π − log(π_ref/π) − 1`` only if ``beta > 0``
(default 0.0, as oxRL's ``kl_coeff``; ``needs_reference`` is False, so a trainer that sets
``beta > 0`` must load a reference); ``ε = ε_high = 0.2`` (oxRL ``clip_low``/``clip_high``).

``reward_broadcast=True`` gives every response token the rollout's advantage. oxRL's
shipped configs set ``reward.broadcast: False``, which puts the advantage on the last
response token only (all other tokens get A = 0); ``reward_broadcast=False`` reproduces that.

Deviations from oxRL: broadcast on by default (see above); ``clip_frac`` counts only tokens
whose gradient the clip zeroes (TRL's region definition), oxRL counts every ratio outside
``[1−ε, 1+ε]``; the entropy bonus is off by default, as oxRL's ``entropy_coeff`` (0).

The per-token pipeline (the ratio and its ``is_correction``/``is_cap``, the clip, ``beta``'s k3 KL,
``entropy_coef``) is the GRPO family's: :mod:`losses._grpo_family`.
"""

from __future__ import annotations

import torch

from losses._families import rollouts_spec
from losses._grpo_family import rollout_advantages, token_losses
from losses._online import token_mean
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)

Tensor = torch.Tensor
ADV_EPS = 1e-8  # oxRL reward.eps_reward_norm


def last_token_mask(mask: Tensor) -> Tensor:
    """(B, T) one-hot of each row's last response token (all zero for an empty response)."""
    positions = torch.arange(mask.size(1), device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, -1).amax(-1)
    return (positions == last[:, None]).to(mask.dtype) * mask


def token_advantages(adv: Tensor, mask: Tensor, broadcast: bool) -> Tensor:
    """(B,) advantages onto (B, T): every response token, or only the last one (oxRL broadcast=False)."""
    return adv[:, None] * (mask if broadcast else last_token_mask(mask))


def sgrpo_loss(
    inputs: LossInputs,
    *,
    epsilon: float = 0.2,
    epsilon_high: float = 0.2,
    beta: float = 0.0,
    reward_broadcast: bool = True,
    entropy_coef: float = 0.0,
    is_correction: str = "none",
    is_cap: float = 2.0,
) -> LossOutput:
    adv = rollout_advantages(inputs, NAME, scale=True, eps=ADV_EPS)
    token_adv = token_advantages(adv, inputs.mask, reward_broadcast)
    per_token, metrics = token_losses(
        inputs, NAME, adv, epsilon, epsilon_high, beta, entropy_coef, is_correction, is_cap, token_adv
    )
    loss = token_mean(per_token, inputs.mask, inputs)  # over every response token of the rollout batch
    return LossOutput(loss, metrics)


spec = rollouts_spec(
    NAME,
    sgrpo_loss,
    needs_reference=False,
    paper="arXiv:2402.03300 Eq. 3 (token-level form of the reference study, oxRL)",
    version=1,
    description="Reference study's GRPO: group z-scores, clipped token ratio, mean over all batch tokens, no KL.",
)
