"""``key=value`` overrides of a grid file, given after it on the command line (Hydra's and OmegaConf's
dotlist style)::

    oxbench run --grid recipes/quickstart.yaml --plan train.lr=1.0e-5 axes.seed=[0,1,2]

**Which block a key sets.** A key whose first part is a top-level key of the grid file
(:class:`~oxbench.grid.spec.GridFile`: ``name``, ``base``, ``axes``, ``methods``, ``scales``,
``variants``, ``budget``, ``report``, ``cluster``, ``confirmatory``, ...) sets that block; any other key
is a run setting, under ``base`` (``train.lr=1.0e-5`` is ``base.train.lr``; no run setting shares a
name with a block). Under ``axes`` the rest of the key is one axis's name, dots and all
(``axes.loss.beta=[0.1,0.3]``); under ``methods`` and ``scales`` the next part names the method or
scale and the rest is its setting (``methods.dpo.loss.beta=0.2``,
``scales.tiny-m.train.batch_size=4``). Every other part is one level of nesting
(``budget.rollouts=4096``, ``report.metric=accuracy_verified``). Overrides apply in the order given:
of two that set one setting, the later wins.

**Values are YAML**, read as the grid file is (``[0,1,2]`` a list, ``{lr: 1.0e-4}`` a block,
``null``, ``on``/``off``), except that an exponent without a point is a number too (``1e-5``, as
YAML 1.2 and OmegaConf read it). Quote the whole argument for the shell where a value has spaces or
brackets it would expand.

**They are the file's edit**, applied to its mapping before it is validated: a bad key or value is the
same one-line error (exit 2, naming the file and the field) as in the file, and the precedence is the
file's (base < per-scale < per-method < axis value), so a run setting that an axis sets in every cell
is an error naming the axis to set instead. A setting they change enters each cell's ``run_id`` as it
would from the file; the overrides themselves do not, and every cell records them
(``RunConfig.cli_overrides``, in ``run.json``'s ``config``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import yaml

from oxbench.grid.spec import ALIASES, GridError, GridFile, _UniqueKeyLoader


class _OverrideSafeLoader(_UniqueKeyLoader):
    """The grid file's loader (safe, duplicate keys an error) with YAML 1.2's floats: ``1e-5`` too."""


_OverrideSafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)

BLOCKS = tuple(GridFile.model_fields)  # a key's first part that names one of these sets that block
# the parts of a key before its rest is one key: an axis's name; a method's or scale's setting, dotted as
# such a block's keys may be (applied after the block's own settings, so an override wins)
_WHOLE_REST = {"axes": 1, "methods": 2, "scales": 2}


def apply_overrides(raw: dict, overrides: Sequence[str], where: str) -> dict:
    """``raw`` (a grid file's mapping) with each ``key=value`` of ``overrides`` set, in order, and the
    list recorded as ``base.cli_overrides``; a malformed override is a :class:`GridError` naming
    ``where`` and the override."""
    settings = []
    for text in overrides:
        parts, value = _parse(text, where)
        _put(raw, parts, value, f"{where}: override {text!r}")
        if parts[0] == "base":
            settings.append((text, ".".join(parts[1:])))
    base = raw.setdefault("base", {})
    if isinstance(base, dict):  # (a base that is no block is the file's error, said when it is validated)
        base["cli_overrides"] = list(overrides)
    axes = raw.get("axes") if isinstance(raw.get("axes"), dict) else {}
    for text, path in settings:  # a base setting every cell's axis value replaces would do nothing
        for axis in axes:
            if path == ALIASES.get(axis, axis) or path.startswith(f"{ALIASES.get(axis, axis)}."):
                raise GridError(
                    f"{where}: override {text!r}: axis {axis!r} sets it in every cell; give axes.{axis}=[...]"
                )
    return raw


def _parse(text: str, where: str) -> tuple[list[str], object]:
    """The override's path (its block first) and its value."""
    key, eq, value = text.partition("=")
    parts = key.split(".")
    if not eq or not all(p and p == p.strip() for p in parts):
        raise GridError(f"{where}: override {text!r}: expected KEY=VALUE, KEY a dotted path (train.lr=1e-5)")
    if parts[0] not in BLOCKS:
        parts = ["base", *parts]
    cut = _WHOLE_REST.get(parts[0])
    if cut is not None and len(parts) > cut + 1:
        parts = [*parts[:cut], ".".join(parts[cut:])]
    try:
        return parts, yaml.load(value, Loader=_OverrideSafeLoader)  # noqa: S506 (a yaml.SafeLoader)
    except yaml.YAMLError as exc:
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise GridError(f"{where}: override {text!r}: malformed YAML value: {problem}") from None


def _put(tree: dict, parts: list[str], value, where: str) -> None:
    for i, part in enumerate(parts[:-1]):
        tree = tree.setdefault(part, {})
        if not isinstance(tree, dict):
            block = ".".join(parts[: i + 1])
            raise GridError(f"{where}: {block!r} is a single value, not a block of settings")
    if parts[0] != "axes":  # last in its block, so applied after its dotted or nested twin: the later wins
        tree.pop(parts[-1], None)  # (an axis keeps its place: the axes' order is the cells')
    tree[parts[-1]] = value
