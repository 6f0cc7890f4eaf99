"""The reward an online run's rollouts get (``online.reward_grader``): the grader's verdict, or the
random-reward control."""

from __future__ import annotations

import functools
import hashlib

from oxbench.tasks.grading import is_correct


def random_reward(completion: str, answer: str) -> float:
    """1 or 0 from a hash of the completion and the problem: as often right as wrong, unrelated to
    correctness, the same for the same text (the random-reward control)."""
    return float(hashlib.sha256(f"{answer}\x00{completion}".encode()).digest()[0] & 1)


def reward_function(grader: str):
    return random_reward if grader == "random" else functools.partial(is_correct, mode=grader)
