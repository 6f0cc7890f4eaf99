"""Tasks: the procedural ``arith`` task (in- and out-of-distribution, and its harder variant), GSM8K-format
files, the general-domain families of :mod:`oxbench.tasks.general`, and plugin tasks: every task is a
:class:`TaskSpec` of the registry (:mod:`oxbench.tasks.registry`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from oxbench.tasks.registry import (
    RewardSpec,
    TaskSpec,
    default_data_files,
    get_reward,
    get_task,
    load_rows,
    reward_names,
    task_names,
)

#: the built-ins, whose loaders take every option (``distinct``: pre-training draws with repetition)
FULL_LOADERS = ("arith", "arith_ood", "gsm8k", "countdown")

__all__ = ["RewardSpec", "TaskSpec", "get_reward", "get_task", "reward_names", "task_names"]


def load_task_split(
    task: dict,
    split: str,
    *,
    n: int | None = None,
    seed: int = 0,
    distinct: bool = True,
    local_only: bool = False,
) -> list[dict]:
    """Rows ``{"question", "answer", "id"}`` of one split of the task described by ``task``.

    ``task`` is a dict (``TaskConfig.model_dump()``): ``{"name": "arith", "n_ops", "max_operand"}``,
    ``{"name": "arith_ood", ...}``, ``{"name": "gsm8k", "path": ..., "test_path": ...}`` (``path`` is a
    directory holding ``train``/``test`` files, a Hub id, or the train file; then ``test_path`` is the
    test file) or a plugin task's (:mod:`oxbench.tasks.registry`). ``local_only`` validates local files
    and skips Hub ids (no network); ``distinct=False`` draws with repetition (pre-training: ``arith``,
    ``countdown``).
    """
    spec = get_task(task["name"])
    if task["name"] in FULL_LOADERS:
        return spec.load(split, n=n, seed=seed, task=task, distinct=distinct, local_only=local_only)
    return load_rows(spec, task, split, n=n, seed=seed)


def data_files(task: dict) -> dict[str, Path]:
    """The local files a task's rows come from, by split (``train``, ``test``): what a record
    fingerprints. None for generated tasks (arith) and Hub ids."""
    spec = get_task(task["name"])
    return (spec.data_files or default_data_files)(task)


HARD_EXTRA_OPS = 2  # the harder in-domain task (the MATH analogue): this many more operations per problem


def hard_task(task: dict) -> dict:
    """The harder in-domain variant of an ``arith`` task: the same template, :data:`HARD_EXTRA_OPS` more
    operations (longer working, larger answers)."""
    if task["name"] != "arith":
        raise ValueError(f"the harder in-domain task is built from 'arith', not {task['name']!r}")
    return {**task, "n_ops": task.get("n_ops", 2) + HARD_EXTRA_OPS}


def verify_working(task: dict, completion: str, answer: str) -> bool | None:
    """Whether every line of a completion's working is right, for tasks whose working can be
    checked (``arith``: its spec's ``verify``); ``None`` for the others (GSM8K's prose cannot be)."""
    verify = get_task(task["name"]).verify
    return None if verify is None else verify(completion, answer)


def chance_accuracy(task: dict, test_rows: list[dict], *, n_train: int = 5000) -> float:
    """The accuracy of guessing: each test answer drawn from the training answers' distribution,
    ``sum_a p_train(a) * p_test(a)`` (``n_train`` training rows, or the whole file if smaller)."""
    from oxbench.tasks.grading import reference_answer

    train = load_task_split(task, "train", n=n_train, seed=0, distinct=False)  # draws, with repetition
    counts = Counter(reference_answer(r["answer"]) for r in train)
    total = sum(counts.values())
    hits = sum(counts[reference_answer(r["answer"])] / total for r in test_rows)
    return hits / max(1, len(test_rows))
