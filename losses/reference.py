"""Reference-model updates a spec can ask for (``LossSpec.reference_update``): TR-DPO's soft and hard
updates, as TRL's ``SyncRefModelCallback`` does them (checked in the TRL parity tests). The trainer's
reference model (``oxbench.engine.reference.LiveReference``) applies :func:`mix_reference_`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


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
