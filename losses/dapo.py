r"""DAPO: Decoupled Clip and Dynamic sAmpling Policy Optimization (Yu et al., 2025).

Paper: arXiv:2503.14476, the DAPO objective (§3, Eq. 8).

.. math::

    \mathcal{L} = -\frac{1}{\sum_{i \in K}|o_i|} \sum_{i \in K} \sum_{t=1}^{|o_i|}
        \min\big(r_{i,t}\hat A_i,\ \mathrm{clip}(r_{i,t}, 1-\varepsilon_{low}, 1+\varepsilon_{high})\hat A_i\big)

* Clip-Higher: ``ε_low = 0.2`` (``epsilon``), ``ε_high = 0.28`` (``epsilon_high``).
* Token-level policy-gradient loss: one mean over every kept token of the batch, so long
  responses weigh by their length (TRL ``loss_type="dapo"``).
* Dynamic sampling: a group whose rewards are all equal has ``Â = 0`` and no signal. The paper
  over-samples until the batch holds only informative groups; a loss cannot re-sample, so it
  drops those groups (``K`` = kept rollouts) from the token normaliser, which is what the loss
  would be on the filtered batch. ``groups_kept_frac`` reports the share kept. If none is kept
  the loss is 0 with zero gradient.
* ``Â_i = (R_i − mean_g R)/(std_g R + 1e-4)`` (unbiased std, TRL's eps); no KL (β = 0; with
  ``beta > 0`` a k3 KL is added per token as TRL does, and the trainer must load a reference).

Overlong reward shaping (the paper's fourth technique) acts on the reward, not on this loss.
Deviation from TRL: TRL normalises by all tokens of the generation batch, flat groups
included; we normalise by the tokens of kept groups (equal when every group has signal).

The per-token pipeline (the ratio and its ``is_correction``/``is_cap``, the clip, ``beta``'s k3 KL,
``entropy_coef``) is the GRPO family's: :mod:`losses._grpo_family`.
"""

from __future__ import annotations

import torch

from losses._families import rollouts_spec
from losses._grpo_family import rollout_advantages, token_losses
from losses._online import flat_groups, token_mean
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def groups_kept_frac(flat: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Fraction of distinct groups that carry signal (not all rewards equal)."""
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    flat_per_group = torch.zeros(uniq.numel(), dtype=torch.bool, device=flat.device).scatter(0, inv, flat)
    return (~flat_per_group).float().mean()


def kept_tokens(inputs: LossInputs) -> torch.Tensor:
    """(B, T) response mask of the rollouts whose group carries signal."""
    flat = flat_groups(inputs.rewards, inputs.group_ids)
    return inputs.mask * (~flat).to(inputs.mask.dtype)[:, None]


def dapo_batch_stats(batch: LossInputs, **_) -> dict[str, torch.Tensor]:
    """The token-level mean's denominator over the whole rollout batch: the kept groups' tokens."""
    return {"kept_tokens": kept_tokens(batch).sum()}


def dapo_loss(
    inputs: LossInputs,
    *,
    epsilon: float = 0.2,
    epsilon_high: float = 0.28,
    beta: float = 0.0,
    entropy_coef: float = 0.0,
    is_correction: str = "none",
    is_cap: float = 2.0,
) -> LossOutput:
    adv = rollout_advantages(inputs, NAME, scale=True)
    per_token, metrics = token_losses(
        inputs, NAME, adv, epsilon, epsilon_high, beta, entropy_coef, is_correction, is_cap
    )
    loss = token_mean(per_token, kept_tokens(inputs), inputs, total="kept_tokens")
    flat = flat_groups(inputs.rewards, inputs.group_ids)
    metrics["groups_kept_frac"] = groups_kept_frac(flat, inputs.group_ids)
    return LossOutput(loss, metrics)


spec = rollouts_spec(
    NAME,
    dapo_loss,
    needs_reference=False,
    batch_stats=dapo_batch_stats,
    paper="arXiv:2503.14476 Eq. 8",
    version=1,
    description="DAPO: clip-higher, token-level loss over the batch, groups without reward variance dropped.",
)
