"""A run's plan: what the engine, the grid and the CLI need to know about a cell, resolved once.

:func:`resolve` reads the config's method from the loss registry (the one place in the engine and the
grid that does), resolves its hyper-parameters, and derives the method's capabilities: whether it
trains online, on self-play data made before training, against a cached or a live reference, with a
value head, and whether the shared-prompt forward serves it. Everything downstream reads these
fields; nothing asks the registry again or branches on a loss's name.

Planning (``resolve(cfg, live=False)``: the grid's validation, the CLI's plan) reads the capabilities
from the registry's index (:func:`losses.info`) and imports no loss and no torch; training resolves the
live spec, whose ``fn`` it calls.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import losses
from losses import LossInfo, LossSpec
from oxbench.config import RunConfig, micro_batches_per_rank

Source = Literal["dataset", "sync", "delayed", "async"]


def lookup(method: str) -> LossSpec:
    """The registered spec of ``method`` (:class:`losses.LossError` naming it when there is none)."""
    return losses.get(method)


@dataclass(frozen=True)
class Capabilities:
    """What a method needs and can take, from its spec alone."""

    online: bool  # trains on experience from the policy: rollouts, or pairs it samples itself
    self_play_data: bool  # trains on self-play data made from the base before training
    reference: Literal["none", "cached", "live"]  # cached: log-probs computed once; live: a frozen copy
    value_model: bool  # a value head on the policy (PPO-style)
    shared_prompt: bool  # its loss reads only the completions of rollouts (the shared-prompt forward)
    data: str = "sft"  # the kind of example its batches carry: sft, pairs, unpaired (offline) or online
    full_logits: bool = False  # its loss reads the full logits (the policy's and a live reference's)
    own_pairs: bool = False  # online: it samples and ranks its own preference pairs each round
    iterate_pairs: bool = False  # online: a frozen iterate answers the rejected side (SPIN)
    kl_pairs: bool = False  # unpaired: its loss reads the mismatched pairs' log-probs (KTO's reference point)

    @classmethod
    def of(cls, spec: LossSpec | LossInfo, hparams: dict) -> Capabilities:
        online = spec.trains_online
        self_play = not spec.generates_own_pairs and (
            spec.data in ("pairs", "unpaired") or (spec.data == "sft" and spec.sft_source == "self_play")
        )
        if online:  # an online run keeps a frozen copy when its loss, at these hyper-parameters, reads one
            reference = "live" if spec.uses_reference(hparams) else "none"
        else:
            live = spec.updates_reference or spec.needs_full_logits
            reference = "none" if not spec.needs_reference else ("live" if live else "cached")
        shared = online and not (spec.needs_value_model or spec.generates_own_pairs)
        return cls(
            online,
            self_play,
            reference,
            spec.needs_value_model,
            shared,
            spec.data,
            spec.needs_full_logits,
            spec.generates_own_pairs,
            spec.pairs_from_iterate,
            spec.data == "unpaired" and spec.reads_kl_pairs,
        )


@dataclass(frozen=True)
class RunPlan:
    """One cell, resolved: its config, loss spec and hyper-parameters, capabilities, experience source,
    seeds, micro-batch layout and run_id."""

    cfg: RunConfig
    spec: LossSpec | LossInfo  # LossInfo: a plan resolved with live=False (no loss function)
    hparams: dict
    caps: Capabilities
    source: Source
    seeds: dict[str, int]
    micro_batches: int  # per rank and optimiser step: online, prompts' groups; offline, grad_accum
    world_size: int
    run_id: str

    @property
    def device(self):
        """The rank's device (:mod:`oxbench.device`)."""
        import oxbench.device as placement

        return placement.get()


def resolve(cfg: RunConfig, world_size: int = 1, *, live: bool = True) -> RunPlan:
    """The plan of ``cfg`` at ``world_size`` ranks. A bad method, hyper-parameter or micro-batch layout
    is a ``LossError`` / ``ValueError`` naming it, before any work. ``live=False``: the spec's
    capabilities only (:func:`losses.info`), for planning; training needs the live spec."""
    spec = lookup(cfg.method) if live else losses.info(cfg.method)
    return plan_of(cfg, spec, spec.resolve_hparams(cfg.loss), world_size)


def plan_of(cfg: RunConfig, spec: LossSpec | LossInfo, hparams: dict, world_size: int = 1) -> RunPlan:
    """The plan of ``cfg`` trained with ``spec`` at ``hparams``, which need not be registered (``oxbench
    losses check`` trains a spec as it is, and so do the tests)."""
    caps = Capabilities.of(spec, hparams)
    if cfg.data.path is not None and not caps.online:  # the rows come from the file: no self-play
        caps = replace(caps, self_play_data=False)
    if caps.online:
        o = cfg.online
        micro = micro_batches_per_rank(o.prompts_per_batch, cfg.train.batch_size, world_size, cfg.method)
        source: Source = o.source
    else:
        micro, source = cfg.train.grad_accum, "dataset"
    return RunPlan(cfg, spec, hparams, caps, source, cfg.seeds(), micro, world_size, cfg.run_id())
