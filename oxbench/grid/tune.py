"""The tuning protocol of a grid file (``tune:``): every arm at its own best setting, chosen by one rule
on the validation split, then run on fresh seeds and evaluated on the test split.

.. code-block:: yaml

    tune:
      seeds: [100, 101]                  # k tuning seeds, none of them in axes.seed
      metric: accuracy_verified_flexible # what the rule ranks (validation evaluations)
      tie: 0.0                           # means within this of the best tie; ties go to the smaller step
      sweep:                             # group -> {setting: factors of the cell's own value}
        all: {train.lr: [0.3, 1.0, 3.0]}
        offline: {loss.beta: [0.5, 1.0, 2.0]}    # a paradigm
        cispo: {loss.epsilon_high: [0.5, 1.0, 2.0]}  # a method

1. **Sweep.** A group is ``all``, a paradigm (``sft``, ``offline``, ``offline_ref_free``, ``unpaired``,
   ``online``) or a method; a method's sweep is ``all``'s, then its paradigm's, then its own (a later
   group replaces a setting an earlier one named). Values are *factors* of the setting's value in the
   cell (its family's learning rate, the loss's own β), so one sweep fits losses whose defaults differ by
   orders of magnitude. ``train.lr`` scales ``train.lr_scaling.base_lr`` where a rule sets the rate. A
   loss without a swept hyper-parameter is not swept on it. The points are the product of the settings.
2. **Tuning cells** (grid ``<name>_tune``): each arm (a cell without its seed) × point × tuning seed,
   evaluated on the validation split only (``eval.split: validation``; no OOD, lm-eval or test rows), so
   a tuning record carries no test metric (:func:`tuning_leak`).
3. **The pick** (:func:`pick`): the point with the best mean of ``metric`` over its finished tuning
   seeds; a mean within ``tie`` of the best ties, and ties go to the smaller learning rate, then the
   smaller value of each other setting. An arm whose tuning cells did not all end is not picked yet;
   one with no finished tuning cell has no pick (its final cells are not run; the plan says why).
4. **Final cells**: the grid's own cells (its seeds, the test split) with their arm's pick applied.

Everything is a record: a resumed tune skips its finished tuning cells and picks from the records
(``<out>/<name>_tune/picks.json`` is written for people; the records decide).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from oxbench.config import RunConfig

PARADIGMS = ("sft", "offline", "offline_ref_free", "unpaired", "online")
LR = "train.lr"


class TuneSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seeds: list[int] = Field(min_length=1)
    metric: str = "accuracy_verified_flexible"
    tie: float = Field(0.0, ge=0.0)
    sweep: dict[str, dict[str, list[float]]] = Field(min_length=1)

    @field_validator("sweep")
    @classmethod
    def _factors(cls, sweep: dict) -> dict:
        for group, settings in sweep.items():
            for key, factors in settings.items():
                if key != LR and not key.startswith("loss."):
                    raise ValueError(f"{group}.{key}: only train.lr and loss.<hyper-parameter> are swept")
                if not factors or any(not (f > 0 and math.isfinite(f)) for f in factors):
                    raise ValueError(f"{group}.{key}: factors must be positive numbers, got {factors}")
                if len(set(factors)) != len(factors):
                    raise ValueError(f"{group}.{key}: repeated factors {factors}")
        return sweep


def tune_grid(name: str) -> str:
    """The grid (records directory) of ``name``'s tuning cells."""
    return f"{name}_tune"


def own_values(cfg: RunConfig) -> dict[str, float]:
    """Every setting a sweep may scale, with its value in ``cfg``: the learning rate (``lr_scaling``'s
    base rate where a rule sets it) and each numeric hyper-parameter of the loss (its default, or the
    cell's override)."""
    import losses

    spec = losses.info(cfg.method)  # the index's entry: planning imports no torch
    scaling = cfg.train.lr_scaling
    out = {LR: scaling.base_lr if scaling.rule != "none" else cfg.train.lr}
    for k, v in {**(spec.defaults or {}), **cfg.loss}.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v != 0:
            out[f"loss.{k}"] = float(v)
    return out


