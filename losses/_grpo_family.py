r"""The GRPO family (``grpo``, ``dr_grpo``, ``dapo``, ``sgrpo``): one pipeline from the rollouts'
group advantages to each response token's loss. A member chooses its advantages (z-scored or not, its
std epsilon, on every token or the last one) and its reduction; the rest is shared, here.

Per response token, in this order (:func:`token_losses`):

1. the ratio ``r`` the clip acts on, and a detached per-token weight ``w``, from ``is_correction``:
   ``none`` (the default) is the coupled clip, ``r = π_θ/π_old`` against the behaviour policy and no
   weight; ``tis_token`` and ``tis_sequence`` (truncated importance sampling, ``w`` capped at
   ``is_cap``) and ``decoupled`` (AReaL's decoupled PPO, tokens whose ``π_prox/μ`` exceeds ``is_cap``
   masked) correct for stale rollouts (:func:`losses._online.corrected_ratio`); this ``is_cap`` is the
   loss's, not the diagnostics' ``online.diagnostic_is_cap``. Its default, 2.0, is TIS's; for
   ``decoupled`` it is a deliberate choice (AReaL had no cap, later 5.0; the staleness studies set
   ``loss.is_cap: 5.0`` on their decoupled arm), documented in ``corrected_ratio``;
2. the clipped surrogate ``−min(r·A, clip(r, 1−ε, 1+ε_high)·A)`` (``epsilon``, ``epsilon_high``), times
   ``w``;
3. plus ``β·k3`` when ``beta ≠ 0``, Schulman's k3 KL to the reference (then ``ref_token_logps`` is
   required; :func:`losses._online.add_k3_kl`);
4. minus ``entropy_coef·H_t`` (default 0: no term), ``H_t`` the policy's next-token entropy, before the
   aggregation (verl's ``entropy_coeff``; :func:`losses._online.add_entropy_bonus`).

Inputs: ``token_logps``, ``mask``, ``rewards``, ``group_ids`` (``ref_token_logps`` when ``beta > 0``);
``old_token_logps=None`` means on-policy (ratio 1, gradient of ``log π_θ``). Metrics: the online
losses' own (:func:`losses._online.online_metrics`) over the rollouts' advantages.
"""

from __future__ import annotations

import torch

from losses._online import (
    ADV_EPS,
    add_entropy_bonus,
    add_k3_kl,
    apply_weight,
    clipped_surrogate,
    corrected_ratio,
    group_advantages,
    online_metrics,
)
from losses.types import LossInputs

Tensor = torch.Tensor


def rollout_advantages(inputs: LossInputs, name: str, *, scale: bool = True, eps: float = ADV_EPS) -> Tensor:
    """(B,) group advantages ``R − mean_g R`` (``scale``: over ``std_g R + eps``), after checking that
    ``inputs`` holds the family's fields."""
    inputs.require(name, "token_logps", "mask", "rewards", "group_ids")
    return group_advantages(inputs.rewards, inputs.group_ids, scale=scale, eps=eps)


def token_losses(
    inputs: LossInputs,
    name: str,
    adv: Tensor,
    epsilon: float,
    epsilon_high: float,
    beta: float,
    entropy_coef: float,
    is_correction: str,
    is_cap: float,
    token_adv: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """(B, T) loss of every token before the member's reduction (steps 1-4 above), and the metrics.

    ``adv``: the (B,) rollout advantages, reported in the metrics; ``token_adv``: the (B, T) advantage
    of each token's surrogate (default: its rollout's, ``adv[:, None]``). The hyper-parameters are the
    members' own, in this order, so a member passes its variables of the same names positionally."""
    ratio, weight = corrected_ratio(inputs, is_correction, is_cap, name)
    per_token, clipped = clipped_surrogate(
        ratio, adv[:, None] if token_adv is None else token_adv, epsilon, epsilon_high
    )
    per_token = apply_weight(per_token, weight)
    per_token, kl = add_k3_kl(per_token, inputs, beta, name)
    per_token = add_entropy_bonus(per_token, inputs, entropy_coef, name)
    return per_token, online_metrics(inputs, ratio=ratio, clipped=clipped, adv=adv, kl=kl)
