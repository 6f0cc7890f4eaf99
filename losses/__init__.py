"""oxbench's loss registry and the 51 built-in algorithms (one module each).

Public API::

    import losses
    spec = losses.get("dpo")            # a LossSpec; imports losses/dpo.py on first use
    out = spec(losses.LossInputs(...), beta=0.1)
    losses.names(); losses.register(my_spec)

See losses/README.md for the contract and how to publish a plugin.
"""

from losses.registry import (
    DATA_KINDS,
    ENTRY_POINT_GROUP,
    PARADIGMS,
    LossError,
    LossSpec,
    all_specs,
    get,
    names,
    register,
    unregister,
)
from losses.types import LossInputs, LossOutput

__all__ = [
    "DATA_KINDS",
    "ENTRY_POINT_GROUP",
    "PARADIGMS",
    "LossError",
    "LossInputs",
    "LossOutput",
    "LossSpec",
    "all_specs",
    "get",
    "names",
    "register",
    "unregister",
]
