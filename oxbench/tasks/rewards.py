"""The reward an online run's rollouts get (``online.reward_grader``): the grader's verdict, or one of
two controls that carry no signal about correctness: a random reward, and the grader's rewards shuffled
within each prompt's group.

A reward function takes one completion and its problem's answer and returns a float. A *group* reward
(``group_wise = True``) takes a prompt's whole group of completions and returns one float each; the
rollout code calls it once per group."""

from __future__ import annotations

import dataclasses
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

# a row's columns of these names are not passed on: oxbench gives the arguments of these names itself
SKIPPED_COLUMNS = ("completions", "prompts", "completion_ids", "trainer_state")
# an online prompt of your own (data.path: oxbench.data.formats.prompt_rows) keeps, under this key, what
# its reward functions get: the file's prompt, whether it is conversational, and the row's other columns
FILE_ROW = "file_row"


def trl_columns(row: dict, n: int) -> dict[str, list]:
    """The keyword arguments TRL gives a reward function for ``n`` completions of one problem: ``prompts``
    (the question; a data file's prompt as the file has it) and each column of the problem's row
    (``answer``, ``question``, ``id``, ...; a data file's row: every column but its prompt), each a list
    of ``n``."""
    if FILE_ROW in row:
        own = row[FILE_ROW]
        columns = {k: [v] * n for k, v in own["columns"].items() if k not in SKIPPED_COLUMNS}
        return {"prompts": [own["prompt"]] * n, **columns}
    columns = {k: [v] * n for k, v in row.items() if k not in SKIPPED_COLUMNS}
    return {"prompts": [row.get("question")] * n, **columns}


def trl_completions(row: dict, completions: list[str]) -> list:
    """The completions as TRL gives them to a reward function: the texts; for a conversational prompt of
    a data file, each one assistant message (its content after a final assistant message's, which the
    completion continues)."""
    own = row.get(FILE_ROW)
    if own is None or not own["conversational"]:
        return list(completions)
    last = own["prompt"][-1]
    start = last["content"] if last["role"] == "assistant" else ""
    return [[{"role": "assistant", "content": start + c}] for c in completions]


@dataclasses.dataclass(frozen=True)
class TrainerState:
    """What TRL's ``trainer_state`` argument gives a reward function, as far as a rollout knows it:
    ``global_step``, the optimiser steps the policy that sampled the completions had taken (its
    version; 0 before the first step; -1 where no policy version is known, as in ``oxbench tasks
    check``)."""

    global_step: int = -1


def call_reward(
    name: str,
    fn,
    completions: list[str],
    row: dict,
    *,
    ids: list | None = None,
    state: TrainerState | None = None,
) -> list[float | None]:
    """``fn(completions=..., completion_ids=..., trainer_state=..., **columns)`` as TRL's ``GRPOTrainer``
    calls a reward function, checked: one float (or None: no reward) per completion. ``ids``: each
    completion's token ids (TRL's ``completion_ids``; None: not known, an empty list each)."""
    extra = {
        "completion_ids": [list(i) for i in ids] if ids is not None else [[] for _ in completions],
        "trainer_state": state or TrainerState(),
    }
    got = fn(completions=trl_completions(row, completions), **extra, **trl_columns(row, len(completions)))
    if not isinstance(got, list | tuple) or len(got) != len(completions):
        size = len(got) if isinstance(got, list | tuple) else type(got).__name__
        raise ValueError(f"reward {name!r} returned {size} for {len(completions)} completions")
    out = []
    for value in got:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"reward {name!r} returned {value!r}, not a number or None")
        out.append(None if value is None else float(value))
    return out


class GraderReward:
    """A grader's reward (``strict``, ``shuffled-flexible``, ...: :func:`reward_function`) in TRL's shape:
    each completion (a conversational one's message text) graded against the ``answer`` column."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, completions: list, answer: list, **columns) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return group_rewards(self.fn, texts, str(answer[0]))


class WeightedRewards:
    """``online.rewards``: several reward functions, each with a weight; a completion's reward is the
    weighted sum (a None counts 0, as TRL's ``nansum``). :meth:`parts` also gives each function's values,
    which the rollouts log as ``reward/<name>``. Called once per prompt's group (group-wise)."""

    group_wise = True

    def __init__(self, terms: list[tuple[str, object, float]]):
        self.terms = terms  # (name, fn in TRL's shape, weight)

    def parts(self, completions: list[str], row: dict, **given) -> tuple[list[float], dict[str, list]]:
        """The weighted sums and each function's values; ``given``: :func:`call_reward`'s ``ids`` and
        ``state``."""
        values = {name: call_reward(name, fn, completions, row, **given) for name, fn, _ in self.terms}
        totals = [
            sum(w * (values[name][i] or 0.0) for name, _, w in self.terms) for i in range(len(completions))
        ]
        return totals, values

    def __call__(self, completions: list[str], answer: str) -> list[float]:
        return self.parts(completions, {"answer": answer})[0]


def scored_group(
    reward_fn, completions: list[str], row: dict, **given
) -> tuple[list[float], list[dict] | None]:
    """One reward per completion of a prompt's group and, for :class:`WeightedRewards`, each completion's
    reward from every function (``{name: value}``); None for a single reward function. ``given``: the
    completions' token ids and the sampling policy's state (:func:`call_reward`'s ``ids`` and ``state``)."""
    if isinstance(reward_fn, WeightedRewards):
        totals, values = reward_fn.parts(completions, row, **given)
        return totals, [{name: v[i] for name, v in values.items()} for i in range(len(completions))]
    return group_rewards(reward_fn, completions, row["answer"]), None


def online_reward(online, task: TaskSpec, *, dtype: str = "fp32"):
    """The reward of an online run: ``online.rewards`` weighted (each function from the grader names, the
    task's own, the registry, or a reward model in ``dtype``), else ``online.reward_grader`` alone
    (:func:`reward_function`)."""
    if online.rewards is None:
        return reward_function(online.reward_grader, task)
    from oxbench.tasks.registry import GRADER_REWARDS, get_reward

    terms = []
    for term in online.rewards:
        if term.model is not None:
            from oxbench.models.reward_model import RewardModel

            fn = RewardModel(term.model, dtype=dtype)
        elif term.name in GRADER_REWARDS:
            fn = GraderReward(reward_function(term.name, task))
        else:
            fn = task.rewards.get(term.name) or get_reward(term.name).fn
        terms.append((term.name, fn, term.weight))
    return WeightedRewards(terms)
