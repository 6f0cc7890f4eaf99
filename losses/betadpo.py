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

Deviations, and why:

* ``M_0`` and ``σ`` are the current batch's mean and (unbiased) std of ``M_i``: the paper and
  its code keep exponential moving averages across batches, which is state, and a loss here is
  a pure function. This is the ``γ → 0`` limit of the paper's average, so ``β`` moves only with
  the filtered subset's mean, not with how the batch compares to earlier batches.
  ``σ`` is clamped at ``1e-6`` (and is 1 for a single pair).
* The filter draw uses a generator seeded with ``seed`` and the batch's reference log-probs
  (see ``losses.sampo.seeded_generator``), so the loss is deterministic for given inputs.
* The reference study (oxRL) uses a per-pair, differentiable ``β_i = β(1 + α(M_i - EMA))``
  and no filtering; we follow the paper: one detached ``β`` per batch plus filtering.

Metrics: implicit rewards ``β_0·log(π/π_ref)`` over all pairs (detached), ``betadpo/beta``,
``betadpo/kept``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from losses._common import pair_logratios, reward_metrics
from losses.registry import LossSpec
from losses.sampo import seeded_generator
from losses.types import LossInputs, LossOutput, Tensor

MIN_BETA = 1e-3


def filter_pairs(gap: Tensor, *, filter_ratio: float, generator: torch.Generator) -> Tensor:
    """Indices of the ``⌊B(1-ρ)⌋`` pairs kept, drawn with Gaussian weights around the batch mean gap."""
    gap = gap.detach().double().cpu()
    k = max(1, int(gap.numel() * (1.0 - filter_ratio)))
    sigma = gap.std().clamp(min=1e-6) if gap.numel() > 1 else torch.ones((), dtype=gap.dtype)
    weights = torch.exp(-0.5 * ((gap - gap.mean()) / sigma) ** 2)
    return torch.multinomial(weights, k, replacement=False, generator=generator)


def batch_beta(gap: Tensor, kept: Tensor, *, beta: float, alpha: float) -> Tensor:
    """``max(β (1 + α (mean of kept gaps - batch mean gap)), 10⁻³)``, detached."""
    gap = gap.detach()
    return (beta * (1.0 + alpha * (gap[kept].mean() - gap.mean()))).clamp(min=MIN_BETA)


def betadpo_loss(
    inputs: LossInputs, *, beta: float = 0.1, alpha: float = 0.6, filter_ratio: float = 0.2, seed: int = 0
) -> LossOutput:
    inputs.require("betadpo", "chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps")
    chosen, rejected = pair_logratios(inputs)
    gap = chosen - rejected
    gen = seeded_generator(seed, inputs.ref_chosen_logps, inputs.ref_rejected_logps)
    kept = filter_pairs(gap, filter_ratio=filter_ratio, generator=gen).to(gap.device)
    beta_used = batch_beta(gap, kept, beta=beta, alpha=alpha)
    losses = -F.logsigmoid(beta_used * gap[kept])
    metrics = reward_metrics(beta * chosen, beta * rejected)
    metrics.update({"betadpo/beta": beta_used, "betadpo/kept": float(kept.numel())})
    return LossOutput(losses.mean(), metrics)


spec = LossSpec(
    name="betadpo",
    fn=betadpo_loss,
    paradigm="offline",
    data="pairs",
    needs_reference=True,
    defaults={"beta": 0.1, "alpha": 0.6, "filter_ratio": 0.2, "seed": 0},
    paper="arXiv:2407.08639 (batch-level dynamic beta + filtering)",
    version=1,
    description="beta-DPO: per-batch beta adapted to the reward gap, with Gaussian filtering of outlier pairs.",
)
