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

    def __init__(self, mode: str):
        self.mode = mode

    def __call__(self, completions: list[str], answer: str) -> list[float]:
        rewards = [float(is_correct(c, answer, mode=self.mode)) for c in completions]
        key = hashlib.sha256("\x00".join([answer, *completions]).encode()).hexdigest()
        random.Random(key).shuffle(rewards)
        return rewards


def reward_function(grader: str):
    if grader == "random":
        return random_reward
    if grader.startswith("shuffled-"):
        return ShuffledReward(grader.removeprefix("shuffled-"))
    return functools.partial(is_correct, mode=grader)


def group_rewards(reward_fn, completions: list[str], answer: str) -> list[float]:
    """One float per completion of a prompt's group, from a per-completion or a group reward."""
    if getattr(reward_fn, "group_wise", False):
        return [float(r) for r in reward_fn(completions, answer)]
    return [float(reward_fn(c, answer)) for c in completions]
