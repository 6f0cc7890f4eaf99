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


def place(module: torch.nn.Module) -> torch.nn.Module:
    """A module (policy, frozen copy, value head) moved to the rank's device."""
    return module.to(get())