def sweep_of(spec: TuneSpec, method: str, paradigm: str) -> dict[str, list[float]]:
    """A method's sweep: ``all``'s settings, then its paradigm's, then its own."""
    out: dict[str, list[float]] = {}
    for group in ("all", paradigm, method):
        out.update(spec.sweep.get(group, {}))
    return out


def sweep_of_cell(spec: TuneSpec, cfg: RunConfig) -> dict[str, list[float]]:
    """``cfg``'s sweep, on the settings its loss has."""
    import losses

    own = own_values(cfg)
    return {k: f for k, f in sweep_of(spec, cfg.method, losses.info(cfg.method).paradigm).items() if k in own}


def points(spec: TuneSpec, cfg: RunConfig) -> list[dict[str, float]]:
    """The settings (absolute values) of every point of ``cfg``'s arm, in a fixed order."""
    own, sweep = own_values(cfg), sweep_of_cell(spec, cfg)
    keys = sorted(sweep)
    combos = itertools.product(*(sweep[k] for k in keys))
    return [{k: float(f"{own[k] * f:.12g}") for k, f in zip(keys, combo)} for combo in combos]


def point_values(cfg: RunConfig, point: dict[str, float]) -> dict[str, float]:
    """``point`` as the dotted settings a cell is built with: ``train.lr`` is the base rate of
    ``train.lr_scaling`` where a rule sets the rate."""
    scaled = cfg.train.lr_scaling.rule != "none"
    return {("train.lr_scaling.base_lr" if k == LR and scaled else k): v for k, v in point.items()}


Pairs = list[tuple[dict, RunConfig]]  # a grid's cells with the values each was built from
Build = Callable[[dict], RunConfig]  # a cell from such values (oxbench.grid.spec), validated


def tuning_values(name: str, cfg: RunConfig, point: dict[str, float], seed: int) -> dict[str, Any]:
    """What a tuning cell adds to its arm's values: the point, a tuning seed, its grid, validation only."""
    return {**point_values(cfg, point), "seed": seed, "grid": tune_grid(name), **VALIDATION_ONLY}


@dataclass(frozen=True)
class Arm:
    """One arm of a tuned grid: the values its first cell was built from, that cell, and each point of
    its sweep with its tuning cells (one per tuning seed), built once."""

    values: dict
    cfg: RunConfig
    points: list[tuple[dict[str, float], list[RunConfig]]]


def plan(spec: TuneSpec, name: str, pairs: Pairs, build: Build) -> list[Arm]:
    """Each arm of the grid × its points × the tuning seeds, on the validation split (module doc, 2)."""
    out = []
    for values, cfg in arms(pairs):
        cells = [
            (p, [build({**values, **tuning_values(name, cfg, p, s)}) for s in spec.seeds])
            for p in points(spec, cfg)
        ]
        out.append(Arm(values, cfg, cells))
    return out


def tuning_cells(tuned: list[Arm]) -> list[RunConfig]:
    """Every tuning cell of ``tuned``, arm by arm, point by point, seed by seed."""
    return [cell for arm in tuned for _, cells in arm.points for cell in cells]


#: what a tuning cell evaluates: the validation split and nothing of the test split's
VALIDATION_ONLY = {"eval.split": "validation", "eval.n_ood": 0, "eval.lm_eval.tasks": {}}


def arms(pairs: Pairs) -> Pairs:
    """One cell per arm (its first seed's), in the grid's order."""
    seen: dict[str, tuple[dict, RunConfig]] = {}
    for values, cfg in pairs:
        seen.setdefault(arm_key(cfg), (values, cfg))
    return list(seen.values())


def arm_key(cfg: RunConfig) -> str:
    """An arm's identity: its config with the seed left out."""
    import json

    ident = cfg.identity()
    ident.pop("seed", None)
    return json.dumps(ident, sort_keys=True, default=str)


def tuning_leak(record: dict) -> str | None:
    """Why a tuning record could carry a test metric (None: it cannot): it must have evaluated the
    validation split alone."""
    ev = (record.get("config") or {}).get("eval", {})
    if ev.get("split") != "validation":
        return f"eval.split is {ev.get('split')!r}, not 'validation'"
    if ev.get("n_ood", 0) or (ev.get("lm_eval") or {}).get("tasks"):
        return "it evaluated OOD or lm-eval test rows"
    return None


