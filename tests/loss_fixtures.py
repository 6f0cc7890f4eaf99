"""Shared pieces of the loss tests: the micro Qwen2 the TRL parity tests run, and a pair's
:class:`~losses.types.LossInputs` from its per-token log-probs."""

from __future__ import annotations

import torch
from transformers import Qwen2ForCausalLM

from losses.types import LossInputs
from oxbench.models.tiny import qwen2_config

#: (hidden, layers, heads, kv_heads, intermediate) of the parity tests' models
MICRO_SHAPE = (16, 1, 2, 1, 32)


def micro_qwen2(vocab_size: int, seed: int = 0, **fields) -> Qwen2ForCausalLM:
    """A freshly initialised (``torch.manual_seed(seed)``) Qwen2 of :data:`MICRO_SHAPE` with untied
    embeddings; ``fields``: the config's special tokens, ..."""
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(qwen2_config(MICRO_SHAPE, vocab_size, tie_word_embeddings=False, **fields))


def pair_from_tokens(chosen_tok, rejected_tok, chosen_mask, rejected_mask, **ref) -> LossInputs:
    """A pair's inputs from its (B, T) per-token log-probs (0 off the masks): summed and per token, with
    the masks; ``ref``: the ``ref_*`` fields."""
    return LossInputs(
        chosen_logps=chosen_tok.sum(-1),
        rejected_logps=rejected_tok.sum(-1),
        chosen_token_logps=chosen_tok,
        rejected_token_logps=rejected_tok,
        chosen_mask=chosen_mask,
        rejected_mask=rejected_mask,
        **ref,
    )
