"""The loss registry: one small table of capabilities, filled from entry points.

Every algorithm, built-in or third-party, is a :class:`LossSpec` published under the
``oxbench.losses`` entry-point group. Entry points are read lazily: ``names()`` lists
them without importing anything, ``get(name)`` imports exactly one module.

The trainer reads a spec's capabilities (``data``, ``needs_reference``, ...) and never
looks at its name.

Planning needs only those capabilities, not the functions: :func:`info` answers from the generated
index ``losses/index.json`` (:class:`LossInfo`, no torch) when the index is current and the name is
a built-in, and from the live spec otherwise (a plugin, a registered spec, a stale index).
``python -m losses`` regenerates the index; ``tests/test_loss_index.py`` fails when it is stale.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the loss functions' types import torch; the registry itself does not
    from losses.types import LossInputs, LossOutput

ENTRY_POINT_GROUP = "oxbench.losses"
PARADIGMS = ("sft", "offline", "offline_ref_free", "unpaired", "online")
DATA_KINDS = ("sft", "pairs", "unpaired", "online")
SFT_SOURCES = ("gold", "self_play")


class LossError(ValueError):
    """Raised for an unknown, duplicate or malformed loss. Its message is one line."""


class _Decisions:
    """What planning decides from a loss's capabilities; shared by :class:`LossSpec` (the live spec)
    and :class:`LossInfo` (its entry in the index), so both answer alike."""

    name: str
    data: str
    needs_reference: bool
    generates_own_pairs: bool
    defaults: dict[str, Any]

    def resolve_hparams(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """``defaults`` updated by ``overrides``; an unknown key is an error with a suggestion."""
        overrides = dict(overrides or {})
        unknown = [k for k in overrides if k not in self.defaults]
        if unknown:
            key = unknown[0]
            raise LossError(
                f"loss {self.name!r}: unknown hyper-parameter {key!r}{_did_you_mean(key, self.defaults)}"
                f" (known: {', '.join(sorted(self.defaults)) or 'none'})"
            )
        for key, value in overrides.items():
            _check_hparam_type(self.name, key, value, self.defaults[key])
        return {**self.defaults, **overrides}

    def uses_reference(self, hparams: dict[str, Any]) -> bool:
        """Whether a run with these hyper-parameters needs the reference model: ``needs_reference``,
        or a KL coefficient ``beta`` > 0 on a method whose KL to the reference is optional (GRPO-style
        losses are reference-free by default)."""
        return self.needs_reference or float(hparams.get("beta", 0.0) or 0.0) > 0

    @property
    def trains_online(self) -> bool:
        """Whether the method trains on experience from the policy as it learns: rollouts (``data``
        ``online``) or preference pairs it samples itself (``generates_own_pairs``). The one place
        that decides it."""
        return self.data == "online" or self.generates_own_pairs

    def uses_entropy(self, hparams: dict[str, Any]) -> bool:
        """Whether the loss reads ``token_entropy``: an entropy coefficient ``entropy_coef`` != 0 (the
        GRPO-family losses' optional entropy regularisation)."""
        return float(hparams.get("entropy_coef", 0.0) or 0.0) != 0


class MissingInputs(ValueError):
    """A loss called without the inputs it needs; the message names the loss and what is missing."""

    def __init__(self, loss: str, missing: list[str], present: list[str]):
        self.loss, self.missing, self.present = loss, missing, present
        super().__init__(f"loss {loss!r} needs LossInputs.{', '.join(missing)} (got: {', '.join(present)})")


@dataclass(frozen=True)
class LossSpec(_Decisions):
    """What the trainer needs to know about one algorithm.

    name:               registry key, as written in grids (``method: dpo``).
    fn:                 ``fn(inputs: LossInputs, **hparams) -> LossOutput``, a pure function; every
                        hyper-parameter is a keyword parameter whose default is its value in
                        ``defaults`` (checked when the spec is registered).
    paradigm:           one of ``sft``, ``offline``, ``offline_ref_free``, ``unpaired``, ``online``.
    data:               what the data pipeline must feed: ``sft``, ``pairs``, ``unpaired``, ``online``.
    needs_reference:    the trainer fills the ``ref_*`` fields of :class:`LossInputs`.
    defaults:           hyper-parameters from the paper; grid values override them. Omitted (None): read
                        from ``fn``'s signature, every keyword parameter with its default
                        (:func:`signature_defaults`), so a loss writes its defaults once.
    paper:              arXiv id plus the equation, e.g. ``"arXiv:2305.18290 Eq. 7"``.
    version:            bumped whenever the maths changes; recorded in every ``run.json``.
    sft_source:         for ``data="sft"``: ``gold`` answers or ``self_play`` chosen answers.
    needs_value_model:  the trainer attaches a value head and fills ``values``/``old_values``.
    updates_reference:  the reference model is refreshed during training (see ``defaults``).
    needs_full_logits:  the trainer fills the ``*_logits`` fields (B, T, V).
    reads_kl_pairs:     for ``data="unpaired"``: the trainer fills ``kl_logps`` / ``ref_kl_logps``, the
                        mismatched (prompt, completion) pairs' log-probs (KTO's reference point); False
                        skips their forward pass each micro-batch (a loss that never reads them).
    generates_own_pairs: pairs are re-generated from the current policy during training.
    chosen_source:      for ``generates_own_pairs``: the chosen response is the ``gold`` answer
                        (SPIN) or the best ``self_play`` sample (online DPO).
    pairs_from_iterate: for ``generates_own_pairs``: the rejected answers of a whole iteration come from
                        a frozen iterate that is also the reference, and the trained policy becomes
                        the next iterate after ``online.pair_refresh_every`` passes over the prompts
                        (SPIN). False: pairs come from the current policy every round (online DPO).
    reference_update:   for ``updates_reference`` offline: ``reference_update(step, **hparams)`` (every
                        resolved hyper-parameter, so it declares no defaults) is
                        called after optimiser step ``step`` (from 1) and returns the weight ``α`` of the
                        policy in the new reference (``ref ← α·θ + (1−α)·ref``) or None (TR-DPO).
    batch_stats:        online: ``batch_stats(batch: LossInputs, **hparams) -> dict[str, Tensor]`` (every
                        resolved hyper-parameter, as ``reference_update``) of 0-d
                        statistics over the whole rollout batch (every micro-batch and rank), e.g. the
                        advantages' whitening mean and std. ``batch`` has the behaviour log-probs as
                        ``token_logps`` and ``old_token_logps``, the value head's ``values``/``old_values``
                        and the reference's log-probs, no gradient. Used only when the batch is split.
    initial_state:      the state the loss carries across optimiser steps (name -> float), e.g. β-DPO's
                        moving averages; the loss reads ``inputs.state`` and returns ``LossOutput.state``.
    description:        one line for ``oxbench losses``.
    """

    name: str
    fn: Callable[..., LossOutput]
    paradigm: str
    data: str
    needs_reference: bool
    defaults: dict[str, Any] | None = None
    paper: str = ""
    version: int = 1
    sft_source: str = "gold"
    needs_value_model: bool = False
    updates_reference: bool = False
    needs_full_logits: bool = False
    reads_kl_pairs: bool = True
    generates_own_pairs: bool = False
    chosen_source: str = "self_play"
    pairs_from_iterate: bool = False
    reference_update: Callable[..., float | None] | None = None
    batch_stats: Callable[..., dict] | None = None
    initial_state: dict[str, float] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        where = f"loss {self.name!r}"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise LossError(f"{where}: name must be an identifier")
        if not callable(self.fn):
            raise LossError(f"{where}: fn is not callable")
        if self.defaults is None:
            object.__setattr__(self, "defaults", signature_defaults(self.fn))
        if self.paradigm not in PARADIGMS:
            raise LossError(f"{where}: paradigm {self.paradigm!r} is not one of {', '.join(PARADIGMS)}")
        if self.data not in DATA_KINDS:
            raise LossError(f"{where}: data {self.data!r} is not one of {', '.join(DATA_KINDS)}")
        if self.sft_source not in SFT_SOURCES:
            raise LossError(f"{where}: sft_source {self.sft_source!r} is not one of {', '.join(SFT_SOURCES)}")
        if self.chosen_source not in SFT_SOURCES:
            raise LossError(
                f"{where}: chosen_source {self.chosen_source!r} is not one of {', '.join(SFT_SOURCES)}"
            )
        if not isinstance(self.version, int) or self.version < 1:
            raise LossError(f"{where}: version must be a positive int")
        if not isinstance(self.defaults, dict):
            raise LossError(f"{where}: defaults must be a dict")
        if not isinstance(self.initial_state, dict) or not all(
            isinstance(k, str) and isinstance(v, int | float) for k, v in self.initial_state.items()
        ):
            raise LossError(f"{where}: initial_state must map names to numbers")
        for hook in ("reference_update", "batch_stats"):
            if getattr(self, hook) is not None and not callable(getattr(self, hook)):
                raise LossError(f"{where}: {hook} is not callable")
        if self.updates_reference and not (self.reference_update or self.pairs_from_iterate):
            raise LossError(f"{where}: updates_reference needs a reference_update or pairs_from_iterate")
        if self.pairs_from_iterate and not self.generates_own_pairs:
            raise LossError(f"{where}: pairs_from_iterate needs generates_own_pairs")

    def __call__(self, inputs: LossInputs, **hparams: Any) -> LossOutput:
        try:
            return self.fn(inputs, **self.resolve_hparams(hparams))
        except MissingInputs as exc:  # a function registered under two names: the error names this one
            if exc.loss == self.name:
                raise
            raise MissingInputs(self.name, exc.missing, exc.present) from None

    def metadata(self) -> dict[str, Any]:
        """Everything but ``fn``, JSON-ready; ``fn`` is given as ``module:qualname``."""
        return {
            "name": self.name,
            "paradigm": self.paradigm,
            "data": self.data,
            "needs_reference": self.needs_reference,
            "defaults": dict(self.defaults),
            "paper": self.paper,
            "version": self.version,
            "sft_source": self.sft_source,
            "needs_value_model": self.needs_value_model,
            "updates_reference": self.updates_reference,
            "needs_full_logits": self.needs_full_logits,
            "reads_kl_pairs": self.reads_kl_pairs,
            "generates_own_pairs": self.generates_own_pairs,
            "chosen_source": self.chosen_source,
            "pairs_from_iterate": self.pairs_from_iterate,
            "reference_update": _qualname(self.reference_update),
            "batch_stats": _qualname(self.batch_stats),
            "initial_state": dict(self.initial_state),
            "description": self.description,
            "fn": _qualname(self.fn),
        }


@dataclass(frozen=True)
class LossInfo(_Decisions):
    """A built-in's entry in the index: :meth:`LossSpec.metadata`, the functions named (``module:qualname``)
    rather than imported. Planning, run_ids and ``oxbench losses`` read these fields alone."""

    name: str
    paradigm: str
    data: str
    needs_reference: bool
    defaults: dict[str, Any]
    paper: str
    version: int
    sft_source: str
    needs_value_model: bool
    updates_reference: bool
    needs_full_logits: bool
    reads_kl_pairs: bool
    generates_own_pairs: bool
    chosen_source: str
    pairs_from_iterate: bool
    reference_update: str | None
    batch_stats: str | None
    initial_state: dict[str, float]
    description: str
    fn: str

    def metadata(self) -> dict[str, Any]:
        """The live spec's :meth:`LossSpec.metadata`, key for key."""
        return {f.name: _copy(getattr(self, f.name)) for f in fields(self)}


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


def signature_defaults(fn: Callable) -> dict[str, Any]:
    """``fn``'s hyper-parameters with their defaults: every keyword parameter after the first (the
    :class:`LossInputs`) that has a default, in the signature's order; ``{}`` for a callable whose
    signature Python cannot read."""
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):
        return {}
    keywords = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p.default for p in params if p.kind in keywords and p.default is not p.empty}