def pick(spec: TuneSpec, scored: list[tuple[dict[str, float], list[float]]]) -> dict | None:
    """The rule (module doc, 3) over ``scored``: (point, its finished seeds' values of the metric).
    Returns ``{"point", "mean", "means"}`` or None when no point has a finished seed."""
    means = [(p, sum(v) / len(v)) for p, v in scored if v]
    if not means:
        return None
    best = max(m for _, m in means)
    tied = [(p, m) for p, m in means if m >= best - spec.tie - 1e-12]
    order = lambda pm: (pm[0].get(LR, 0.0), *(pm[0][k] for k in sorted(pm[0]) if k != LR))  # noqa: E731
    chosen = min(tied, key=order)
    return {"point": chosen[0], "mean": chosen[1], "means": [{"point": p, "mean": m} for p, m in means]}


def check(spec: TuneSpec, cells: list[RunConfig]) -> None:
    """A tune the grid can run: its seeds none of the grid's, its cells on the test split, every group
    of its sweep a paradigm or a method of the grid; a ValueError naming the field otherwise."""
    shared = sorted({c.seed for c in cells} & set(spec.seeds))
    if shared:
        raise ValueError(f"tune.seeds: {shared} are seeds of the grid too; tuning seeds must be fresh")
    split = {c.eval.split for c in cells} - {"test", "confirm"}
    if split:
        raise ValueError(
            f"tune: the grid's cells evaluate {sorted(split)}; a tuned grid's cells evaluate the test split"
        )
    methods = {c.method for c in cells}
    for group in spec.sweep:
        if group not in ("all", *PARADIGMS, *methods):
            raise ValueError(
                f"tune.sweep.{group}: not 'all', a paradigm ({', '.join(PARADIGMS)}) or a method of the grid"
            )


def scored(spec: TuneSpec, arm: Arm, out: Path) -> tuple[list, int, int]:
    """For one arm: (point, its finished tuning seeds' values of the metric) per point, how many of its
    tuning cells ended (finished or failed) and how many it has."""
    from oxbench.grid.runs import read_record, run_dir

    rows, ended, total = [], 0, 0
    for point, cells in arm.points:
        got = []
        for cell in cells:
            rec = read_record(run_dir(out, cell.grid, cell.run_id())) or {}
            total += 1
            ended += rec.get("status") in ("finished", "failed")
            if rec.get("status") == "finished":
                got.append(_metric(rec, spec.metric))
        rows.append((point, got))
    return rows, ended, total


def _metric(rec: dict, metric: str) -> float:
    value = (rec.get("metrics") or {}).get(metric)
    if value is None:
        have = ", ".join(sorted(k for k, v in (rec.get("metrics") or {}).items() if isinstance(v, float)))
        raise ValueError(
            f"tune.metric: {metric!r} is not in tuning record {rec.get('run_id')} (it has: {have})"
        )
    return float(value)


def final_cells(
    spec: TuneSpec, tuned: list[Arm], pairs: Pairs, out: Path, build: Build
) -> tuple[list[RunConfig], dict, list[RunConfig]]:
    """The grid's cells at their arm's pick, for the arms whose tuning has ended; per arm (its first
    cell's run_id) what the tune says: ``status`` (picked, pending or none), the pick and means, its
    factor-1 ``default``; and the untuned cells of the arms still pending (what a plan estimates)."""
    ready, state, waiting = [], {}, []
    for arm in tuned:
        rows, ended, total = scored(spec, arm, out)
        chosen = pick(spec, rows) if ended == total else None
        status = "pending" if ended < total else ("picked" if chosen else "none")
        key = arm_key(arm.cfg)
        mine = [(v, c) for v, c in pairs if arm_key(c) == key]
        state[arm.cfg.run_id()] = {
            "method": arm.cfg.method,
            "status": status,
            "ended": ended,
            "cells": total,
            "final_cells": len(mine),
            "default": {k: v for k, v in own_values(arm.cfg).items() if k in sweep_of_cell(spec, arm.cfg)},
            **(chosen or {}),
        }
        if chosen:
            ready += [build({**v, **point_values(c, chosen["point"])}) for v, c in mine]
        elif status == "pending":
            waiting += [c for _, c in mine]
    return ready, state, waiting


def picks_path(out: Path, name: str) -> Path:
    return out / tune_grid(name) / "picks.json"
