r"""REINFORCE++: critic-free policy optimisation with global advantage normalisation (Hu, 2025).

Paper: arXiv:2501.03262 (REINFORCE++, §2: token-level KL reward, global normalisation, PPO clip).

.. math::

    A_{i,t} = r(x, y_i) - \beta \sum_{s=t}^{|y_i|} \mathrm{KL}_{i,s}, \qquad
    \mathrm{KL}_{i,s} = \log\frac{\pi_{old}(y_{i,s})}{\pi_{ref}(y_{i,s})}

    A^{norm}_{i,t} = \frac{A_{i,t} - \mathrm{mean}_{batch}(A)}{\mathrm{std}_{batch}(A) + 10^{-8}}, \qquad
    \mathcal{L} = -\frac{1}{\sum m}\sum_{i,t} m_{i,t}
        \min\big(r_{i,t}A^{norm}_{i,t},\ \mathrm{clip}(r_{i,t}, 1-\varepsilon, 1+\varepsilon_{high})A^{norm}_{i,t}\big)

The KL is the paper's choice: a k1 penalty folded into the per-token reward (not a k3 loss
term as in GRPO), computed on the sampling policy and detached. With γ = 1 the return from
token ``t`` is the outcome reward minus the KL still to come. No critic and no per-prompt
baseline: the baseline is the mean over every response token of the global batch, and the
std the batch's (population std, eps 1e-8). Token-level mean of the clipped surrogate.
``group_ids`` are not used (the paper's "REINFORCE++ w/ baseline" variant, which first
subtracts the group mean, is not implemented here).

Defaults: ``ε = ε_high = 0.2``; ``β = 0.01`` (``init_kl_coef`` of OpenRLHF, the paper's
implementation).
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


def suffix_sum(x: torch.Tensor) -> torch.Tensor:
    """``out[:, t] = Σ_{s ≥ t} x[:, s]`` (the undiscounted return)."""
    return x.flip(-1).cumsum(-1).flip(-1)


def kl_shaped_returns(inputs: LossInputs, beta: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, T) ``r − β Σ_{s≥t} KL_s`` on response tokens, and the per-token k1 KL (None if β = 0)."""
    mask = inputs.mask
    outcome = inputs.rewards[:, None].to(inputs.token_logps.dtype) * last_token_mask(mask)
    if beta == 0.0:
        return suffix_sum(outcome) * mask, None
    inputs.require(NAME, "ref_token_logps")
    kl = (behaviour_logps(inputs) - inputs.ref_token_logps).detach() * mask
    return suffix_sum(outcome - beta * kl) * mask, kl


def normalise_stats(adv: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Mean and population std of the advantages over every response token of the batch."""
    mean = masked_mean(adv, mask, dim=None)
    std = masked_mean((adv - mean) ** 2, mask, dim=None).sqrt()
    return {"adv_mean": mean.detach(), "adv_std": std.detach()}


def global_normalise(adv: torch.Tensor, mask: torch.Tensor, stats=None, eps: float = 1e-8) -> torch.Tensor:
    """z-score over every response token of the batch (``stats``: the whole batch's, when split)."""
    stats = stats or normalise_stats(adv, mask)
    return (adv - stats["adv_mean"]) / (stats["adv_std"] + eps) * mask


def reinforce_pp_batch_stats(batch: LossInputs, *, beta: float, **_) -> dict[str, torch.Tensor]:
    """The global normalisation's mean/std over the whole rollout batch (every micro-batch and rank)."""
    returns, _ = kl_shaped_returns(batch, beta)
    return normalise_stats(returns, batch.mask)


def reinforce_pp_loss(
    inputs: LossInputs, *, beta: float = 0.01, epsilon: float = 0.2, epsilon_high: float = 0.2
) -> LossOutput:
    inputs.require(NAME, "token_logps", "mask", "rewards")
    returns, kl = kl_shaped_returns(inputs, beta)
    adv = global_normalise(returns, inputs.mask, inputs.batch_stats)
    ratio = token_ratio(inputs)
    per_token, clipped = clipped_surrogate(ratio, adv, epsilon, epsilon_high)
    loss = token_mean(per_token, inputs.mask, inputs)
    return LossOutput(loss, online_metrics(inputs, ratio=ratio, clipped=clipped, adv=returns, kl=kl))


spec = rollouts_spec(
    NAME,
    reinforce_pp_loss,
    needs_reference=True,
    batch_stats=reinforce_pp_batch_stats,
    paper="arXiv:2501.03262 §2 (REINFORCE++)",
    version=1,
    description="REINFORCE++: k1 KL in the token reward, advantages normalised over the global batch, PPO clip.",
)
