"""The capabilities a family of built-in losses shares, declared once.

A built-in's ``spec`` is one of these factories: the family fixes what the trainer must feed its
losses (``paradigm``, ``data``, ``needs_reference`` where the whole family agrees), and each loss adds
its own name, function, paper, version and description, and any capability of its own (e.g.
``needs_full_logits``, ``initial_state``, ``batch_stats``). The result is a plain
:class:`~losses.registry.LossSpec`; a plugin writes its ``LossSpec`` itself (losses/README.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from losses.registry import LossSpec


def pairs_spec(name: str, fn: Callable, **fields: Any) -> LossSpec:
    """An offline preference loss on (chosen, rejected) pairs scored against a frozen reference: DPO
    and its variants (``paradigm="offline"``, ``data="pairs"``, ``needs_reference=True``)."""
    return LossSpec(name=name, fn=fn, paradigm="offline", data="pairs", needs_reference=True, **fields)


def ref_free_pairs_spec(name: str, fn: Callable, **fields: Any) -> LossSpec:
    """An offline preference loss on pairs without a reference model: SimPO, CPO, ORPO, ...
    (``paradigm="offline_ref_free"``, ``data="pairs"``, ``needs_reference=False``)."""
    return LossSpec(
        name=name, fn=fn, paradigm="offline_ref_free", data="pairs", needs_reference=False, **fields
    )


def self_play_pairs_spec(name: str, fn: Callable, **fields: Any) -> LossSpec:
    """A preference loss on pairs the policy samples itself during training, against a reference
    (``paradigm="online"``, ``data="pairs"``, ``needs_reference=True``, ``generates_own_pairs=True``);
    the loss says where its chosen answers come from (``chosen_source``)."""
    return LossSpec(
        name=name,
        fn=fn,
        paradigm="online",
        data="pairs",
        needs_reference=True,
        generates_own_pairs=True,
        **fields,
    )


def unpaired_spec(name: str, fn: Callable, **fields: Any) -> LossSpec:
    """An offline loss on unpaired completions labelled desirable or undesirable, scored against a
    frozen reference: KTO, BCO's unpaired form (``paradigm="unpaired"``, ``data="unpaired"``,
    ``needs_reference=True``)."""
    return LossSpec(name=name, fn=fn, paradigm="unpaired", data="unpaired", needs_reference=True, **fields)


def rollouts_spec(name: str, fn: Callable, **fields: Any) -> LossSpec:
    """An online loss on the policy's own graded rollouts: the GRPO family, PPO, RLOO, ...
    (``paradigm="online"``, ``data="online"``); each says whether it always ``needs_reference``
    (otherwise a ``beta`` > 0 asks for one, :meth:`~losses.registry.LossSpec.uses_reference`)."""
    return LossSpec(name=name, fn=fn, paradigm="online", data="online", **fields)


def sft_spec(name: str, fn: Callable, **fields: Any) -> LossSpec:
    """A supervised fine-tuning loss (``paradigm="sft"``, ``data="sft"``, ``needs_reference=False``);
    each says which answers it learns from (``sft_source``)."""
    return LossSpec(name=name, fn=fn, paradigm="sft", data="sft", needs_reference=False, **fields)
