"""The task registry: every task, built-in or third-party, is a :class:`TaskSpec`; every reward function
a grid can name besides a task's own is a :class:`RewardSpec`.

Third-party tasks are published under the ``oxbench.tasks`` entry-point group, reward functions under
``oxbench.rewards`` (or registered by ``--plugin MODULE``, :mod:`oxbench.plugins`), as losses are under
``oxbench.losses``. Entry points are read lazily: :func:`task_names` lists them without importing
anything, :func:`get_task` imports exactly one module. The built-ins (``arith``, ``gsm8k``:
:mod:`oxbench.tasks.builtin`) are registered here, not as entry points.

The rest of oxbench asks a task's spec, never its name: the rows of a split (:func:`load_rows`), the
prompt, the graders, the reward functions, the extra evaluation metrics and difficulty bins.
"""

from __future__ import annotations

import difflib
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from oxbench.tasks.errors import TaskError
from oxbench.text.formatting import PromptFormat

TASK_GROUP = "oxbench.tasks"
REWARD_GROUP = "oxbench.rewards"
SPLITS = ("train", "test", "validation", "confirm")
GRADER_MODES = ("strict", "flexible")  # what data.self_play_grader, eval.sampled_grader, ... name
#: the reward functions every task has, from its graders (``online.reward_grader``'s values)
GRADER_REWARDS = ("strict", "flexible", "random", "shuffled-strict", "shuffled-flexible")


#: the evaluator's own metric names (and prefixes), which a task's ``metrics`` may not take
RESERVED_METRICS = ("accuracy", "accuracy_flexible", "accuracy_verified", "accuracy_verified_flexible")
RESERVED_PREFIXES = (
    "chance",
    "ood_",
    "n_",
    "avg_at_",
    "best_at_",
    "worst_at_",
    "lmeval_",
    "sampled_",
    "base_",
)
RESERVED_PREFIXES += ("samples_", "final_", "correct_")


def reserved_metric(name: str) -> bool:
    return name in RESERVED_METRICS or name.startswith(RESERVED_PREFIXES)