def loss_name(module: str) -> str:
    """A built-in's name, its module's last part (``losses.dr_grpo`` -> ``dr_grpo``), as its entry point
    in ``pyproject.toml`` is named: each built-in writes ``NAME = loss_name(__name__)`` and uses ``NAME``
    for its spec and its error messages, so the name is written once (the file's)."""
    return module.rpartition(".")[2]


def _qualname(fn) -> str | None:
    if fn is None:
        return None
    module = inspect.getmodule(fn)
    return f"{module.__name__ if module else '?'}:{getattr(fn, '__qualname__', repr(fn))}"


_REGISTRY: dict[str, LossSpec] = {}
_ORIGIN: dict[str, str] = {}  # name -> where it came from (distribution or "register()")


def _did_you_mean(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


_SCANNED: dict[tuple[str, ...], dict[str, list]] = {}  # sys.path -> its entry points


def _entry_points() -> dict[str, list]:
    """name -> entry points declaring it (normally one). Scanning the installed distributions takes
    tens of milliseconds and a grid asks once per cell, so the scan is kept for as long as
    ``sys.path`` is unchanged (a path added later, e.g. a plugin's, is scanned afresh)."""
    key = tuple(sys.path)
    if key not in _SCANNED:
        found: dict[str, list] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            found.setdefault(ep.name, []).append(ep)
        _SCANNED.clear()
        _SCANNED[key] = found
    return {name: list(eps) for name, eps in _SCANNED[key].items()}


def _dist_name(ep) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "<unknown distribution>"


def check_signature(spec: LossSpec, origin: str = "register()") -> None:
    """``spec.fn`` must run on ``(inputs, **any_subset_of_defaults)``; a mismatch is a one-line error.

    The contract: hyper-parameters override ``defaults``, so ``spec.fn(inputs, beta=0.1)`` with the
    others omitted must work. Hence fn takes the :class:`LossInputs` as its first positional
    parameter, every key of ``defaults`` is a keyword parameter of fn with a default value, and fn
    has no other parameter without a default. (The built-ins leave ``defaults`` out: it is read from
    their signatures; ``tests/loss_algorithms/test_hparam_contract.py`` checks the two agree.) A
    callable whose signature Python cannot read is not checked.
    """
    try:
        sig = inspect.signature(spec.fn)
    except (TypeError, ValueError):
        return
    P = inspect.Parameter
    where = f"loss {spec.name!r} ({origin}): fn {getattr(spec.fn, '__qualname__', repr(spec.fn))}"
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.VAR_POSITIONAL):
        raise LossError(f"{where} must take the LossInputs as its first positional parameter")
    rest = [p for p in params[1:] if p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    required = [p.name for p in rest if p.default is P.empty]
    if required:
        raise LossError(
            f"{where} has parameters without a default value: {', '.join(required)}"
            " (give every hyper-parameter its value from defaults, e.g. beta: float = 0.1)"
        )
    keywords = {p.name for p in rest if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)}
    unknown = [k for k in spec.defaults if k not in keywords]
    if unknown:
        raise LossError(
            f"{where} has no keyword parameter with a default for defaults key(s) {', '.join(map(repr, unknown))}"
        )


