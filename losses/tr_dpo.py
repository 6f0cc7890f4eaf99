r"""TR-DPO: DPO with a trust-region (periodically updated) reference (Gorbatovski et al., 2024).

Paper: arXiv:2404.09656; TRL ``sync_ref_model=True`` with ``ref_model_mixup_alpha`` (α) and
``ref_model_sync_steps`` (τ).

The loss is DPO's (arXiv:2305.18290 Eq. 7) against the current reference. What changes is the
reference: every τ optimiser steps the trainer moves it towards the policy,

.. math::

    \theta_{ref} \leftarrow \alpha\,\theta + (1 - \alpha)\,\theta_{ref}

(α = 1 is the paper's "hard" update, α < 1 the "soft" one), so the policy is constrained to a
region around a recent copy of itself rather than the initial model.

``ref_model_mixup_alpha`` and ``ref_model_sync_steps`` reach the trainer through the spec's
``reference_update`` hook (:func:`tr_dpo_reference_update`); the loss accepts and ignores them.
The update is :func:`losses.reference.should_sync_reference` and
:func:`losses.reference.mix_reference_`, which reproduce TRL's ``SyncRefModelCallback`` (checked in
the TRL parity tests) and which the trainer's reference model applies. Defaults α = 0.6, τ = 512 are
TRL's, inside the paper's ranges.

Inputs and metrics: as DPO. Reduction: mean over pairs.
"""

from __future__ import annotations

from losses._common import PAIR_FIELDS
from losses._families import pairs_spec
from losses.dpo import dpo_loss
from losses.reference import mix_reference_, should_sync_reference
from losses.registry import loss_name
from losses.types import LossInputs, LossOutput

NAME = loss_name(__name__)


def tr_dpo_reference_update(
    step: int, *, ref_model_sync_steps: int, ref_model_mixup_alpha: float, **_
) -> float | None:
    """The trainer's hook (``LossSpec.reference_update``): α after every ``ref_model_sync_steps`` steps."""
    return ref_model_mixup_alpha if should_sync_reference(step, ref_model_sync_steps) else None


def tr_dpo_loss(
    inputs: LossInputs,
    *,
    beta: float = 0.1,
    ref_model_mixup_alpha: float = 0.6,
    ref_model_sync_steps: int = 512,
) -> LossOutput:
    """DPO against the current reference; the two reference knobs are read by the trainer."""
    inputs.require(NAME, *PAIR_FIELDS)
    return dpo_loss(inputs, beta=beta)


spec = pairs_spec(
    NAME,
    tr_dpo_loss,
    updates_reference=True,
    reference_update=tr_dpo_reference_update,
    paper="arXiv:2404.09656 (soft/hard reference update) + arXiv:2305.18290 Eq. 7",
    version=1,
    description="TR-DPO: DPO whose reference is pulled towards the policy every ref_model_sync_steps steps.",
)

__all__ = ["mix_reference_", "should_sync_reference", "spec", "tr_dpo_loss", "tr_dpo_reference_update"]