@dataclass(frozen=True)
class TaskSpec:
    """What oxbench needs to know about one task.

    name:        registry key, as grids write it (``task: {name: countdown}``).
    load:        ``load(split, *, n, seed, task) -> list[dict]``: the rows of one split, each
                 ``{"question": str, "answer": str}`` (an ``id`` and any other fields are kept; a missing
                 ``id`` becomes ``<name>-<split>-<i>``). ``n``: how many the run asks for (None: all; rows
                 past ``n`` are dropped); ``seed``: 0 except for pre-training draws; ``task``: the run's
                 ``task`` settings (``path``, ``test_path``, ``options``) as a dict.
    graders:     ``{"strict": fn, "flexible": fn}``, ``fn(completion, answer) -> bool``. ``strict`` is
                 the graded one (``accuracy``); ``flexible`` (``accuracy_flexible``) defaults to it.
    splits:      the splits ``load`` has: ``train`` and ``test``, and ``validation`` (learning curves,
                 ``eval.split: validation``) and ``confirm`` (a locked confirmation split) where it has them.
    prompt:      ``prompt(tokenizer, question) -> str``; :class:`~oxbench.text.formatting.PromptFormat`
                 (the tokenizer's chat template where it has one, with the task's instruction).
    rewards:     reward functions by name, in TRL's ``reward_funcs`` shape:
                 ``fn(completions, **columns) -> list[float | None]`` (:mod:`oxbench.tasks.rewards`).
    metrics:     ``metrics(rows, completions) -> {name: float | None}``: evaluation metrics of the greedy
                 completions of the test rows, beside accuracy, pass@k and the rest.
    bins:        difficulty bins ``{name: (lo, hi)}`` of the base's avg@k, beside IsoCompute's
                 (``data.subset`` may name them).
    verify:      ``verify(completion, answer) -> bool``: whether the working is right too
                 (``accuracy_verified``); None where it cannot be checked.
    chance:      ``chance(task, test_rows) -> float``: the accuracy of guessing; None: not known.
    data_files:  ``data_files(task) -> {split: Path}``: the local files a record fingerprints (default: the
                 files ``task.path`` and ``task.test_path`` name).
    ood:         ``ood(task) -> task``: the out-of-distribution variant evaluated beside (``arith``).
    validation_in_train: the validation rows are the end of the train split (GSM8K's file), so a run
                 evaluated on them trains on the rest; False: a split of their own.
    description: one line for ``oxbench tasks``.
    """

    name: str
    load: Callable[..., list[dict]]
    graders: Mapping[str, Callable[[str, str], bool]]
    splits: tuple[str, ...] = ("train", "test")
    prompt: Callable[[Any, str], str] = PromptFormat()
    rewards: Mapping[str, Callable[..., list]] = field(default_factory=dict)
    metrics: Callable[[list[dict], list[str]], dict] | None = None
    bins: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    verify: Callable[[str, str], bool] | None = None
    chance: Callable[[dict, list[dict]], float | None] | None = None
    data_files: Callable[[dict], dict[str, Path]] | None = None
    ood: Callable[[dict], dict] | None = None
    validation_in_train: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        where = f"task {self.name!r}"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise TaskError(f"{where}: name must be an identifier")
        for hook in ("load", "prompt", "metrics", "verify", "chance", "data_files", "ood"):
            value = getattr(self, hook)
            if value is not None and not callable(value):
                raise TaskError(f"{where}: {hook} is not callable")
        if "strict" not in self.graders or not all(callable(g) for g in self.graders.values()):
            raise TaskError(f"{where}: graders must map 'strict' (and optionally 'flexible') to functions")
        unknown = [m for m in self.graders if m not in GRADER_MODES]
        if unknown:
            raise TaskError(f"{where}: grader {unknown[0]!r} is not one of {', '.join(GRADER_MODES)}")
        bad = [s for s in self.splits if s not in SPLITS]
        if bad or not {"train", "test"} <= set(self.splits):
            raise TaskError(f"{where}: splits must hold train and test, from {', '.join(SPLITS)}")
        _check_rewards(where, self.rewards)
        _check_bins(where, self.bins)

    def grader(self, mode: str = "strict") -> Callable[[str, str], bool]:
        """The grader of ``mode`` (``flexible`` falls back to ``strict`` where the task has one grader)."""
        if mode not in GRADER_MODES:
            raise TaskError(f"task {self.name!r}: unknown grader {mode!r}; expected one of {GRADER_MODES}")
        return self.graders.get(mode) or self.graders["strict"]

    def grade(self, completion: str, answer: str, mode: str = "strict") -> bool:
        return bool(self.grader(mode)(completion, answer))

    def reward_names(self) -> list[str]:
        """Every reward a run of this task can name: the graders' (:data:`GRADER_REWARDS`), the task's
        own, and the registered reward functions."""
        return [*GRADER_REWARDS, *self.rewards, *(n for n in reward_names() if n not in self.rewards)]


@dataclass(frozen=True)
class RewardSpec:
    """A reward function a grid can name in ``online.rewards`` whatever its task.

    name: registry key (``online.rewards: [{name: NAME, weight: 0.5}]``).
    fn:   TRL's ``reward_funcs`` shape: ``fn(completions, **columns) -> list[float | None]``, called once
          per prompt's group of completions with ``prompts`` and each column of the problem's row
          (``answer``, ``question``, ``id``, ...) as lists as long as ``completions``. None: no reward
          for that completion (it adds 0 to the weighted sum and is left out of the logged mean).
    """

    name: str
    fn: Callable[..., list]
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise TaskError(f"reward {self.name!r}: name must be an identifier")
        if self.name in GRADER_REWARDS:
            raise TaskError(f"reward {self.name!r}: the name is a grader's ({', '.join(GRADER_REWARDS)})")
        if not callable(self.fn):
            raise TaskError(f"reward {self.name!r}: fn is not callable")