def _check_hparam_type(loss: str, key: str, value: Any, default: Any) -> None:
    """An override has its default's kind: a bool for a bool, a finite number for a number, a string
    for a string (a ``None`` default takes anything)."""
    if default is None:
        return
    if isinstance(default, bool):
        ok, kind = isinstance(value, bool), "true or false"
    elif isinstance(default, (int, float)):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        kind = "a finite number"
    elif isinstance(default, str):
        ok, kind = isinstance(value, str), "a string"
    else:
        return
    if not ok:
        raise LossError(f"loss {loss!r}: hyper-parameter {key!r} must be {kind}, got {value!r}")


def _check_no_entry_point(name: str, origin: str) -> None:
    """A spec from ``origin`` other than a distribution may not take a name an entry point declares."""
    if origin.startswith("distribution "):
        return
    eps = _entry_points().get(name, [])
    if eps:
        raise LossError(f"duplicate loss {name!r}: from {origin} and from distribution {_dist_name(eps[0])}")


def register(spec: LossSpec, *, origin: str = "register()") -> LossSpec:
    """Add a spec. A second spec under the same name is an error naming both origins; so is a
    spec whose ``fn`` signature does not match its ``defaults`` (:func:`check_signature`)."""
    if not isinstance(spec, LossSpec):
        raise LossError(f"{origin}: expected a losses.LossSpec, got {type(spec).__name__}")
    check_signature(spec, origin)
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise LossError(f"duplicate loss {spec.name!r}: from {_ORIGIN[spec.name]} and from {origin}")
    _check_no_entry_point(spec.name, origin)  # a built-in or installed loss, imported or not
    _REGISTRY[spec.name] = spec
    _ORIGIN[spec.name] = origin
    return spec


