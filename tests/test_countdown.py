"""Countdown (issue 42, item 2), TinyZero's task built in: the generator is deterministic, its splits are
disjoint by construction and every problem is solved by its gold answer; the graders on hand-made cases
(an equation is parsed, never executed); TinyZero's reward; ``oxbench tasks`` lists it and a grid on it
plans without training."""

from __future__ import annotations

import builtins
import json
from collections import Counter
from fractions import Fraction

import pytest
import yaml
from typer.testing import CliRunner

from oxbench.config import RunConfig
from oxbench.tasks import countdown, get_task, load_task_split
from oxbench.tasks.check import check
from oxbench.tasks.errors import TaskError
from oxbench.tasks.rewards import WeightedRewards, call_reward, online_reward, reward_function
from oxbench_cli import app

# hand-made problems: numbers and target, as a reference answer states them
REF = "Numbers: 3, 5, 2. Target: 16.\n3 + 5 = 8\n8 * 2 = 16\n<answer>(3 + 5) * 2</answer>"
FOURS = "Numbers: 4, 4, 1. Target: 16.\n4 * 4 = 16\n<answer>4 * 4</answer>"  # 4 given twice
DIVIDE = "Numbers: 12, 3, 4, 7. Target: 16.\n<answer>12 / 3 * 4</answer>"


def _key(row: dict) -> tuple:
    return tuple(sorted(row["numbers"])), row["target"]


def strict(completion: str, answer: str = REF) -> bool:
    return countdown.is_correct(completion, answer, "strict")


def flexible(completion: str, answer: str = REF) -> bool:
    return countdown.is_correct(completion, answer, "flexible")


# ------------------------------------------------------------------------------------ the generator


def test_the_generator_is_deterministic_and_seeded():
    assert countdown.generate("train", 200, seed=3) == countdown.generate("train", 200, seed=3)
    assert countdown.generate("train", 200, seed=3) != countdown.generate("train", 200, seed=4)
    rows = load_task_split({"name": "countdown"}, "test", n=50)
    assert rows == countdown.generate("test", 50) and [r["id"] for r in rows][:2] == [
        "countdown-test-0",
        "countdown-test-1",
    ]


def test_the_splits_are_disjoint_for_any_seed():
    splits = {s: countdown.generate(s, 300, seed=0) for s in ("test", "validation", "confirm")}
    keys = {s: {_key(r) for r in rows} for s, rows in splits.items()}
    for seed in range(3):
        keys[f"train{seed}"] = {_key(r) for r in countdown.generate("train", 1500, seed=seed)}
    names = list(keys)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if not (a.startswith("train") and b.startswith("train")):
                assert not keys[a] & keys[b], (a, b)
    assert all(len(keys[s]) == 300 for s in splits)  # each problem once in a split
    test_q = {r["question"] for r in splits["test"]}
    assert not test_q & {r["question"] for r in countdown.generate("train", 1500)}


@pytest.mark.parametrize("opts", [{}, {"n_numbers": 4, "max_number": 30, "max_target": 200}])
def test_every_problem_is_solved_by_its_gold_answer(opts):
    task = {"name": "countdown", "options": opts}
    o = countdown.options(task)
    for split in ("train", "test", "validation", "confirm"):
        for row in load_task_split(task, split, n=150):
            numbers, target = countdown.parse_reference(row["answer"])
            assert (numbers, target) == (row["numbers"], row["target"]) and len(numbers) == o["n_numbers"]
            assert row["question"].startswith(countdown.restatement(numbers, target))
            assert all(1 <= x <= o["max_number"] for x in numbers)
            assert 1 <= target <= o["max_target"] and target not in numbers
            equation = countdown.strict_equation(row["answer"])
            value, used = countdown.evaluate(equation)
            assert value == target and not Counter(used) - Counter(numbers) and len(used) >= 2
            for line in row["answer"].splitlines()[1:-1]:  # each step: a right operation, positive integer
                left, result = line.split(" = ")
                assert countdown.evaluate(left)[0] == int(result) > 0
            assert strict(row["answer"], row["answer"]) and flexible(row["answer"], row["answer"])
            assert countdown.score(row["answer"], row["answer"]) == 1.0


def test_pretraining_draws_train_problems_with_repetition():
    """A Countdown base's pre-training rows: ``distinct=False`` reaches the generator (draws repeat),
    every row from the train split's class."""
    task = {"name": "countdown", "options": {"n_numbers": 2, "max_number": 6, "max_target": 30}}
    rows = load_task_split(task, "train", n=400, seed=1234, distinct=False)
    assert len(rows) == 400 and len({_key(r) for r in rows}) < 400
    test = {_key(r) for r in load_task_split(task, "test", n=None)}
    assert test and not test & {_key(r) for r in rows}
    with pytest.raises(ValueError, match="distinct train problems"):
        load_task_split(task, "train", n=400, seed=1234)


