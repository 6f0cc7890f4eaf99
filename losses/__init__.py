"""oxbench's loss registry and the 52 built-in algorithms (one module each).

Public API::

    import losses
    spec = losses.get("dpo")            # a LossSpec; imports losses/dpo.py on first use
    out = spec(losses.LossInputs(...), beta=0.1)
    losses.names(); losses.register(my_spec)
    losses.info("dpo")                  # its capabilities from losses/index.json, no torch

``import losses`` does not import torch: the loss modules and ``LossInputs``/``LossOutput`` do, on
first use. See losses/README.md for the contract and how to publish a plugin.
"""

from losses.registry import (
    DATA_KINDS,
    ENTRY_POINT_GROUP,
    PARADIGMS,
    LossError,
    LossInfo,
    LossSpec,
    all_info,
    all_specs,
    get,
    info,
    names,
    register,
    unregister,
)

__all__ = [
    "DATA_KINDS",
    "ENTRY_POINT_GROUP",
    "PARADIGMS",
    "LossError",
    "LossInfo",
    "LossInputs",
    "LossOutput",
    "LossSpec",
    "all_info",
    "all_specs",
    "get",
    "info",
    "names",
    "register",
    "unregister",
]


def __getattr__(name: str):
    """``losses.LossInputs`` and ``losses.LossOutput``, imported (with torch) on first use."""
    if name in ("LossInputs", "LossOutput"):
        from losses import types

        return getattr(types, name)
    raise AttributeError(f"module 'losses' has no attribute {name!r}")
