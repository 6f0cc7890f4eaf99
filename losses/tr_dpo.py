r"""TR-DPO: DPO with a trust-region (periodically updated) reference (Gorbatovski et al., 2024).

Paper: arXiv:2404.09656; TRL ``sync_ref_model=True`` with ``ref_model_mixup_alpha`` (α) and
``ref_model_sync_steps`` (τ).

The loss is DPO's (arXiv:2305.18290 Eq. 7) against the current reference. What changes is the
reference: every τ optimiser steps the trainer moves it towards the policy,

.. math::

    \theta_{ref} \leftarrow \alpha\,\theta + (1 - \alpha)\,\theta_{ref}

(α = 1 is the paper's "hard" update, α < 1 the "soft" one), so the policy is constrained to a
region around a recent copy of itself rather than the initial model.

``ref_model_mixup_alpha`` and ``ref_model_sync_steps`` are read by the trainer
(``updates_reference=True``); the loss accepts and ignores them. The update itself is given
here as :func:`mix_reference_` and :func:`should_sync_reference`, which reproduce TRL's
``SyncRefModelCallback`` (checked in the TRL parity tests). Defaults α = 0.6, τ = 512 are
TRL's, inside the paper's ranges.

Inputs and metrics: as DPO. Reduction: mean over pairs.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from losses.dpo import dpo_loss
from losses.registry import LossSpec
from losses.types import LossInputs, LossOutput


def should_sync_reference(step: int, ref_model_sync_steps: int) -> bool:
    """True after optimiser step ``step`` (counted from 1) when the reference is due an update."""
    return step > 0 and step % ref_model_sync_steps == 0


@torch.no_grad()
def mix_reference_(
    policy_params: Iterable[torch.Tensor], ref_params: Iterable[torch.Tensor], ref_model_mixup_alpha: float
) -> None:
    """In place: ``ref ← α·policy + (1-α)·ref`` for each parameter pair."""
    for ref, pol in zip(ref_params, policy_params, strict=True):
        ref.mul_(1.0 - ref_model_mixup_alpha).add_(pol, alpha=ref_model_mixup_alpha)


def tr_dpo_loss(
    inputs: LossInputs,
    *,
    beta: float = 0.1,
    ref_model_mixup_alpha: float = 0.6,
    ref_model_sync_steps: int = 512,
) -> LossOutput:
    """DPO against the current reference; the two reference knobs are read by the trainer."""
    inputs.require("tr_dpo", "chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps")
    return dpo_loss(inputs, beta=beta)


spec = LossSpec(
    name="tr_dpo",
    fn=tr_dpo_loss,
    paradigm="offline",
    data="pairs",
    needs_reference=True,
    updates_reference=True,
    defaults={"beta": 0.1, "ref_model_mixup_alpha": 0.6, "ref_model_sync_steps": 512},
    paper="arXiv:2404.09656 (soft/hard reference update) + arXiv:2305.18290 Eq. 7",
    version=1,
    description="TR-DPO: DPO whose reference is pulled towards the policy every ref_model_sync_steps steps.",
)
