"""Names that moved between the transformers versions oxbench runs on (pyproject.toml's window:
transformers 5.17, the GPU image's, up to the newest 5.x CI installs; docs/gpus.md, "The dependency
window").

Each name is read off the installed transformers itself (feature detection), never guessed from its
version number. Code that passes or reads a renamed name takes it from here, and nowhere else.
"""

from __future__ import annotations

import dataclasses
import functools


@functools.cache
def cache_name() -> str:
    """The KV cache's name in a causal LM's call and output: ``"cache"`` (transformers >= 5.24) or
    ``"past_key_values"`` (before): ``model(..., **{cache_name(): c})``, ``out[cache_name()]``."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    fields = {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
    for name in ("cache", "past_key_values"):
        if name in fields:
            return name
    raise ImportError(
        f"transformers' CausalLMOutputWithPast has neither 'cache' nor 'past_key_values' ({sorted(fields)}): "
        "a transformers outside oxbench's window (pyproject.toml)"
    )
