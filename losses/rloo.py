r"""RLOO: REINFORCE Leave-One-Out (Ahmadian et al., 2024, "Back to Basics").

Paper: arXiv:2402.14740, §3.2 (the RLOO estimator).

.. math::

    \hat A_i = R_i - \frac{1}{k-1}\sum_{j \ne i} R_j, \qquad
    R_i = r(x, y_i) - \beta \sum_t \big(\log\pi_{old}(y_{i,t}) - \log\pi_{ref}(y_{i,t})\big)

    \mathcal{L} = -\frac{1}{B}\sum_i \min\big(\rho_i \hat A_i,\ \mathrm{clip}(\rho_i, 1-\varepsilon, 1+\varepsilon_{high})\hat A_i\big),
    \qquad \rho_i = \frac{\pi_\theta(y_i|x)}{\pi_{old}(y_i|x)}

Each of the ``k`` rollouts of a prompt (``group_ids``) is baselined by the mean reward of
the *other* ``k−1``; the whole response is one action. The KL penalty is in the reward, a
sequence-level k1 estimate on the sampling policy (detached), as the paper and TRL do.
On-policy (``old_token_logps=None``) ``ρ = 1`` and the gradient is the paper's
``−1/B Σ Â_i ∇log π_θ(y_i|x)``; the sequence-level clip is TRL 1.16's addition for reused
rollouts (``epsilon = epsilon_high = 0.2``, TRL's defaults). ``beta = 0.05`` (TRL's default;
the paper tunes it per task). ``normalize_advantages`` (TRL's name, default False) z-scores
the advantages over the batch (std + 1e-4). A group of one rollout, or whose rewards are
all equal, gets advantage exactly 0 (TRL: 0, or a ~1e-8 rounding residue).
"""

from __future__ import annotations

import torch

from losses._common import group_stats, masked_mean, masked_sum
from losses._families import rollouts_spec
from losses._online import behaviour_logps, clipped_surrogate, flat_groups, online_metrics
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def leave_one_out_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``R_i − mean_{j≠i, same group} R_j``; 0 for a rollout alone in its group or in a flat group."""
    mean, _, count = group_stats(rewards, group_ids)
    others = (mean * count - rewards) / (count - 1).clamp(min=1.0)
    no_signal = (count < 2) | flat_groups(rewards, group_ids)
    return torch.where(no_signal, torch.zeros_like(rewards), rewards - others)


def kl_penalised_rewards(inputs: LossInputs, beta: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``r − β Σ_t (log π_old − log π_ref)`` and the per-token k1 KL (None when β = 0)."""
    if beta == 0.0:
        return inputs.rewards, None
    inputs.require(NAME, "ref_token_logps")
    kl = (behaviour_logps(inputs) - inputs.ref_token_logps).detach() * inputs.mask
    return inputs.rewards - beta * kl.sum(-1), kl


def normalise(adv: torch.Tensor, stats: dict | None = None) -> torch.Tensor:
    """``(A − mean) / (std + 1e-4)`` over the batch's rollouts (unbiased std; ``stats``: the whole
    rollout batch's, when it is split into micro-batches)."""
    stats = stats or {"adv_mean": adv.mean(), "adv_std": adv.std()}
    return (adv - stats["adv_mean"]) / (stats["adv_std"] + 1e-4)


def rloo_batch_stats(
    batch: LossInputs, *, beta: float, normalize_advantages: bool, **_
) -> dict[str, torch.Tensor]:
    """Whole-batch mean/std of the leave-one-out advantages (only used with ``normalize_advantages``)."""
    if not normalize_advantages:
        return {}
    rewards, _ = kl_penalised_rewards(batch, beta)
    adv = leave_one_out_advantages(rewards, batch.group_ids)
    return {"adv_mean": adv.mean(), "adv_std": adv.std()}


def rloo_loss(
    inputs: LossInputs,
    *,
    beta: float = 0.05,
    epsilon: float = 0.2,
    epsilon_high: float = 0.2,
    normalize_advantages: bool = False,
) -> LossOutput:
    inputs.require(NAME, "token_logps", "mask", "rewards", "group_ids")
    rewards, kl = kl_penalised_rewards(inputs, beta)
    adv = leave_one_out_advantages(rewards, inputs.group_ids)
    if normalize_advantages:
        adv = normalise(adv, inputs.batch_stats)
    log_ratio = masked_sum(inputs.token_logps - behaviour_logps(inputs), inputs.mask)
    ratio = torch.exp(log_ratio)
    per_seq, clipped = clipped_surrogate(ratio, adv, epsilon, epsilon_high)
    metrics = online_metrics(inputs, ratio=ratio, clipped=clipped, adv=adv)
    if kl is not None:
        metrics["kl"] = masked_mean(kl, inputs.mask, dim=None)
    return LossOutput(per_seq.mean(), metrics)


spec = rollouts_spec(
    NAME,
    rloo_loss,
    needs_reference=True,
    batch_stats=rloo_batch_stats,
    paper="arXiv:2402.14740 §3.2 (RLOO estimator)",
    version=1,
    description="RLOO: whole-response REINFORCE with a leave-one-out baseline and KL-penalised reward.",
)
