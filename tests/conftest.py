"""Shared fixtures: a micro Qwen2 model saved like a Hugging Face checkpoint, an isolated cache."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from oxbench.models.tokenizer import build_char_tokenizer


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own OXBENCH_CACHE, so nothing leaks between tests or from the user's cache."""
    monkeypatch.setenv("OXBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))


def make_micro_model(seed: int = 0):
    tok = build_char_tokenizer()
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return Qwen2ForCausalLM(cfg), tok


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory):
    """A saved micro model + char tokenizer: a 'Hugging Face model' given by local path."""
    d = tmp_path_factory.mktemp("micro_model")
    model, tok = make_micro_model()
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return str(d)
