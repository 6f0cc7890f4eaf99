"""The built-in ladder of tiny Qwen2-architecture models (built from a config, no download)."""

from __future__ import annotations

import os
from pathlib import Path

# transformers is imported inside the builders: the CLI validates model names without loading it

# name -> (hidden, layers, heads, kv_heads, intermediate)
LADDER: dict[str, tuple[int, int, int, int, int]] = {
    "tiny-xs": (48, 3, 4, 2, 128),
    "tiny-s": (80, 3, 4, 2, 224),
    "tiny-m": (128, 4, 4, 2, 384),
    "tiny-l": (256, 6, 8, 4, 704),
}


def is_tiny(name: str) -> bool:
    return name in LADDER


class ModelError(ValueError):
    pass


def offline() -> bool:
    """Hugging Face's offline mode (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``): nothing is fetched."""
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def in_hub_cache(name: str) -> bool:
    """Whether Hub model ``name`` has its config in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def check_model_name(name: str) -> None:
    """A tiny rung, a local directory holding a model (its ``config.json``), or something shaped like a
    Hub id (``org/name``)."""
    if is_tiny(name):
        return
    if Path(name).expanduser().is_dir():
        if not (Path(name).expanduser() / "config.json").is_file():
            raise ModelError(f"model path {name!r} is a directory with no model in it (no config.json)")
        return
    looks_local = name.startswith((".", "/", "~"))
    if "/" in name and not looks_local and name.count("/") == 1:
        if offline() and not in_hub_cache(name):
            raise ModelError(
                f"model {name!r} is not in the Hugging Face cache and HF_HUB_OFFLINE is set: download it "
                "first (hf download ID) or give a local path"
            )
        return
    if looks_local:
        raise ModelError(f"model path {name!r} does not exist")
    import difflib

    close = difflib.get_close_matches(name, list(LADDER), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else " (a tiny rung, a Hugging Face id or a local path)"
    raise ModelError(f"unknown model {name!r}{hint}")


def qwen2_config(
    shape: tuple[int, int, int, int, int], vocab_size: int, *, tie_word_embeddings: bool = True, **fields
):
    """A Qwen2 config of ``shape`` = (hidden, layers, heads, kv_heads, intermediate), as the rows of
    :data:`LADDER`, tied embeddings unless told; ``fields``: the rest (positions, special tokens, ...)."""
    from transformers import Qwen2Config

    hidden, layers, heads, kv_heads, inter = shape
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=inter,
        tie_word_embeddings=tie_word_embeddings,
        **fields,
    )


def tiny_config(name: str, vocab_size: int, *, pad_token_id: int, eos_token_id: int):
    return qwen2_config(
        LADDER[name],
        vocab_size,
        max_position_embeddings=512,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=eos_token_id,
        attn_implementation="sdpa",
    )


def build_tiny(name: str, vocab_size: int, *, pad_token_id: int, eos_token_id: int):
    from transformers import Qwen2ForCausalLM

    return Qwen2ForCausalLM(
        tiny_config(name, vocab_size, pad_token_id=pad_token_id, eos_token_id=eos_token_id)
    )
