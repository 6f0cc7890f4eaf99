"""The built-in ladder of tiny Qwen2-architecture models (built from a config, no download)."""

from __future__ import annotations

from transformers import Qwen2Config, Qwen2ForCausalLM

# name -> (hidden, layers, heads, kv_heads, intermediate)
LADDER: dict[str, tuple[int, int, int, int, int]] = {
    "tiny-xs": (48, 3, 4, 2, 128),
    "tiny-s": (80, 3, 4, 2, 224),
    "tiny-m": (128, 4, 4, 2, 384),
    "tiny-l": (256, 6, 8, 4, 704),
}


def is_tiny(name: str) -> bool:
    return name in LADDER


def tiny_config(name: str, vocab_size: int, *, pad_token_id: int, eos_token_id: int) -> Qwen2Config:
    hidden, layers, heads, kv_heads, inter = LADDER[name]
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=inter,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=eos_token_id,
        attn_implementation="sdpa",
    )


def build_tiny(name: str, vocab_size: int, *, pad_token_id: int, eos_token_id: int) -> Qwen2ForCausalLM:
    return Qwen2ForCausalLM(
        tiny_config(name, vocab_size, pad_token_id=pad_token_id, eos_token_id=eos_token_id)
    )
