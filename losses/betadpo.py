r"""β-DPO: DPO with a batch-adaptive β and β-guided data filtering (Wu et al., 2024).

Paper: arXiv:2407.08639 (dynamic β and β-guided data filtering); official code
junkangwu/beta-DPO.

With the per-pair gap ``M_i = log π_θ/π_ref(y_w) - log π_θ/π_ref(y_l)`` (detached):

1. Filtering. Each pair is weighted ``p_i ∝ exp(-(M_i - M_0)² / 2σ²)`` and
   ``k = ⌊B(1 - ρ)⌋`` pairs (at least 1) are sampled without replacement; outliers (pairs far
   from the typical gap, often mislabelled or trivial) are dropped with high probability.
2. Batch β. ``β_batch = max(β_0 (1 + α (mean_{i∈kept} M_i - M_0)), 10⁻³)``, detached.
3. Loss. ``L = mean_{i∈kept} -log σ(β_batch M_i)`` (``M_i`` with gradient here).

``α = 0`` and ``ρ = 0`` give DPO exactly.

Inputs: the four summed log-probs (B,). Reduction: mean over the kept pairs.

State (``initial_state``, carried by the trainer across optimiser steps): the moving averages
``M_0`` (``gap_mean``) and ``σ`` (``gap_std``) of the gap, as in the authors' code
(``update_and_sync_tensor_mean``, momentum ``γ = 0.9``, both starting at 0). Each batch first updates
them with its own mean and (unbiased) std, ``M_0 ← γ M_0 + (1-γ) mean_i M_i``, then uses the updated
values for the filter and for ``β``. So ``β`` moves with how this batch's kept gaps compare to the
gaps seen so far, which is the method; version 1 used the current batch's own mean and std instead.

Deviations, and why:

* The authors gather the gaps of every rank before updating the averages; here each micro-batch
  updates them from its own pairs and the trainer averages the updated state over micro-batches and
  ranks at the optimiser step (the same average for the mean's update; for ``σ`` the mean of the
  micro-batches' stds).
* ``σ`` is clamped at ``1e-6`` (it is 0 at the first step if every gap is 0, i.e. policy = reference),
  and the Gaussian weights are floored at ``1e-300`` so the draw without replacement never fails.
* The filter draw uses a generator seeded with ``seed`` and the batch's reference log-probs
  (see ``losses.sampo.seeded_generator``), so the loss is deterministic for given inputs.
* The reference study (oxRL) uses a per-pair, differentiable ``β_i = β(1 + α(M_i - EMA))``
  and no filtering; we follow the paper: one detached ``β`` per batch plus filtering.
* ``α`` defaults to 0.6, from the paper's sweep; the authors' released config sets ``a: 0.0``
  (filtering only).

Metrics: implicit rewards ``β_0·log(π/π_ref)`` over all pairs (detached), ``betadpo/beta``,
``betadpo/kept``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import checked_logratios, pair_output
from losses._families import pairs_spec
from losses.registry import loss_name
from losses.sampo import seeded_generator
from losses.types import LossInputs, LossOutput, Tensor

NAME = loss_name(__name__)

MIN_BETA = 1e-3


INITIAL_STATE = {"gap_mean": 0.0, "gap_std": 0.0}


def update_state(state: dict | None, gap: Tensor, gamma: float) -> dict[str, Tensor]:
    """The moving averages after this batch: ``s ← γ s + (1-γ) batch statistic`` (detached)."""
    state = state or {k: torch.tensor(v) for k, v in INITIAL_STATE.items()}
    gap = gap.detach().double().cpu()
    std = gap.std() if gap.numel() > 1 else torch.zeros((), dtype=gap.dtype)
    return {
        "gap_mean": gamma * state["gap_mean"].double() + (1 - gamma) * gap.mean(),
        "gap_std": gamma * state["gap_std"].double() + (1 - gamma) * std,
    }


def filter_pairs(
    gap: Tensor, state: dict[str, Tensor], *, filter_ratio: float, generator: torch.Generator
) -> Tensor:
    """Indices of the ``⌊B(1-ρ)⌋`` pairs kept, drawn with Gaussian weights around the moving mean gap."""
    gap = gap.detach().double().cpu()
    k = max(1, int(gap.numel() * (1.0 - filter_ratio)))
    sigma = state["gap_std"].double().clamp(min=1e-6)
    weights = torch.exp(-0.5 * ((gap - state["gap_mean"].double()) / sigma) ** 2).clamp(min=1e-300)
    return torch.multinomial(weights, k, replacement=False, generator=generator)


def batch_beta(gap: Tensor, kept: Tensor, state: dict[str, Tensor], *, beta: float, alpha: float) -> Tensor:
    """``max(β (1 + α (mean of kept gaps - moving mean gap)), 10⁻³)``, detached."""
    gap = gap.detach()
    shift = gap[kept].mean() - state["gap_mean"].to(gap.dtype).to(gap.device)
    return (beta * (1.0 + alpha * shift)).clamp(min=MIN_BETA)


def betadpo_loss(
    inputs: LossInputs,
    *,
    beta: float = 0.1,
    alpha: float = 0.6,
    filter_ratio: float = 0.2,
    gamma: float = 0.9,
    seed: int = 0,
) -> LossOutput:
    chosen, rejected = checked_logratios(inputs, NAME)
    gap = chosen - rejected
    state = update_state(inputs.state, gap, gamma)
    gen = seeded_generator(seed, inputs.ref_chosen_logps, inputs.ref_rejected_logps)
    kept = filter_pairs(gap, state, filter_ratio=filter_ratio, generator=gen).to(gap.device)
    beta_used = batch_beta(gap, kept, state, beta=beta, alpha=alpha)
    losses = -F.logsigmoid(beta_used * gap[kept])
    extra = {"betadpo/beta": beta_used, "betadpo/kept": float(kept.numel()), **_prefixed(state)}
    new_state = {k: v.float() for k, v in state.items()}
    return pair_output(losses, beta * chosen, beta * rejected, extra, state=new_state)


def _prefixed(state: dict[str, Tensor]) -> dict[str, Tensor]:
    return {f"betadpo/{k}": v for k, v in state.items()}


spec = pairs_spec(
    NAME,
    betadpo_loss,
    initial_state=INITIAL_STATE,
    paper="arXiv:2407.08639 (batch-level dynamic beta + filtering, moving averages as the authors' code)",
    version=2,
    description="beta-DPO: per-batch beta adapted to the reward gap, with Gaussian filtering of outlier pairs.",
)