def _check_rewards(where: str, rewards: Mapping) -> None:
    for name, fn in rewards.items():
        if not isinstance(name, str) or not name.isidentifier() or name in GRADER_REWARDS:
            raise TaskError(f"{where}: reward name {name!r} must be an identifier and not a grader's")
        if not callable(fn):
            raise TaskError(f"{where}: reward {name!r} is not callable")


def _check_bins(where: str, bins: Mapping) -> None:
    for name, edges in bins.items():
        ok = isinstance(edges, tuple | list) and len(edges) == 2
        ok = ok and all(isinstance(e, int | float) and math.isfinite(e) for e in edges)
        if not (ok and 0 <= edges[0] <= edges[1] <= 1):
            raise TaskError(f"{where}: bin {name!r} must be (lo, hi) with 0 <= lo <= hi <= 1, got {edges!r}")


# --------------------------------------------------------------------------------------- the registry

_TASKS: dict[str, TaskSpec] = {}
_REWARDS: dict[str, RewardSpec] = {}
_ORIGIN: dict[tuple[str, str], str] = {}  # (kind, name) -> where it came from
_SCANNED: dict[tuple, dict[str, list]] = {}  # (group, sys.path) -> name -> entry points
_KINDS = {"task": (TASK_GROUP, _TASKS, TaskSpec), "reward": (REWARD_GROUP, _REWARDS, RewardSpec)}


def _builtins() -> dict[str, TaskSpec]:
    from oxbench.tasks.builtin import BUILTINS

    return BUILTINS


def _entry_points(group: str) -> dict[str, list]:
    """name -> the entry points declaring it, scanned once per ``sys.path`` (as the loss registry does)."""
    key = (group, tuple(sys.path))
    if key not in _SCANNED:
        found: dict[str, list] = {}
        for ep in entry_points(group=group):
            found.setdefault(ep.name, []).append(ep)
        _SCANNED[key] = found
    return _SCANNED[key]


def _did_you_mean(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(choices))})"


def register(spec: TaskSpec | RewardSpec, *, origin: str = "register()") -> TaskSpec | RewardSpec:
    """Add a task or reward spec; a second spec under a taken name is an error naming both origins."""
    kind = "task" if isinstance(spec, TaskSpec) else "reward" if isinstance(spec, RewardSpec) else None
    if kind is None:
        raise TaskError(f"{origin}: expected a TaskSpec or RewardSpec, got {type(spec).__name__}")
    group, table, _ = _KINDS[kind]
    taken = spec.name in table and table[spec.name] is not spec
    if taken or (kind == "task" and spec.name in _builtins() and _builtins()[spec.name] is not spec):
        first = _ORIGIN.get((kind, spec.name), "oxbench (built-in)")
        raise TaskError(f"duplicate {kind} {spec.name!r}: from {first} and from {origin}")
    eps = _entry_points(group).get(spec.name, [])
    if eps and not origin.startswith("distribution "):
        raise TaskError(
            f"duplicate {kind} {spec.name!r}: from {origin} and from distribution {_dist(eps[0])}"
        )
    table[spec.name] = spec
    _ORIGIN[(kind, spec.name)] = origin
    return spec


def unregister(name: str, kind: str = "task") -> None:
    """Remove a spec added with :func:`register` (tests and notebooks)."""
    _KINDS[kind][1].pop(name, None)
    _ORIGIN.pop((kind, name), None)


def _dist(ep) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "<unknown distribution>"