def test_options_are_checked_in_one_line():
    with pytest.raises(TaskError, match=r"countdown has no option 'n_number' \(it has: n_numbers"):
        countdown.options({"options": {"n_number": 3}})
    with pytest.raises(TaskError, match=r"task.options.max_number: .* \[2, 1000\], got 1"):
        countdown.options({"options": {"max_number": 1}})
    with pytest.raises(TaskError, match="n_numbers"):
        countdown.options({"options": {"n_numbers": True}})


# ------------------------------------------------------------------------------------- the graders


def test_a_right_equation_is_right():
    assert strict("<answer>(3 + 5) * 2</answer>")
    assert strict("Numbers: 3, 5, 2. Target: 16.\n3 + 5 = 8\n8 * 2 = 16\n<answer>(5 + 3) * 2</answer>")
    assert strict("<answer> 2*(3+5) </answer>\n")  # spaces, and the line a trailing newline leaves
    assert strict("Let me try.\n<answer>(3 + 5) * 2</answer> done")  # text around it on the last line


def test_a_wrong_value_is_wrong():
    assert not strict("<answer>3 + 5 + 2</answer>") and not strict("<answer>3 + 5 * 2</answer>")


def test_each_number_at_most_once_as_a_multiset():
    assert not strict("<answer>2 * 2 * 2 * 2</answer>")  # 2 given once, used 4 times
    assert not strict("<answer>(3 + 5) * 2 * 2 / 2</answer>")  # the right value, 2 used three times
    assert strict("<answer>4 * 4</answer>", FOURS) and strict("<answer>4 * 4 * 1</answer>", FOURS)
    assert not strict("<answer>4 * 4 * 4 / 4</answer>", FOURS)  # 4 given twice, used four times
    assert strict("<answer>16 * 1</answer>", FOURS) is False  # 16 is the target, not a given number


def test_a_number_not_given_is_wrong():
    assert not strict("<answer>8 * 2</answer>") and not strict("<answer>16</answer>")


def test_division_is_exact():
    assert strict("<answer>12 / 3 * 4</answer>", DIVIDE) and strict("<answer>4 / 3 * 12</answer>", DIVIDE)
    sevenths = "Numbers: 7, 3, 3. Target: 7.\n<answer>7 / 3 * 3</answer>"
    assert strict("<answer>7 / 3 * 3</answer>", sevenths)  # a fraction on the way, exactly 7 at the end
    assert countdown.evaluate("1 / 3 + 1 / 3 + 1 / 3")[0] == Fraction(1)
    assert not strict("<answer>12 / (4 - 4)</answer>", DIVIDE)  # division by zero: wrong, not an error
    assert countdown.evaluate("7 / (3 - 3)") is None


def test_parentheses_set_the_order():
    assert strict("<answer>(3 + 5) * 2</answer>") and not strict("<answer>3 + 5 * 2</answer>")
    assert strict("<answer>((3 + 5)) * (2)</answer>")
    twenty = "Numbers: 16, 3, 5, 2. Target: 20."  # a negative step on the way is allowed
    assert strict("<answer>16 - (3 - 5) * 2</answer>", twenty) and not strict(
        "<answer>16 - 3 - 5 * 2</answer>", twenty
    )


@pytest.mark.parametrize(
    "text",
    [
        "<answer>(3 + 5 * 2</answer>",
        "<answer></answer>",
        "<answer>3 +</answer>",
        "<answer>3 5 2</answer>",
        "<answer>(3 + 5) * 2",
        "(3 + 5) <answer>* 2</answer>",
        "<answer>-3 + 5 * 2 + 3</answer>",  # a unary sign
        "<answer>(3 + 5) * 2.0</answer>",  # a decimal
        "<answer>(3 + 5) ** 2 // 4</answer>",
        "<answer>(3 + 5) x 2</answer>",
        "<answer>(3 + 5)(2)</answer>",
        "<answer>" + "(" * 120 + "3" + ")" * 120 + "</answer>",  # over 200 characters
        "",
    ],
)
def test_malformed_equations_are_wrong(text):
    assert not strict(text) and not flexible(text) and countdown.score(text, REF) in (0.0, 0.1)


@pytest.mark.parametrize(
    "code",
    [
        "__import__('os').system('touch {marker}')",
        "open('{marker}', 'w')",
        "(lambda: 16)()",
        "[16][0]",
        "16 if 1 else 0",
    ],
)
def test_code_in_an_answer_is_just_wrong_never_run(code, tmp_path, monkeypatch):
    marker = tmp_path / "ran"

    def refuse(*args, **kwargs):
        raise AssertionError("the grader called eval/exec")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    text = f"<answer>{code.format(marker=marker)}</answer>"
    assert not strict(text) and not flexible(text) and countdown.score(text, REF) == 0.1
    assert countdown.evaluate(code.format(marker=marker)) is None and not marker.exists()