def unregister(name: str) -> None:
    """Remove a spec added with :func:`register` (tests and notebooks)."""
    _REGISTRY.pop(name, None)
    _ORIGIN.pop(name, None)


def names() -> list[str]:
    """Every known loss name, sorted: registered ones and entry points (not imported)."""
    return sorted(set(_REGISTRY) | set(_entry_points()))


def _load_entry_point(name: str, eps: list) -> LossSpec:
    if len(eps) > 1:
        dists = " and ".join(f"{_dist_name(ep)} ({ep.value})" for ep in eps)
        raise LossError(f"duplicate loss {name!r}: declared by {dists}")
    ep = eps[0]
    origin = f"plugin {name!r} ({ep.value}, distribution {_dist_name(ep)})"
    try:
        spec = ep.load()
    except Exception as exc:  # a broken plugin breaks only the runs that use it
        raise LossError(f"{origin} failed to import: {type(exc).__name__}: {exc}") from exc
    if not isinstance(spec, LossSpec):
        raise LossError(f"{origin} is a {type(spec).__name__}, not a losses.LossSpec")
    if spec.name != name:
        raise LossError(f"{origin} declares a spec named {spec.name!r}")
    return register(spec, origin=f"distribution {_dist_name(ep)}")


def get(name: str) -> LossSpec:
    """The spec called ``name``, importing its entry point on first use."""
    if name in _REGISTRY:
        _check_no_entry_point(name, _ORIGIN[name])  # one installed after the spec was registered
        return _REGISTRY[name]
    eps = _entry_points().get(name)
    if not eps:
        raise LossError(f"unknown loss {name!r}{_did_you_mean(name, names())}")
    return _load_entry_point(name, eps)


