r"""PPO with a learned value function and GAE (Schulman et al., 2017; 2016), for RLHF.

Papers: arXiv:1707.06347 Eq. 7 (clipped surrogate) and Eq. 9 (policy + value objective);
arXiv:1506.02438 Eq. 16 (GAE).

.. math::

    r_t = R\,[t = \text{last response token}] - \beta\big(\log\pi_{old}(y_t) - \log\pi_{ref}(y_t)\big)

    \delta_t = r_t + \gamma V_{old}(s_{t+1}) - V_{old}(s_t), \qquad
    \hat A_t = \sum_{l \ge 0} (\gamma\lambda)^l \delta_{t+l}, \qquad \hat R_t = \hat A_t + V_{old}(s_t)

    \mathcal{L} = -\frac{1}{\sum m}\sum_t m_t \min\big(\rho_t \tilde A_t,
        \mathrm{clip}(\rho_t, 1-\varepsilon, 1+\varepsilon_{high})\tilde A_t\big)
      + c_{vf}\cdot\frac{1}{2}\,\frac{1}{\sum m}\sum_t m_t
        \max\big((V_t - \hat R_t)^2,\ (V_{old,t} + \mathrm{clip}(V_t - V_{old,t}, \pm c_v) - \hat R_t)^2\big)

The scalar reward sits on the last response token; the episode ends there
(``V(s_{T+1}) = 0``; a truncated response is treated as terminal too). ``values`` (B, T)
come from the value head being trained (with gradient), ``old_values`` from the rollout
(``None``: ``values.detach()``); GAE uses ``old_values``. ``Ã`` is ``Â`` whitened over the
batch's response tokens (``whiten_advantages``: mean/unbiased variance, eps 1e-8, as TRL's
PPO and oxRL). The clipped value loss is the OpenAI-baselines form (not in the paper) as
oxRL and TRL use it. Masked positions inside a response are skipped by GAE (the next
valid token's value is used).

Defaults: ``ε = ε_high = 0.2`` (paper), ``γ = 1``, ``λ = 0.95`` (paper's λ; γ = 1 for
episodic text), ``vf_coef = 0.1`` and ``cliprange_value = 0.2`` (Ziegler et al. 2019 / TRL's
PPO for LMs; the paper's Atari c1 = 1 is for separate nets of small scale), ``beta = 0``:
the PPO paper has no reference KL (RLHF practice adds one: set ``beta``, and then the
trainer must load a reference since ``needs_reference`` is False).
"""

from __future__ import annotations

import torch

from losses._common import masked_mean
from losses._families import rollouts_spec
from losses._online import behaviour_logps, clipped_surrogate, online_metrics, token_mean, token_ratio
from losses.registry import loss_name
from losses.sgrpo import last_token_mask
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)

Tensor = torch.Tensor


def token_rewards(inputs: LossInputs, beta: float) -> tuple[Tensor, Tensor | None]:
    """(B, T) per-token reward: outcome on the last token minus ``β·k1`` KL (None if β = 0)."""
    mask = inputs.mask
    rewards = inputs.rewards[:, None].to(inputs.token_logps.dtype) * last_token_mask(mask)
    if beta == 0.0:
        return rewards, None
    inputs.require(NAME, "ref_token_logps")
    kl = (behaviour_logps(inputs) - inputs.ref_token_logps).detach() * mask
    return rewards - beta * kl, kl


