"""The rank's device: the one place that decides where this process's tensors live.

On a GPU rank it is ``cuda:LOCAL_RANK`` (the device DeepSpeed puts the engine on), else the CPU.
Every batch, frozen copy (reference, rollout worker, value head) and evaluation reads it from here;
code in ``engine/``, ``text/`` and ``eval/`` never creates a tensor without naming a device, so a
GPU run has no CPU tensor meeting a CUDA one (``tests/test_device_placement.py`` checks that on the
CPU through a virtual accelerator).
"""

from __future__ import annotations

import os

import torch

_current: torch.device | None = None


def _detect() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def get() -> torch.device:
    """This rank's device, decided once per process."""
    global _current
    if _current is None:
        _current = _detect()
    return _current


def reset() -> None:
    """Forget the decision (tests that change what :func:`_detect` sees)."""
    global _current
    _current = None


def on_accelerator() -> bool:
    return get().type != "cpu"


def to_device(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A batch's tensors on the rank's device (one copy each; a no-op where they already are)."""
    dev = get()
    return {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def place(module: torch.nn.Module) -> torch.nn.Module:
    """A module (policy, frozen copy, value head) moved to the rank's device."""
    return module.to(get())


def resolve_dtype(name: str) -> torch.dtype:
    """``model.dtype``: ``auto`` is bf16 on an accelerator and fp32 on the CPU (where bf16 matmuls are
    slow and the committed studies ran in fp32)."""
    if name == "auto":
        return torch.bfloat16 if on_accelerator() else torch.float32
    return torch.bfloat16 if name == "bf16" else torch.float32