def _load(kind: str, name: str):
    group, table, cls = _KINDS[kind]
    if name in table:
        return table[name]
    eps = _entry_points(group).get(name, [])
    if len(eps) > 1:
        raise TaskError(f"duplicate {kind} {name!r}: declared by {' and '.join(_dist(ep) for ep in eps)}")
    ep = eps[0]
    origin = f"plugin {name!r} ({ep.value}, distribution {_dist(ep)})"
    try:
        spec = ep.load()
    except Exception as exc:  # a broken plugin breaks only the runs that use it
        raise TaskError(f"{origin} failed to import: {type(exc).__name__}: {exc}") from exc
    if not isinstance(spec, cls):
        raise TaskError(f"{origin} is a {type(spec).__name__}, not an oxbench.tasks.{cls.__name__}")
    if spec.name != name:
        raise TaskError(f"{origin} declares a spec named {spec.name!r}")
    return register(spec, origin=f"distribution {_dist(ep)}")


def task_names() -> list[str]:
    """Every task a grid can name, sorted: the built-ins, registered tasks and entry points (not imported)."""
    return sorted(set(_builtins()) | set(_TASKS) | set(_entry_points(TASK_GROUP)))


def get_task(name: str) -> TaskSpec:
    """The spec of task ``name`` (``arith_ood``: arith's), importing its entry point on first use."""
    builtins = _builtins()
    name = "arith" if name == "arith_ood" else name
    if name in builtins:
        return builtins[name]
    if name not in _TASKS and name not in _entry_points(TASK_GROUP):
        raise TaskError(f"unknown task {name!r}{_did_you_mean(name, task_names())}")
    return _load("task", name)


def all_tasks() -> list[TaskSpec]:
    """Every task's spec (``oxbench tasks``); raises on the first broken plugin."""
    return [get_task(n) for n in task_names()]


def reward_names() -> list[str]:
    """The registered reward functions (``oxbench.rewards`` entry points and ``--plugin`` modules)."""
    return sorted(set(_REWARDS) | set(_entry_points(REWARD_GROUP)))


def get_reward(name: str) -> RewardSpec:
    if name not in _REWARDS and name not in _entry_points(REWARD_GROUP):
        raise TaskError(f"unknown reward {name!r}{_did_you_mean(name, reward_names())}")
    return _load("reward", name)


def origin(name: str) -> str:
    """Where a task came from (``oxbench tasks``)."""
    return "oxbench (built-in)" if name in _builtins() else _ORIGIN.get(("task", name), "entry point")


def load_rows(spec: TaskSpec, task: dict, split: str, *, n: int | None, seed: int) -> list[dict]:
    """A plugin task's rows of ``split``: its loader's, checked (each a dict with string ``question`` and
    ``answer``; ``id`` filled in) and cut to ``n``. Each problem is one line naming the task."""
    if split not in spec.splits:
        raise TaskError(f"task {spec.name!r} has no {split!r} split (it has: {', '.join(spec.splits)})")
    try:
        rows = spec.load(split, n=n, seed=seed, task=task)
    except TaskError:
        raise
    except Exception as exc:
        why = (str(exc).splitlines() or [""])[0][:200]
        raise TaskError(f"task {spec.name!r}: loading {split!r} raised {type(exc).__name__}: {why}") from exc
    if not isinstance(rows, list | tuple):
        raise TaskError(f"task {spec.name!r}: load({split!r}) returned {type(rows).__name__}, not a list")
    out = []
    for i, row in enumerate(rows[:n] if n is not None else rows):
        where = f"task {spec.name!r}: split {split!r}: row {i + 1}"
        if not isinstance(row, dict):
            raise TaskError(
                f"{where}: expected a dict with 'question' and 'answer', got {type(row).__name__}"
            )
        for key in ("question", "answer"):
            if not isinstance(row.get(key), str):
                raise TaskError(f"{where}: field {key!r} must be a string, got {type(row.get(key)).__name__}")
        out.append({**row, "id": str(row["id"]) if row.get("id") is not None else f"{spec.name}-{split}-{i}"})
    return out


def default_data_files(task: dict) -> dict[str, Path]:
    """The files ``task.path`` and ``task.test_path`` name, where they are files: what a plugin task's
    record fingerprints unless its spec says otherwise."""
    paths = {"train": task.get("path"), "test": task.get("test_path")}
    return {split: Path(p) for split, p in paths.items() if p and Path(p).is_file()}
