"""Reward functions as plugins (issue 42, item 4): TRL's ``reward_funcs`` shape (completions in, floats
out), several combined with weights in ``online.rewards``, each logged as ``reward/<name>``, from the
graders, the task's own or the registry (entry points, ``--plugin``); ``online.reward_grader`` alone,
unchanged, when ``online.rewards`` is not given."""

from __future__ import annotations

import functools
import math
import sys
from types import SimpleNamespace

import pytest

from oxbench.config import RunConfig, format_validation_error
from oxbench.engine.rollout import Rollout
from oxbench.engine.sources.rollouts import rollout_stats
from oxbench.tasks import get_task, registry
from oxbench.tasks.errors import TaskError
from oxbench.tasks.grading import is_correct
from oxbench.tasks.rewards import (
    GraderReward,
    WeightedRewards,
    call_reward,
    online_reward,
    scored_group,
)

ROW = {"id": "p0", "question": "3 + 4?", "answer": "3 + 4 = 7\n#### 7"}
GROUP = ["3 + 4 = 7\n#### 7", "the answer is 7", "#### 8", "no idea"]  # strict 1, flexible 2


def short(completions, answer, **columns):
    """A TRL-shaped reward: 1 for a completion under 10 characters, None for an empty one."""
    return [None if not c else float(len(c) < 10) for c in completions]


def online(**kw) -> SimpleNamespace:
    return RunConfig(method="sgrpo", online=kw).online


@pytest.fixture
def short_reward():
    spec = registry.register(registry.RewardSpec(name="short", fn=short), origin="test")
    yield spec
    registry.unregister("short", "reward")


def test_without_online_rewards_the_reward_is_reward_graders_as_before():
    for grader in ("strict", "flexible"):
        r = online_reward(online(reward_grader=grader), get_task("arith"))
        assert isinstance(r, functools.partial) and (r.func, r.keywords) == (is_correct, {"mode": grader})
    assert "rewards" not in online().hash_view()
    assert RunConfig(method="sgrpo").run_id() == RunConfig(method="sgrpo", online={"rewards": None}).run_id()
    weighted = RunConfig(method="sgrpo", online={"rewards": [{"name": "strict"}]})
    assert weighted.run_id() != RunConfig(method="sgrpo").run_id()


def test_a_weighted_sum_and_each_part(short_reward):
    fn = online_reward(
        online(rewards=[{"name": "flexible"}, {"name": "short", "weight": 0.5}]), get_task("arith")
    )
    assert isinstance(fn, WeightedRewards) and [(n, w) for n, _, w in fn.terms] == [
        ("flexible", 1.0),
        ("short", 0.5),
    ]
    totals, parts = scored_group(fn, GROUP + [""], ROW)
    assert [p["flexible"] for p in parts] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert [p["short"] for p in parts] == [0.0, 0.0, 1.0, 1.0, None]  # None: no reward, adds 0
    assert totals == [1.0, 1.0, 0.5, 0.5, 0.0]
    plain, none = scored_group(functools.partial(is_correct, mode="strict"), GROUP, ROW)
    assert plain == [1.0, 0.0, 0.0, 0.0] and none is None


def test_the_graders_controls_combine_too():
    fn = online_reward(
        online(rewards=[{"name": "shuffled-strict"}, {"name": "random", "weight": 0.0}]), get_task("arith")
    )
    totals, parts = scored_group(fn, GROUP, ROW)
    assert sorted(p["shuffled-strict"] for p in parts) == [0.0, 0.0, 0.0, 1.0]  # the group keeps its count
    assert all(p["random"] in (0.0, 1.0) for p in parts) and totals == [p["shuffled-strict"] for p in parts]
    assert isinstance(fn.terms[0][1], GraderReward)


def test_a_reward_function_gets_trl_s_columns():
    seen = {}

    def spy(completions, **columns):
        seen.update(columns, completions=completions)
        return [0.0] * len(completions)

    call_reward("spy", spy, ["a", "b"], {**ROW, "numbers": [1, 2]})
    assert seen["completions"] == ["a", "b"] and seen["prompts"] == [ROW["question"]] * 2
    assert (
        seen["answer"] == [ROW["answer"]] * 2
        and seen["id"] == ["p0", "p0"]
        and seen["numbers"] == [[1, 2]] * 2
    )


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        (lambda completions, **k: [1.0], "reward 'bad' returned 1 for 2 completions"),
        (lambda completions, **k: 1.0, "reward 'bad' returned float for 2 completions"),
        (lambda completions, **k: ["1", 0.0], "reward 'bad' returned '1', not a number or None"),
        (lambda completions, **k: [True, 0.0], "reward 'bad' returned True, not a number or None"),
    ],
)
def test_a_reward_of_the_wrong_shape_is_one_line(fn, why):
    with pytest.raises(ValueError) as err:
        call_reward("bad", fn, ["a", "b"], ROW)
    assert str(err.value) == why


