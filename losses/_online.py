"""Helpers shared by the online losses: group advantages, importance ratios, clipping, the k3 KL
and the metrics every online loss reports (``clip_frac``, ``ratio_mean``, advantages, staleness).

Pure functions, no state. Conventions (TRL's ``GRPOTrainer`` unless stated): the group z-score
divides by the unbiased std plus ``ADV_EPS`` = 1e-4, and a group whose rewards are all equal gets
advantage exactly 0; ``old_token_logps=None`` means on-policy (ratio 1 with the gradient of
``log π_θ``); the k3 KL is Schulman's ``exp(ref − logp) − (ref − logp) − 1``.
"""

from __future__ import annotations

import torch

from losses._common import group_stats, masked_mean
from losses.types import LossInputs

Tensor = torch.Tensor
ADV_EPS = 1e-4  # std epsilon of the group z-score (TRL GRPOTrainer)


# --- advantages --------------------------------------------------------------------------


def flat_groups(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """(B,) bool: True where every rollout of that rollout's group has the same reward."""
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    hi = rewards.new_full((uniq.numel(),), float("-inf")).scatter_reduce(0, inv, rewards, "amax")
    lo = rewards.new_full((uniq.numel(),), float("inf")).scatter_reduce(0, inv, rewards, "amin")
    return (hi == lo)[inv]


def group_advantages(rewards: Tensor, group_ids: Tensor, *, scale: bool, eps: float = ADV_EPS) -> Tensor:
    """``A = R − mean_g R`` (``scale``: divided by ``std_g R + eps``, unbiased std). Flat groups → 0."""
    mean, std, _ = group_stats(rewards, group_ids)
    adv = rewards - mean
    if scale:
        adv = adv / (std + eps)
    return torch.where(flat_groups(rewards, group_ids), torch.zeros_like(adv), adv)


# --- whole-batch reductions ---------------------------------------------------------------
# A rollout batch split into micro-batches (accumulation, ranks) must give the loss of the whole
# batch. DeepSpeed averages the micro-batch losses, so a loss that divides by a count taken over the
# batch divides each micro-batch's sum by (batch count / micro_batches). The trainer fills
# ``inputs.batch_stats`` / ``inputs.micro_batches`` only when the batch is split; otherwise the
# micro-batch is the batch and these fall back to its own counts (the same numbers, bit for bit).


def token_mean(x: Tensor, weight: Tensor, inputs: LossInputs, total: str = "tokens") -> Tensor:
    """``Σ x·weight / Σ weight`` over the whole rollout batch, as this micro-batch's share.

    ``total``: the key of ``inputs.batch_stats`` holding the batch's ``Σ weight`` (``"tokens"``: the
    response mask's). Unsplit batch: ``Σ x·weight / max(Σ weight, 1)`` on this micro-batch.
    """
    if inputs.batch_stats is None:
        return (x * weight).sum() / weight.sum().clamp(min=1.0)
    per_micro = inputs.batch_stats[total].to(x.dtype) / inputs.micro_batches
    return (x * weight).sum() / per_micro.clamp(min=1.0 / inputs.micro_batches)


# --- ratios, clipping, KL ----------------------------------------------------------------


def behaviour_logps(inputs: LossInputs) -> Tensor:
    """Log-probs of the policy that sampled; ``None`` means on-policy: ``token_logps.detach()``."""
    old = inputs.old_token_logps
    return inputs.token_logps.detach() if old is None else old


def token_ratio(inputs: LossInputs) -> Tensor:
    """(B, T) ``exp(log π_θ − log π_old)``; 1 (with gradient) when on-policy and off the mask."""
    return torch.exp((inputs.token_logps - behaviour_logps(inputs)) * inputs.mask)


def sequence_ratio(inputs: LossInputs) -> Tensor:
    """(B,) GSPO ratio ``exp(mean_t log π_θ/π_old)`` (length-normalised)."""
    return torch.exp(masked_mean(inputs.token_logps - behaviour_logps(inputs), inputs.mask))


def clipped_surrogate(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> tuple[Tensor, Tensor]:
    """``−min(r·A, clip(r, 1−ε_low, 1+ε_high)·A)`` and where the clip is active (zero gradient)."""
    loss = -torch.min(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    active = ((ratio < 1 - eps_low) & (adv < 0)) | ((ratio > 1 + eps_high) & (adv > 0))
    return loss, active


CORRECTIONS = ("none", "tis_token", "tis_sequence", "decoupled")


def corrected_ratio(
    inputs: LossInputs, correction: str, cap: float, name: str
) -> tuple[Tensor, Tensor | None]:
    """The ratio the clip acts on and the detached per-token weight of each token's clipped loss, for
    rollouts from a stale behaviour policy μ (``old_token_logps``), with π_prox the learner's weights
    when the batch is consumed (``prox_token_logps``; None: the current weights, detached, which they
    are on a batch's first pass):

    * ``none``: the coupled clip of today, r = π_θ/μ, no weight;
    * ``tis_token``: r = π_θ/π_prox and w_t = min(π_prox/μ, cap) per token: truncated importance
      sampling as in verl (``rollout_is: token``, ``rollout_is_threshold``, first as
      ``tis_imp_ratio_cap``; Yao et al. 2025), which multiplies the clipped per-token loss;
    * ``tis_sequence``: the same with w = min(Π_t π_prox/μ, cap), one weight per sequence on all its
      tokens (verl's ``rollout_is: sequence``, a product of token ratios);
    * ``decoupled``: AReaL's decoupled PPO (arXiv 2505.24298, ``ppo_actor_loss_fn``): r = π_θ/π_prox,
      w_t = π_prox/μ, and tokens whose w_t exceeds ``cap`` get weight 0 (masked, AReaL's
      ``behav_imp_weight_cap``), still counted in the loss's denominator.

    The cap is the loss's ``is_cap`` hyper-parameter (``loss.is_cap`` in a grid), one default for every
    correction: 2.0, TIS's (verl's ``rollout_is_threshold``). For ``decoupled`` that default is a choice
    of ours, not AReaL's: its decoupled loss first had no cap (``behav_imp_weight_cap=None``, nothing
    masked) and later defaulted to 5.0. We keep 2.0 because a new default would change the run ids of
    the committed studies, which must still plan as finished; a run sets the cap it wants. The staleness
    studies (``recipes/staleness.yaml``, ``recipes/staleness_paper.yaml``) set it per arm: ``tis_token``
    at 2.0, ``decoupled`` at 5.0 (AReaL's later default). A cap above every weight (``loss.is_cap: 1e9``;
    the registry takes finite numbers only) masks nothing: AReaL's uncapped loss.
    ``tests/test_corrections.py`` pins both.

    Log-ratios are clamped to ±20 before exponentiating (verl's guard)."""
    if correction not in CORRECTIONS:
        raise ValueError(
            f"loss {name!r}: is_correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}"
        )
    if correction == "none":
        return token_ratio(inputs), None
    mask = inputs.mask
    prox = inputs.prox_token_logps if inputs.prox_token_logps is not None else inputs.token_logps.detach()
    ratio = torch.exp((inputs.token_logps - prox) * mask)
    log_w = ((prox - behaviour_logps(inputs)) * mask).detach()
    if correction == "tis_sequence":
        weight = log_w.sum(-1, keepdim=True).clamp(-20, 20).exp().clamp(max=cap).expand_as(mask)
    else:
        weight = log_w.clamp(-20, 20).exp()
        weight = (
            weight.clamp(max=cap) if correction == "tis_token" else torch.where(weight <= cap, weight, 0.0)
        )
    return ratio, weight * mask


def apply_weight(per_token: Tensor, weight: Tensor | None) -> Tensor:
    return per_token if weight is None else per_token * weight


def k3_kl(logps: Tensor, ref_logps: Tensor, mask: Tensor) -> Tensor:
    """Schulman's k3 estimator ``exp(ref − logp) − (ref − logp) − 1`` (≥ 0; 0 off the mask)."""
    d = (ref_logps - logps) * mask
    return torch.exp(d) - d - 1


def add_k3_kl(per_token: Tensor, inputs: LossInputs, beta: float, name: str) -> tuple[Tensor, Tensor | None]:
    """``per_token + β·k3`` when ``β ≠ 0`` (then ``ref_token_logps`` is required)."""
    if beta == 0.0:
        return per_token, None
    inputs.require(name, "ref_token_logps")
    kl = k3_kl(inputs.token_logps, inputs.ref_token_logps, inputs.mask)
    return per_token + beta * kl, kl


def add_entropy_bonus(per_token: Tensor, inputs: LossInputs, coef: float, name: str) -> Tensor:
    """``per_token − coef·H_t``: verl's entropy regularisation (``entropy_coeff``; ``pg_loss −
    entropy_coeff·entropy`` in ``dp_actor.py``), H_t the policy's full next-token entropy at response
    token t, with gradient (``inputs.token_entropy``, filled by the trainer when the spec's
    :meth:`~losses.registry.LossSpec.uses_entropy`). It is added before aggregation, so it is
    averaged as the loss averages its tokens, as verl aggregates it with the loss's ``loss_agg_mode``.
    ``coef == 0`` returns ``per_token`` itself (the loss is bitwise what it was without the term)."""
    if coef == 0.0:
        return per_token
    inputs.require(name, "token_entropy")
    return per_token - coef * inputs.token_entropy


# --- metrics -----------------------------------------------------------------------------


def _mean(x: Tensor, mask: Tensor) -> Tensor:
    return masked_mean(x, mask, dim=None) if x.shape == mask.shape else x.mean()


def advantage_metrics(adv: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Mean/std (population) of the advantages: over rollouts if (B,), over response tokens if (B, T)."""
    adv = adv.detach()
    mean = _mean(adv, mask)
    var = _mean((adv - mean) ** 2, mask)
    return {"adv_mean": mean, "adv_std": var.sqrt()}


def staleness_metrics(inputs: LossInputs) -> dict[str, Tensor]:
    """``staleness = mean(current_version − policy_versions)`` (and its max), when versions are given."""
    if inputs.policy_versions is None:
        return {}
    if inputs.current_version is None:
        raise ValueError("LossInputs.policy_versions is set but current_version is None")
    lag = (inputs.current_version - inputs.policy_versions).float()
    return {"staleness": lag.mean(), "staleness_max": lag.max()}


def online_metrics(
    inputs: LossInputs, *, ratio: Tensor, clipped: Tensor, adv: Tensor, kl: Tensor | None = None
) -> dict[str, Tensor]:
    """The metrics every online loss reports. ``ratio``/``clipped`` are (B, T) or (B,)."""
    mask = inputs.mask
    metrics = {
        "clip_frac": _mean(clipped.float(), mask),
        "ratio_mean": _mean(ratio.detach(), mask),
        "reward_mean": inputs.rewards.detach().float().mean(),
        **advantage_metrics(adv, mask),
        **staleness_metrics(inputs),
    }
    if kl is not None:
        metrics["kl"] = masked_mean(kl.detach(), mask, dim=None)
    return {k: v.detach() for k, v in metrics.items()}
