"""The two data types of the loss contract: what a loss receives and what it returns.

One :class:`LossInputs` carries every field any algorithm may need; the trainer fills the
fields that the loss's :class:`~losses.registry.LossSpec` asks for (``data``,
``needs_reference``, ``needs_value_model``, ``needs_full_logits``) and leaves the rest
``None``. Shapes: ``B`` is the batch (pairs, examples or rollouts), ``T`` the padded
response length, ``V`` the vocabulary. Token log-probs are zero where the mask is zero;
masks are 1 on response tokens (never on the prompt or padding).

Sequence log-probs are sums over response tokens (``(token_logps * mask).sum(-1)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from losses.registry import MissingInputs

Tensor = torch.Tensor


@dataclass
class LossInputs:
    # --- pairwise preference data (data="pairs") ---------------------------------------
    chosen_logps: Tensor | None = None  # (B,) summed policy log-probs of the chosen response
    rejected_logps: Tensor | None = None  # (B,)
    chosen_token_logps: Tensor | None = None  # (B, T), zero where masked
    rejected_token_logps: Tensor | None = None  # (B, T)
    chosen_mask: Tensor | None = None  # (B, T) float, 1 on response tokens
    rejected_mask: Tensor | None = None  # (B, T)
    ref_chosen_logps: Tensor | None = None  # (B,) reference model; None if reference-free
    ref_rejected_logps: Tensor | None = None  # (B,)
    ref_chosen_token_logps: Tensor | None = None  # (B, T)
    ref_rejected_token_logps: Tensor | None = None  # (B, T)
    # only for specs with needs_full_logits=True (e.g. token-level KL methods)
    chosen_logits: Tensor | None = None  # (B, T, V) policy logits at response positions
    rejected_logits: Tensor | None = None  # (B, T, V)
    ref_chosen_logits: Tensor | None = None  # (B, T, V)
    ref_rejected_logits: Tensor | None = None  # (B, T, V)
    # optional scalar scores of the two responses (grader rewards), for margin-aware losses
    chosen_rewards: Tensor | None = None  # (B,)
    rejected_rewards: Tensor | None = None  # (B,)

    # --- unpaired data (data="unpaired", KTO) and SFT data (data="sft") -----------------
    logps: Tensor | None = None  # (B,) summed policy log-probs of the completion
    token_logps: Tensor | None = None  # (B, T) policy token log-probs (also online rollouts)
    mask: Tensor | None = None  # (B, T) response mask (also online rollouts)
    ref_logps: Tensor | None = None  # (B,) reference summed log-probs
    labels: Tensor | None = None  # (B,) bool, True = desirable completion
    kl_logps: Tensor | None = None  # (B,) policy log-probs of mismatched (prompt, completion) pairs
    ref_kl_logps: Tensor | None = None  # (B,) reference log-probs of the same mismatched pairs

    # --- online rollouts (data="online") -----------------------------------------------
    # token_logps / mask above hold the current policy's log-probs of the rollouts.
    old_token_logps: Tensor | None = None  # (B, T) behaviour policy (the one that sampled)
    # (B, T) the learner's weights when the batch was consumed (its first pass), for corrections that
    # clip against a proximal policy; None: the current weights (the first pass itself)
    prox_token_logps: Tensor | None = None
    token_entropy: Tensor | None = None  # (B, T) policy's next-token entropy, with gradient (uses_entropy)
    ref_token_logps: Tensor | None = None  # (B, T) reference policy, for KL-regularised methods
    rewards: Tensor | None = None  # (B,) scalar reward of each rollout
    group_ids: Tensor | None = None  # (B,) long, rollouts of the same prompt share an id
    values: Tensor | None = None  # (B, T) value head, current parameters (needs_value_model)
    old_values: Tensor | None = None  # (B, T) value head when the rollouts were made
    policy_versions: Tensor | None = None  # (B,) long, policy version that generated each rollout
    current_version: int | None = None  # version of the policy being updated
    # the generation limit (max_new_tokens) the rollouts were sampled with: dr_grpo's constant L_max
    max_completion_length: int | None = None
    # --- whole-batch statistics (online): set only when the rollout batch is split -------------
    # into more than one micro-batch (accumulation x ranks); None: this micro-batch is the batch.
    micro_batches: int | None = None  # micro-batches the rollout batch is split into, all ranks
    # "tokens": response tokens in the whole batch, plus what the spec's batch_stats computed
    # (e.g. the whitening mean/std of the advantages over every token of the batch)
    batch_stats: dict[str, Tensor] | None = None

    # --- training-time facts every loss may read ---------------------------------------
    progress: float | None = None  # share of the optimiser steps done before this one, in [0, 1)
    # the loss's carried state (specs with initial_state): after the previous optimiser step
    state: dict[str, Tensor] | None = None

    def present(self) -> list[str]:
        """Names of the fields that are filled in (for error messages and debugging)."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def require(self, loss: str, *names: str) -> None:
        """Raise a one-line error (:class:`MissingInputs`) if any of ``names`` is missing."""
        missing = [n for n in names if getattr(self, n) is None]
        if missing:
            raise MissingInputs(loss, missing, self.present())


@dataclass
class LossOutput:
    """``loss``: scalar tensor with grad. ``metrics``: detached floats or 0-d tensors.

    ``state``: for a spec with ``initial_state``, the state after this batch (detached 0-d tensors,
    the same keys). The trainer averages the proposals of every micro-batch and rank and carries the
    result into the next optimiser step (the only way a loss keeps anything across steps)."""

    loss: Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    state: dict[str, Tensor] | None = None

    def __post_init__(self) -> None:
        self.metrics = {
            k: float(v.detach()) if isinstance(v, Tensor) else float(v) for k, v in self.metrics.items()
        }