def test_online_rewards_are_checked_before_any_work(short_reward):
    def error(**kw) -> str:
        with pytest.raises(Exception) as err:
            RunConfig(method="sgrpo", online=kw)
        return format_validation_error(err.value, "g.yaml")

    assert (
        error(rewards=[{"name": "shrot"}])
        == "g.yaml: field 'online.rewards': unknown reward 'shrot'; did you mean 'short'?"
    )
    assert "give it or online.reward_grader, not both" in error(
        rewards=[{"name": "short"}], reward_grader="flexible"
    )
    assert "reward 'short' is named twice" in error(
        rewards=[{"name": "short"}, {"name": "short", "weight": 2}]
    )
    assert "weight" in error(rewards=[{"name": "short", "weight": math.inf}])
    assert "unknown key" in error(rewards=[{"name": "short", "wieght": 1}])
    RunConfig(method="sgrpo", online={"rewards": [{"name": "short"}, {"name": "strict", "weight": 2}]})


def test_a_reward_spec_is_refused_under_a_grader_s_name_or_twice(short_reward):
    with pytest.raises(TaskError, match="the name is a grader's"):
        registry.RewardSpec(name="strict", fn=short)
    with pytest.raises(TaskError, match="duplicate reward 'short': from test and from --plugin m"):
        registry.register(registry.RewardSpec(name="short", fn=short), origin="--plugin m")


def test_a_plugin_module_s_reward_spec_and_an_entry_point(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        "from oxbench.tasks import RewardSpec\n\n"
        "def brevity(completions, **columns):\n    return [1.0 / (1 + len(c)) for c in completions]\n\n"
        "spec = RewardSpec(name='brevity', fn=brevity, description='shorter is better')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    # load_plugins sets $OXBENCH_PLUGINS for the cells it starts; left set, every later grid in this process
    # sends "my_rewards" to its workers (test_run_lock failed so in the full suite): setenv records its absence
    monkeypatch.setenv("OXBENCH_PLUGINS", "")
    from oxbench.plugins import load_plugins

    try:
        assert load_plugins(["my_rewards"]) == ["brevity"]
        assert "brevity" in registry.reward_names() and "brevity" in get_task("gsm8k").reward_names()
        fn = online_reward(online(rewards=[{"name": "brevity"}]), get_task("arith"))
        assert scored_group(fn, ["ab", ""], ROW)[0] == [1 / 3, 1.0]
    finally:
        registry.unregister("brevity", "reward")
        sys.modules.pop("my_rewards", None)
    ep = SimpleNamespace(name="ep_reward", value="m:spec", dist=SimpleNamespace(name="d"))
    ep.load = lambda: registry.RewardSpec(name="ep_reward", fn=short)
    real = registry._entry_points
    monkeypatch.setattr(
        registry,
        "_entry_points",
        lambda g: {**real(g), **({"ep_reward": [ep]} if g == registry.REWARD_GROUP else {})},
    )
    try:
        assert registry.get_reward("ep_reward").fn is short and "ep_reward" in registry.reward_names()
    finally:
        registry.unregister("ep_reward", "reward")


def test_each_reward_is_logged_beside_the_sum():
    def rollout(group, reward, parts):
        return Rollout("p", "q", "a", "c", reward, group, 0, reward_parts=parts)

    experience = [
        rollout(0, 1.5, {"strict": 1.0, "short": 1.0}),
        rollout(0, 0.0, {"strict": 0.0, "short": None}),
        rollout(1, 0.5, {"strict": 0.0, "short": 1.0}),
    ]
    stats = rollout_stats(experience)
    assert stats["reward/strict"] == pytest.approx(1 / 3) and stats["reward/short"] == 1.0
    assert "reward/strict" not in rollout_stats([rollout(0, 1.0, None)])