def all_specs() -> list[LossSpec]:
    """Load every spec (``oxbench losses``). Raises on the first broken plugin."""
    return [get(n) for n in names()]


# ------------------------------------------------------------------ the index (planning without torch)

INDEX = Path(__file__).with_name("index.json")
_INDEX: dict[str, dict] = {}  # "entries": the current index's entries, read once
_INFO: dict[str, LossInfo] = {}


def sources_digest() -> str:
    """A hash of every module of this package: the index describes these sources and no others."""
    digest = hashlib.sha256()
    for path in sorted(INDEX.parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def builtin_names() -> list[str]:
    """The built-ins: names declared by exactly one entry point, into this package."""
    return sorted(
        n for n, eps in _entry_points().items() if len(eps) == 1 and eps[0].value.startswith("losses.")
    )


def build_index() -> dict[str, Any]:
    """The index of the built-ins from the live registry (so it imports every built-in, and torch):
    per loss, its entry point and :meth:`LossSpec.metadata`; and the digest of the sources it read."""
    eps = _entry_points()
    entries = {n: {"entry_point": eps[n][0].value, **get(n).metadata()} for n in builtin_names()}
    return {"generated_by": "python -m losses", "sources": sources_digest(), "losses": entries}


def render_index(index: dict[str, Any]) -> str:
    """The index as ``losses/index.json`` holds it."""
    return json.dumps(index, indent=1, ensure_ascii=False) + "\n"


def _index() -> dict[str, dict]:
    """The index's entries when it is current (written from these very sources), else none."""
    if "entries" not in _INDEX:
        entries: dict[str, dict] = {}
        try:
            index = json.loads(INDEX.read_text(encoding="utf-8"))
            if isinstance(index, dict) and index.get("sources") == sources_digest():
                entries = dict(index["losses"])
        except (OSError, ValueError, KeyError, TypeError):
            entries = {}
        _INDEX["entries"] = entries
    return _INDEX["entries"]


def info(name: str) -> LossSpec | LossInfo:
    """What planning needs to know about ``name``, without importing its loss when the index can say
    it: the index's entry when the index is current, ``name`` is not registered in this process and
    the one entry point declaring it is the one the index names. Otherwise the live spec (:func:`get`),
    which is also where an unknown or twice-declared name is an error."""
    entry = None if name in _REGISTRY else _index().get(name)
    if entry is None or [ep.value for ep in _entry_points().get(name, [])] != [entry["entry_point"]]:
        return get(name)
    if name not in _INFO:
        _INFO[name] = LossInfo(**{k: v for k, v in entry.items() if k != "entry_point"})
    return _INFO[name]


def all_info() -> list[LossSpec | LossInfo]:
    """Every loss as :func:`info` gives it (``oxbench losses``). Raises on the first broken plugin."""
    return [info(n) for n in names()]
