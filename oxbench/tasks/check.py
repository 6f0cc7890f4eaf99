"""The contract every task keeps, as checks a task's author runs before using it: ``oxbench tasks check
MODULE:spec`` (or a registered name). Each failure is one line naming its rule.

* ``splits``: every declared split loads (its first :data:`N_ROWS` rows): rows with string ``question``
  and ``answer``, unique ids; the train and test splits share no question;
* ``deterministic``: two loads of a split give the same rows;
* ``graders``: each grader passes every test row's gold answer and fails an empty completion;
* ``prompt``: the prompt holds the question, for a tokenizer without a chat template (the tiny models')
  and for one with;
* ``rewards``: each of the task's reward functions, in TRL's shape, gives one finite float (or None)
  per completion (of a gold answer and an empty one);
* ``metrics``: the task's evaluation metrics of the gold answers are finite numbers (or None) under
  names the evaluator does not write.

No model is trained: a task that keeps the contract runs every method (``tests/test_task_plugins.py``).
"""

from __future__ import annotations

import importlib
import math

from oxbench.tasks.builtin import BUILTINS
from oxbench.tasks.errors import TaskError
from oxbench.tasks.registry import TaskSpec, get_task, load_rows, reserved_metric
from oxbench.tasks.rewards import call_reward

N_ROWS = 200
TASK = {"path": None, "test_path": None, "options": {}}  # a task's settings when none are given


def _rows(spec: TaskSpec, split: str, n: int = N_ROWS, task: dict | None = None) -> list[dict]:
    """The first ``n`` rows of ``split``, through the loader a run uses (a spec not registered: its own)."""
    from oxbench.tasks import load_task_split

    settings = {**TASK, **(task or {}), "name": spec.name}
    if spec.name in BUILTINS:
        return load_task_split(settings, split, n=n, seed=0)
    return load_rows(spec, settings, split, n=n, seed=0)


def rule_splits(spec: TaskSpec, task: dict) -> str | None:
    for split in spec.splits:
        if split == "confirm":
            continue
        rows = _rows(spec, split, task=task)
        if not rows:
            return f"split {split!r} has no rows"
        ids = [r["id"] for r in rows]
        if len(set(ids)) != len(ids):
            return f"split {split!r} repeats an id ({next(i for i in ids if ids.count(i) > 1)!r})"
    both = {r["question"] for r in _rows(spec, "train", task=task)} & {
        r["question"] for r in _rows(spec, "test", task=task)
    }
    return f"the train and test splits share {len(both)} question(s), e.g. {min(both)!r}" if both else None


def rule_deterministic(spec: TaskSpec, task: dict) -> str | None:
    first, second = _rows(spec, "test", 20, task=task), _rows(spec, "test", 20, task=task)
    return None if first == second else "two loads of the test split gave different rows"


def rule_graders(spec: TaskSpec, task: dict) -> str | None:
    rows = _rows(spec, "test", 20, task=task)
    for mode in spec.graders:
        wrong = [r["id"] for r in rows if not spec.grade(r["answer"], r["answer"], mode)]
        if wrong:
            return f"grader {mode!r} fails the gold answer of {len(wrong)} test row(s), e.g. {wrong[0]!r}"
        if any(spec.grade("", r["answer"], mode) for r in rows):
            return f"grader {mode!r} passes an empty completion"
    return None


class _ChatTokenizer:
    """A tokenizer with a chat template: each message's content, in order."""

    chat_template = "(each message's content)"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "".join(f"<{m['role']}>{m['content']}\n" for m in messages) + "<assistant>"


class _PlainTokenizer:
    chat_template = None


def rule_prompt(spec: TaskSpec, task: dict) -> str | None:
    question = _rows(spec, "test", 1, task=task)[0]["question"]
    for kind, tok in (("plain", _PlainTokenizer()), ("chat", _ChatTokenizer())):
        text = spec.prompt(tok, question)
        if not isinstance(text, str) or question not in text:
            return f"the {kind} prompt does not hold the question: {str(text)[:120]!r}"
    return None


def rule_rewards(spec: TaskSpec, task: dict) -> str | None:
    row = _rows(spec, "test", 1, task=task)[0]
    for name, fn in spec.rewards.items():
        got = call_reward(name, fn, [row["answer"], ""], row)
        bad = [v for v in got if v is not None and not math.isfinite(v)]
        if bad:
            return f"reward {name!r} gave {bad[0]}"
    return None


def rule_metrics(spec: TaskSpec, task: dict) -> str | None:
    if spec.metrics is None:
        return None
    rows = _rows(spec, "test", 20, task=task)
    out = spec.metrics(rows, [r["answer"] for r in rows])
    if not isinstance(out, dict):
        return f"metrics returned {type(out).__name__}, not a dict"
    for name, value in out.items():
        if not isinstance(name, str) or reserved_metric(name):
            return f"metric {name!r} is a name the evaluator writes"
        ok = value is None or (isinstance(value, int | float) and math.isfinite(value))
        if not ok:
            return f"metric {name!r} is {value!r}, not a finite number or None"
    return None


RULES = {
    "splits": rule_splits,
    "deterministic": rule_deterministic,
    "graders": rule_graders,
    "prompt": rule_prompt,
    "rewards": rule_rewards,
    "metrics": rule_metrics,
}


def check(spec: TaskSpec, rules=tuple(RULES), task: dict | None = None) -> list[str]:
    """One line per broken rule (``"<rule>: <why>"``); empty when the task keeps the contract. ``task``:
    the settings its loader reads (``path``, ``test_path``, ``options``). A rule that raises is broken
    with the exception as its reason."""
    failures = []
    for name in rules:
        try:
            why = RULES[name](spec, task or {})
        except Exception as exc:
            why = f"raised {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        if why:
            failures.append(f"{name}: {why}")
    return failures


def load_spec(target: str) -> TaskSpec:
    """A spec from ``MODULE:ATTR`` (imported like a plugin) or a registered name."""
    if ":" not in target:
        return get_task(target)
    module, _, attr = target.partition(":")
    spec = getattr(importlib.import_module(module), attr)
    if not isinstance(spec, TaskSpec):
        raise TaskError(f"{target} is a {type(spec).__name__}, not an oxbench.tasks.TaskSpec")
    return spec
