"""The run record, ``<out>/<grid>/<run_id>/run.json``, as one typed model: :class:`RunRecord`.

Every writer goes through it (the runner, the executors' fallback for a cell whose process died
before writing its own record) and :mod:`analysis` validates every record it loads against it, so
a key the writers add and the readers miss (or the reverse) is an error in a test, not a report
that fails on a results directory.

The record is written whole (``model_dump(mode="json")``): a key not known yet is ``null``.

This module imports nothing but pydantic: :mod:`analysis` uses it and must stay free of the engine.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

# how a record is read, for every reader (analysis/ included, which imports this module alone): defined
# with the cache's seals in oxbench.utils, which read their own files the same way
from oxbench.utils import (  # noqa: F401  (re-exported)
    JSONL_LIMIT,
    RECORD_LIMIT,
    UnsafeFile,
    read_bytes_checked,
    read_json_checked,
    read_jsonl_checked,
)

#: A run's life: ``running`` while its process lives, then ``finished`` or ``failed``;
#: ``preempted`` for a run its scheduler stopped (re-run like ``failed``).
STATUSES = ("finished", "failed", "running", "preempted")
Status = Literal["finished", "failed", "running", "preempted"]

#: Keys of an arm's identity that the label shows otherwise (scale, seed) or not at all.
_UNLABELLED = {"scale", "method", "lora", "seed", "model.name", "model.lora.enabled"}


class RunRecord(BaseModel):
    """``run.json``. The identity keys are always present; the rest fill in as the run goes on."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # identity (every record, including an executor's fallback for a dead cell process)
    run_id: StrictStr
    grid: StrictStr
    status: Status
    error: str | None = None
    scale: StrictStr
    method: StrictStr
    seed: StrictInt
    lora: StrictBool
    #: the arm: scale, method, lora and every grid axis that varies (dotted path -> value);
    #: the seeds of one arm are what the analysis pools. Empty in records written before it existed.
    arm: dict[str, Any] = {}
    # provenance, from the RunConfig and the machine (set when the run starts)
    seeds: dict[str, int] | None = None
    #: what the run seed redrew (RunConfig.seed_scope): "run" or "order"; None in records before it existed
    seed_scope: str | None = None
    config: dict[str, Any] | None = None
    config_hash: str | None = None
    git_sha: str | None = None
    packages: dict[str, str] | None = None
    world_size: int | None = None
    nodes: int | None = None  # the torchrun agents (nodes) its ranks ran on
    zero_stage: int | None = None  # the ZeRO stage it ran at (train.zero_stage, or --zero-stage)
    #: the mid-run checkpoint's step this run resumed from (None: it ran from the start)
    resumed_from_step: int | None = None
    #: trained again by ``--rerun`` over a finished record (kept beside it as ``run.replaced.json``)
    rerun: bool = False
    #: the SHA-256 of each local data file the run read, by split (``train``, ``test``): a record
    #: whose files have changed since is stale (``oxbench.grid.runs.stale_data``) and runs again
    data_files: dict[str, str] | None = None
    #: each tracking backend and how it went: "ok", "unavailable: ...", "failed: ..."
    tracking: dict[str, str] | None = None
    # the loss (set once it is resolved)
    paradigm: str | None = None
    data_kind: str | None = None
    loss_version: int | None = None
    loss_hparams: dict[str, Any] | None = None
    loss_paper: str | None = None
    # the model, data and training
    scale_params: int | None = None
    data: dict[str, Any] | None = None
    data_order_sha: str | None = None
    optimizer_steps: int | None = Field(None, validation_alias=AliasChoices("optimizer_steps", "steps"))
    loss_state: dict[str, float] | None = None  # a stateful loss's carried state at the end of training
    # online: the compute ledger's totals (rollouts, generated/trained tokens, generation/training seconds)
    compute: dict[str, float] | None = None
    # online.collapse: the first collapse seen, {"step": optimiser step, "reason": ...}; None: none (or off)
    collapse: dict[str, Any] | None = None
    #: the fast paths the run took after its method's fallbacks (online.backend, online.share_prompt,
    #: eval.backend); None in records written before the fast paths were the defaults
    paths: dict[str, Any] | None = None
    # results
    metrics: dict[str, int | float | None] | None = None
    timing: dict[str, float] | None = None
    traceback: str | None = None


def arm_label(arm: dict[str, Any] | None, method: str) -> str:
    """A stable one-line name for an arm: the method, then ``key=value`` for each varying axis other
    than scale and seed (sorted by key; the last part of the dotted path unless two keys share it),
    then `` (LoRA)`` when LoRA was a grid axis and is on. ``"sgrpo lr=0.0001"``; just the method
    when no axis but scale and seed varies (and for records written before arms existed)."""
    arm = arm or {}
    keys = sorted(k for k in arm if k not in _UNLABELLED)
    tails = [k.rsplit(".", 1)[-1] for k in keys]
    parts = [str(arm.get("method", method))]
    for key, tail in zip(keys, tails):
        parts.append(f"{tail if tails.count(tail) == 1 else key}={_value(arm[key])}")
    label = " ".join(parts)
    return label + " (LoRA)" if arm.get("model.lora.enabled") is True else label


def _value(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    return str(v)  # repr for floats: exact, so two learning rates never share a label
