"""The reward an online run's rollouts get (``online.reward_grader``): the grader's verdict, or one of
two controls that carry no signal about correctness: a random reward, and the grader's rewards shuffled
within each prompt's group.

A reward function takes one completion and its problem's answer and returns a float. A *group* reward
(``group_wise = True``) takes a prompt's whole group of completions and returns one float each; the
rollout code calls it once per group."""

from __future__ import annotations

import functools
import hashlib
import random

from oxbench.tasks.grading import is_correct
from oxbench.tasks.registry import TaskSpec

BUILTIN_TASKS = ("arith", "gsm8k")  # graded by is_correct, rewarded as before tasks were plugins


def random_reward(completion: str, answer: str) -> float:
    """1 or 0 from a hash of the completion and the problem: as often right as wrong, unrelated to
    correctness, the same for the same text (the random-reward control)."""
    return float(hashlib.sha256(f"{answer}\x00{completion}".encode()).digest()[0] & 1)


class ShuffledReward:
    """The grader's rewards of one group, permuted within the group (the shuffled-reward control).

    Each group keeps its number of correct completions, so its reward mean and spread, and with them
    the size of its advantages and of the policy's step, are the real reward's; which completion gets
    which reward is unrelated to what it says. The permutation is drawn from a hash of the group's texts
    and answer, so the same group always gets the same rewards."""

    group_wise = True

    def __init__(self, mode: str, grade=None):
        self.mode, self.grade = mode, grade  # grade(completion, answer): a plugin task's grader

    def __call__(self, completions: list[str], answer: str) -> list[float]:
        if self.grade is None:
            rewards = [float(is_correct(c, answer, mode=self.mode)) for c in completions]
        else:
            rewards = [float(self.grade(c, answer)) for c in completions]
        key = hashlib.sha256("\x00".join([answer, *completions]).encode()).hexdigest()
        random.Random(key).shuffle(rewards)
        return rewards


def reward_function(grader: str, task: TaskSpec | None = None):
    """The reward of ``online.reward_grader``: a grader's verdict (the task's graders; the built-ins' are
    :func:`~oxbench.tasks.grading.is_correct`), or a control built on it."""
    if grader == "random":
        return random_reward
    plugin = task is not None and task.name not in BUILTIN_TASKS
    if grader.startswith("shuffled-"):
        mode = grader.removeprefix("shuffled-")
        return ShuffledReward(mode, task.grader(mode)) if plugin else ShuffledReward(mode)
    return task.grader(grader) if plugin else functools.partial(is_correct, mode=grader)


def group_rewards(reward_fn, completions: list[str], answer: str) -> list[float]:
    """One float per completion of a prompt's group, from a per-completion or a group reward."""
    if getattr(reward_fn, "group_wise", False):
        return [float(r) for r in reward_fn(completions, answer)]
    return [float(reward_fn(c, answer)) for c in completions]


# ------------------------------------------------------------------ reward functions in TRL's shape

SKIPPED_COLUMNS = ("completions", "prompts")  # a row's columns of these names are not passed on


def trl_columns(row: dict, n: int) -> dict[str, list]:
    """The keyword arguments TRL gives a reward function for ``n`` completions of one problem: ``prompts``
    (the question) and each column of the problem's row (``answer``, ``question``, ``id``, ...), each a
    list of ``n``."""
    columns = {k: [v] * n for k, v in row.items() if k not in SKIPPED_COLUMNS}
    return {"prompts": [row.get("question")] * n, **columns}


def call_reward(name: str, fn, completions: list[str], row: dict) -> list[float | None]:
    """``fn(completions=..., **columns)``, checked: one float (or None: no reward) per completion."""
    got = fn(completions=list(completions), **trl_columns(row, len(completions)))
    if not isinstance(got, list | tuple) or len(got) != len(completions):
        size = len(got) if isinstance(got, list | tuple) else type(got).__name__
        raise ValueError(f"reward {name!r} returned {size} for {len(completions)} completions")
    out = []
    for value in got:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"reward {name!r} returned {value!r}, not a number or None")
        out.append(None if value is None else float(value))
    return out
