"""The built-in tasks as :class:`~oxbench.tasks.registry.TaskSpec`: ``arith`` (procedural, with its
out-of-distribution variant ``arith_ood``) and ``gsm8k`` (GSM8K-format files), both graded by
:func:`oxbench.tasks.grading.is_correct`, prompted by :func:`oxbench.text.formatting.format_prompt` and
rewarded by their graders: exactly what every run did before tasks were plugins. And ``countdown``
(:mod:`oxbench.tasks.countdown`, TinyZero's task): its own graders, prompt instruction and reward."""

from __future__ import annotations

import functools
from pathlib import Path

from oxbench.tasks import arith, countdown
from oxbench.tasks.errors import TaskError
from oxbench.tasks.grading import is_correct
from oxbench.tasks.registry import TaskSpec
from oxbench.text.formatting import PromptFormat, format_prompt

GRADERS = {mode: functools.partial(is_correct, mode=mode) for mode in ("strict", "flexible")}


def arith_rows(
    split: str, *, n: int | None, seed: int, task: dict, distinct: bool = True, local_only: bool = False
) -> list[dict]:
    """``arith`` (``task["name"] == "arith_ood"``: its out-of-distribution variant)."""
    variant = "ood" if task["name"] == "arith_ood" else "id"
    return arith.generate(
        split,
        n,
        seed=seed,
        n_ops=task.get("n_ops", 2),
        max_operand=task.get("max_operand", 30),
        variant=variant,
        distinct=distinct,
    )


def gsm8k_rows(
    split: str, *, n: int | None, seed: int, task: dict, distinct: bool = True, local_only: bool = False
) -> list[dict]:
    """GSM8K-format files: ``path`` is a directory holding ``train``/``test`` files, a Hub id, or the
    train file (then ``test_path`` is the test file). ``validation``: the last ``n`` problems of the train
    file (online prompts exclude them). ``local_only`` validates local files and skips Hub ids."""
    from oxbench.tasks.gsm8k import _looks_like_path, load_gsm8k

    if split == "confirm":
        raise TaskError(
            "eval.split: gsm8k has no locked confirmation split (its test file is public); hold back "
            "problems of your own as task.test_path of a confirmatory grid"
        )
    if split == "validation":  # the last n problems of the train file (online prompts exclude them)
        rows = gsm8k_rows("train", n=None, seed=0, task=task, local_only=local_only)
        return [{**r, "id": f"validation-{r['id']}"} for r in rows[len(rows) - min(n or 0, len(rows)) :]]
    source = task.get("test_path") if split == "test" and task.get("test_path") else task["path"]
    if Path(source).is_file() and split == "test" and not task.get("test_path"):
        raise TaskError(f"task.path {source} is a single file: give task.test_path for the test split")
    if local_only and not Path(source).exists() and not _looks_like_path(source):
        return []
    return load_gsm8k(source, split=split, limit=n)


def gsm8k_files(task: dict) -> dict[str, Path]:
    """The local files GSM8K's rows come from, by split: none for a Hub id."""
    from oxbench.tasks.gsm8k import split_file

    if not task.get("path"):
        return {}
    out = {}
    for split in ("train", "test"):
        source = task.get("test_path") if split == "test" and task.get("test_path") else task["path"]
        path = split_file(Path(source), split)
        if path is not None:
            out[split] = path
    return out


def countdown_rows(
    split: str, *, n: int | None, seed: int, task: dict, distinct: bool = True, local_only: bool = False
) -> list[dict]:
    """``countdown``: :func:`oxbench.tasks.countdown.generate` with ``task.options``."""
    return countdown.generate(split, n, seed=seed, distinct=distinct, **countdown.options(task))


#: the instruction a chat model gets after the question (a tokenizer without a chat template: the question)
COUNTDOWN_INSTRUCTION = (
    "Show your steps, one operation per line, then give the equation in <answer> </answer> tags, "
    "for example <answer>(1 + 2) / 3</answer>."
)


def _chance(task: dict, test_rows: list[dict]) -> float:
    from oxbench.tasks import chance_accuracy

    return chance_accuracy(task, test_rows)


BUILTINS = {
    "arith": TaskSpec(
        name="arith",
        load=arith_rows,
        graders=GRADERS,
        splits=("train", "test", "validation", "confirm"),
        prompt=format_prompt,
        verify=arith.working_is_correct,
        chance=_chance,
        data_files=lambda task: {},
        ood=lambda task: {**task, "name": "arith_ood"},
        description="procedural arithmetic word problems in GSM8K's format (n_ops, max_operand)",
    ),
    "gsm8k": TaskSpec(
        name="gsm8k",
        load=gsm8k_rows,
        graders=GRADERS,
        splits=("train", "test", "validation"),
        prompt=format_prompt,
        chance=_chance,
        data_files=gsm8k_files,
        validation_in_train=True,
        description="GSM8K-format files (task.path: a directory, a train file with test_path, a Hub id)",
    ),
    "countdown": TaskSpec(
        name="countdown",
        load=countdown_rows,
        graders=countdown.GRADERS,
        splits=("train", "test", "validation", "confirm"),
        prompt=PromptFormat(instruction=COUNTDOWN_INSTRUCTION),
        rewards={"countdown": countdown.reward},
        metrics=countdown.metrics,
        chance=countdown.chance,
        data_files=lambda task: {},
        description="TinyZero's Countdown: reach a target with + - * / over given numbers "
        "(options: n_numbers, max_number, max_target)",
    ),
}