def test_strict_wants_the_answer_format_flexible_the_equation_anywhere():
    later = "<answer>(3 + 5) * 2</answer>\nNumbers: 3, 5, 2."  # the answer, then more text
    assert not strict(later) and flexible(later)
    bare = "3 + 5 = 8\n(3 + 5) * 2 = 16"  # no tags: the last line that is an expression
    assert not strict(bare) and flexible(bare) and flexible("(3 + 5) * 2")
    assert not flexible("(3 + 5) * 2 = 15") and not flexible("(3 + 5) * 2 = 16 = 16")
    tagged = "<answer>(3 + 5) * 2 = 16</answer>"  # TinyZero would count the 16 as a number: not strict
    assert not strict(tagged) and flexible(tagged)
    assert not flexible("3 + 5 = 8\n8 * 2 = 16")  # the working's last line uses 8, not a given number
    assert not flexible("<answer>3 + 5</answer>\n(3 + 5) * 2")  # the last answer tag decides
    assert not flexible("the answer is sixteen") and countdown.flexible_equation("no equation") is None
    with pytest.raises(ValueError, match="unknown grader"):
        countdown.is_correct("", REF, "lenient")
    with pytest.raises(ValueError, match="no 'Numbers: ... Target: N.' line"):
        countdown.is_correct("<answer>1</answer>", "16")


# --------------------------------------------------------------------- the reward, chance, the spec


def test_the_reward_is_tinyzero_s_format_and_equation_score():
    spec = get_task("countdown")
    texts = [
        "<answer>(3 + 5) * 2</answer>",  # right: 1.0
        "<answer>3 + 5 + 2</answer>",  # the format, a wrong value: 0.1
        "<answer>8 * 2</answer>",  # the format, a number not given: 0.1
        "<answer>(3 + 5) * 2</answer>\nmore",  # no answer on the last line: 0.0
        "(3 + 5) * 2 = 16",  # no tags: 0.0
    ]
    row = {"question": "q", "answer": REF, "id": "x", "numbers": [3, 5, 2], "target": 16}
    assert call_reward("countdown", spec.rewards["countdown"], texts, row) == [1.0, 0.1, 0.1, 0.0, 0.0]
    cfg = RunConfig(method="sgrpo", task={"name": "countdown"}, online={"rewards": [{"name": "countdown"}]})
    weighted = online_reward(cfg.online, spec)
    assert isinstance(weighted, WeightedRewards) and weighted(texts, REF) == [1.0, 0.1, 0.1, 0.0, 0.0]
    assert [reward_function("strict", spec)(t, REF) for t in texts] == [True, False, False, False, False]
    assert [reward_function("flexible", spec)(t, REF) for t in texts] == [True, False, False, True, True]


def test_chance_is_a_random_equation_s_hit_rate():
    # 1, 2 -> 3: "1", "2", and 2 orders x 4 operations; 1 + 2 and 2 + 1 hit: 2 of 10
    assert countdown.hit_probability((1, 2), 3) == pytest.approx(0.2)
    assert countdown.hit_probability((1, 2), 7) == 0.0
    # 1, 2, 3 -> 6: 3 + 24 + 192 = 219 equations
    table = countdown._values((1, 2, 3))
    assert sum(sum(c.values()) for c in table.values()) == 219
    rows = countdown.generate("test", 40)
    value = get_task("countdown").chance({"name": "countdown"}, rows)
    assert 0 < value < 0.2
    assert countdown.chance({"options": {"n_numbers": 5}}, rows) is None


def test_the_metrics_and_the_contract():
    rows = countdown.generate("test", 4)
    got = countdown.metrics(rows, [rows[0]["answer"], "<answer>99 * 99</answer>", "no answer", ""])
    assert got == {"countdown_format": 0.5, "countdown_numbers": 0.25}
    assert check(get_task("countdown")) == []
    assert check(get_task("countdown"), task={"options": {"n_numbers": 4}}) == []


def test_oxbench_tasks_lists_countdown():
    res = CliRunner().invoke(app, ["tasks", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)["tasks"]}
    row = rows["countdown"]
    assert row["origin"] == "oxbench (built-in)" and row["rewards"][-1] == "countdown"
    assert row["splits"] == ["train", "test", "validation", "confirm"] and row["metrics"] is True


def test_a_countdown_grid_plans_without_training(tmp_path):
    grid = tmp_path / "g.yaml"
    base = {
        "task": {"name": "countdown", "options": {"n_numbers": 4}},
        "online": {"rewards": [{"name": "countdown", "weight": 1.0}]},
    }
    grid.write_text(yaml.safe_dump({"name": "g", "base": base, "axes": {"method": ["sgrpo", "sft"]}}))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", "--grid", str(grid), "--out", str(out), "--plan"])
    assert res.exit_code == 0, res.output
    assert "to run 2" in res.output and not out.exists()
    base["task"]["options"] = {"n_numbers": 9}
    grid.write_text(yaml.safe_dump({"name": "g", "base": base, "axes": {"method": ["sft"]}}))
    res = CliRunner().invoke(app, ["run", "--grid", str(grid), "--out", str(out), "--plan"])
    assert res.exit_code == 2 and "task.options.n_numbers" in res.output and not out.exists()


def test_the_committed_recipe_plans_and_is_not_yet_run(tmp_path):
    res = CliRunner().invoke(
        app, ["run", "--grid", "recipes/countdown_core.yaml", "--out", str(tmp_path), "--plan"]
    )
    assert res.exit_code == 0, res.output
    assert "finished 0, to run 27" in " ".join(res.output.split())