def gae(rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Advantages ``Â_t = δ_t + γλ Â_{t+1}`` and returns ``Â + V`` (both (B, T), 0 off the mask)."""
    values = values.detach() * mask
    adv = torch.zeros_like(values)
    next_value = values.new_zeros(values.size(0))
    next_adv = values.new_zeros(values.size(0))
    for t in reversed(range(values.size(1))):
        valid = mask[:, t] > 0
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        step = delta + gamma * lam * next_adv
        adv[:, t] = torch.where(valid, step, torch.zeros_like(step))
        next_value = torch.where(valid, values[:, t], next_value)
        next_adv = torch.where(valid, step, next_adv)
    return adv, (adv + values) * mask


def whiten_stats(x: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Mean and unbiased variance of ``x`` over the masked tokens."""
    n = mask.sum().clamp(min=2.0)
    mean = masked_mean(x, mask, dim=None)
    var = ((x - mean) ** 2 * mask).sum() / (n - 1)
    return {"adv_mean": mean.detach(), "adv_var": var.detach()}


def whiten(x: Tensor, mask: Tensor, stats: dict | None = None, eps: float = 1e-8) -> Tensor:
    """``(x − mean)/sqrt(var + eps)`` over the masked tokens (unbiased variance; ``stats``: the whole
    rollout batch's, when it is split into micro-batches)."""
    stats = stats or whiten_stats(x, mask)
    return (x - stats["adv_mean"]) * torch.rsqrt(stats["adv_var"] + eps) * mask


def ppo_batch_stats(batch: LossInputs, *, beta: float, gamma: float, lam: float, **_) -> dict[str, Tensor]:
    """Whitening mean/variance of the GAE advantages over every response token of the rollout batch."""
    rewards, _ = token_rewards(batch, beta)
    adv, _ = gae(rewards, batch.old_values, batch.mask, gamma=gamma, lam=lam)
    return whiten_stats(adv, batch.mask)


def value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip: float, inputs: LossInputs
) -> tuple[Tensor, Tensor]:
    """``½·mean max((V−R̂)², (V_clip−R̂)²)`` and the share of tokens where the clipped branch wins."""
    clipped_values = old_values + (values - old_values).clamp(-clip, clip)
    plain, clipped = (values - returns) ** 2, (clipped_values - returns) ** 2
    loss = 0.5 * token_mean(torch.max(plain, clipped), mask, inputs)
    return loss, masked_mean((clipped > plain).float(), mask, dim=None)


def ppo_loss(
    inputs: LossInputs,
    *,
    epsilon: float = 0.2,
    epsilon_high: float = 0.2,
    beta: float = 0.0,
    gamma: float = 1.0,
    lam: float = 0.95,
    vf_coef: float = 0.1,
    cliprange_value: float = 0.2,
    whiten_advantages: bool = True,
) -> LossOutput:
    inputs.require(NAME, "token_logps", "mask", "rewards", "values")
    mask = inputs.mask
    old_values = inputs.values.detach() if inputs.old_values is None else inputs.old_values
    rewards, kl = token_rewards(inputs, beta)
    adv, returns = gae(rewards, old_values, mask, gamma=gamma, lam=lam)
    used_adv = whiten(adv, mask, inputs.batch_stats) if whiten_advantages else adv
    ratio = token_ratio(inputs)
    per_token, clipped = clipped_surrogate(ratio, used_adv, epsilon, epsilon_high)
    pg_loss = token_mean(per_token, mask, inputs)
    vf_loss, vf_clip_frac = value_loss(inputs.values, old_values, returns, mask, cliprange_value, inputs)
    metrics = online_metrics(inputs, ratio=ratio, clipped=clipped, adv=adv, kl=kl)
    metrics.update(
        pg_loss=pg_loss.detach(),
        vf_loss=vf_loss.detach(),
        vf_clip_frac=vf_clip_frac,
        value_mean=masked_mean(inputs.values.detach(), mask, dim=None),
        returns_mean=masked_mean(returns, mask, dim=None),
    )
    return LossOutput(pg_loss + vf_coef * vf_loss, metrics)


spec = rollouts_spec(
    NAME,
    ppo_loss,
    needs_reference=False,
    needs_value_model=True,
    batch_stats=ppo_batch_stats,
    paper="arXiv:1707.06347 Eq. 7, 9; arXiv:1506.02438 Eq. 16",
    version=1,
    description="PPO: clipped token surrogate with GAE advantages from a value head, plus a clipped value loss.",
)
