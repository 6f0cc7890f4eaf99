"""Skill gain, restated (issue 40, items 4 and 8): per-problem verified-flexible outcomes and operands
recovered from the records (analysis.arith_records), the two-way skill test against a random-reward
control, identical arms merged, gains by operand range and answer agreement (analysis.skill_gain)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_records import run_record, write_run

from analysis import arith_records as ar
from analysis import load_runs
from analysis.crossed import fixed_base

ROOT = Path(__file__).resolve().parents[1]
#: (start, op1, b1, op2, b2): six problems inside the base's range (operands <= 40), six beyond it
PROBLEMS = [
    (12, "+", 7, "-", 5),
    (30, "-", 12, "+", 26),
    (8, "+", 9, "+", 3),
    (40, "-", 39, "+", 1),
    (25, "+", 15, "-", 30),
    (17, "-", 2, "-", 5),
    (57, "-", 43, "+", 58),
    (45, "+", 58, "+", 59),
    (59, "-", 31, "-", 1),
    (41, "+", 28, "-", 59),
    (33, "+", 52, "-", 20),
    (60, "-", 44, "+", 47),
]
CONFIG = {
    "task": {"name": "arith", "n_ops": 2, "max_operand": 60},
    "model": {"pretrain": {"task": {"n_ops": 2, "max_operand": 40}}},
}


def working(p: tuple, slip: int = 0) -> str:
    """The problem's working ending "The answer is N." (``slip``: the first result off by that much)."""
    a, o1, b1, o2, b2 = p
    v1 = (a + b1 if o1 == "+" else a - b1) + slip
    v2 = v1 + b2 if o2 == "+" else v1 - b2
    return f"{a} {o1} {b1} = {v1}\n{v1} {o2} {b2} = {v2}\nThe answer is {v2}."


def truth(p: tuple) -> int:
    a, o1, b1, o2, b2 = p
    v1 = a + b1 if o1 == "+" else a - b1
    return v1 + b2 if o2 == "+" else v1 - b2


def outcomes(right: set[int]) -> list[dict]:
    """Right (the gold working) on the problems in ``right``, a slip in the first line elsewhere."""
    rows = []
    for i, p in enumerate(PROBLEMS):
        text = working(p, 0 if i in right else 1)
        flexible = int(text.rsplit(" ", 1)[1].rstrip(".")) == truth(p)
        rows.append(
            {
                "id": f"arith-id-test-{i}",
                "split": "test",
                "correct": False,
                "correct_flexible": flexible,
                "verified": False,
                "completion": text,
            }
        )
    return rows


#: arm -> per seed, the problems it gets right; 0-5 are the trained range, 6-11 beyond it
ARMS = {
    "sgrpo": [{0, 1, 2, 3, 4, 6, 7, 8, 9}, {0, 1, 2, 3, 5, 6, 7, 8, 10}, {0, 1, 2, 3, 4, 5, 6, 7, 9, 10}],
    "dpo": [{0, 1, 2, 3, 4, 6}, {0, 1, 2, 3, 5, 6}, {0, 1, 2, 4, 5, 7}],
    "ipo": [{0, 1, 2, 3, 4, 6}, {0, 1, 2, 3, 5, 6}, {0, 1, 2, 4, 5, 7}],  # dpo's completions: merged
}
CONTROL = [{0, 1, 2, 3, 4, 5, 6}, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 7}]
BASE = 0.5  # the base's verified-flexible accuracy: not 0 or 1, so its per-problem outcomes are unknown


def grid(root: Path, name: str, arms: dict[str, list[set[int]]]) -> Path:
    for method, seeds in arms.items():
        for seed, right in enumerate(seeds):
            share = len(right) / len(PROBLEMS)
            metrics = {
                "accuracy": 0.0,
                "accuracy_flexible": share,
                "accuracy_verified_flexible": share,
                "base_accuracy": 0.0,
                "base_accuracy_flexible": BASE,
                "base_accuracy_verified_flexible": BASE,
                "n_test": len(PROBLEMS),
                "chance": 0.01,
            }
            rec = run_record(
                method,
                "tiny-m",
                seed,
                grid=name,
                run_id=f"{name}-{method}-s{seed}",
                scale_params=800_000,
                paradigm="online",
                metrics=metrics,
                config=CONFIG,
            )
            write_run(root, rec, outcomes=outcomes(right))
    return root / name


def runs_of(path: Path) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_runs(path)


def test_the_records_give_back_workings_verified_flexible_outcomes_and_operands(tmp_path):
    runs = pd.concat([runs_of(grid(tmp_path, "g", ARMS)), runs_of(grid(tmp_path, "c", {"sgrpo": CONTROL}))])
    table = ar.load_completions(runs)
    gold = ar.gold_workings(table)
    assert sorted(gold) == sorted(f"arith-id-test-{i}" for i in range(11))  # no run solves problem 11
    assert gold["arith-id-test-1"] == ((30, "-", 12, 18), (18, "+", 26, 44))
    table = ar.with_verified_flexible(table, gold)
    assert ar.verified_flexible_mismatches(table, runs) == []
    off = runs.assign(accuracy_verified_flexible=runs["accuracy_verified_flexible"] + 0.01)
    assert len(ar.verified_flexible_mismatches(table, off)) == len(runs)
    ops = ar.problem_operands(table, gold, max_operand=60).set_index("id")
    assert ops.loc["arith-id-test-0", ["start", "b1", "b2"]].tolist() == [12, 7, 5]
    assert (
        ops.loc["arith-id-test-11", "source"] == "copied"
    )  # unsolved: the operands as every run copied them
    assert ops.loc["arith-id-test-11", ["start", "b1", "b2", "max_op"]].tolist() == [60, 44, 47, 60]
    assert (ops["source"] == "working").sum() == 11
    assert ar.trained_max_operand(ar.task_config(runs)) == 40
    assert ar.final_answers(table.iloc[:1]).tolist() == [str(truth(PROBLEMS[0]))]


def test_a_copy_the_task_cannot_produce_is_passed_over():
    """A start of 5 minus 43 cannot be an arith problem (a subtraction stays above 0): the next copy
    that the task allows is taken; with none, the operands are unknown."""
    rows = [
        ("5 - 43 = 2\n2 + 58 = 60\nThe answer is 60.", 3),
        ("57 - 43 = 14\n14 + 58 = 72\nThe answer is 7.", 1),
    ]
    table = pd.DataFrame(
        [
            {"run_id": f"r{i}-{j}", "id": "q", "completion": t, "correct_flexible": False}
            for i, (t, n) in enumerate(rows)
            for j in range(n)
        ]
        + [{"run_id": "r", "id": "u", "completion": "5 - 28 = 1\n1 + 53 = 54", "correct_flexible": False}]
    )
    ops = ar.problem_operands(table, {}, max_operand=60).set_index("id")
    assert ops.loc["q", ["start", "b1", "b2"]].tolist() == [57, 43, 58]
    assert pd.isna(ops.loc["u", "source"]) and np.isnan(ops.loc["u", "max_op"])


def test_a_base_at_0_or_1_is_a_paired_reference_and_any_other_is_not():
    assert fixed_base(0.0, 4).tolist() == [[0.0] * 4] * 2 and fixed_base(1.0, 3).shape == (2, 3)
    assert fixed_base(0.5967, 300) is None


def test_skill_gain_is_two_way_against_the_control_with_identical_arms_merged(tmp_path, capsys, monkeypatch):
    root, control = grid(tmp_path, "g", ARMS), grid(tmp_path, "c", {"sgrpo": CONTROL})
    from analysis import skill_gain

    monkeypatch.setattr(sys, "argv", ["skill_gain", str(root), "--control", str(control)])
    skill_gain.main()
    out = capsys.readouterr().out
    assert "ipo repeats dpo" in out and "| dpo (= ipo) |" in out and "| ipo |" not in out
    assert (
        "two-way against the random-reward control (3 runs); unit: seeds × problems (Holm over 2 arms)" in out
    )
    row = next(line for line in out.splitlines() if line.startswith("| sgrpo |"))
    assert "+25.0, +25.0, +33.3" in row  # 9, 9 and 10 of 12 right against the base's 6
    assert "≤ 40 (6 problems)" in out and "> 40 (6 problems)" in out
    assert "| control | 3 |" in out and "lower bound" in out


def test_without_a_control_the_gain_is_untested_two_way_and_says_why(tmp_path, capsys, monkeypatch):
    root = grid(tmp_path, "g", {"sgrpo": ARMS["sgrpo"]})
    from analysis import skill_gain

    monkeypatch.setattr(sys, "argv", ["skill_gain", str(root)])
    skill_gain.main()
    out = capsys.readouterr().out
    assert "the base's per-problem outcomes are not recorded and no --control was given" in out
    assert "untested (no paired reference)" in out


@pytest.mark.parametrize(
    "grids", [("oxrl_skill", "oxrl_skill_control", "oxrl_skill_budget", "oxrl_skill_confirm")]
)
def test_the_recovery_gives_back_the_committed_records(grids):
    """On the committed skill records: every run's verified-flexible accuracy is reproduced problem by
    problem, and the operands agree with the task's generator on every problem with a working and on
    all but one of the rest (a 57 the base copies as 5: a 1-digit start it has seen)."""
    from oxbench.tasks import arith

    runs = pd.concat([runs_of(ROOT / "results" / g) for g in grids])
    table = ar.load_completions(runs)
    gold = ar.gold_workings(table)
    assert ar.verified_flexible_mismatches(ar.with_verified_flexible(table, gold), runs) == []
    ops = ar.problem_operands(table, gold, max_operand=60).set_index("id")
    rows = arith.generate("test", 300, seed=0, n_ops=2, max_operand=60)
    true = {r["id"]: (lambda w: (w[0][0], w[0][2], w[1][2]))(arith.working_lines(r["answer"])) for r in rows}
    wrong = [
        i
        for i, t in true.items()
        if pd.notna(ops.loc[i, "source"]) and tuple(ops.loc[i, ["start", "b1", "b2"]]) != t
    ]
    assert (ops["source"] == "working").sum() == 235 and ops["source"].isna().sum() == 1
    assert wrong == ["arith-id-test-225"] and ops.loc[wrong[0], "source"] == "copied"


def test_a_recorded_base_is_the_reference_and_the_grid_s_controls_are_tested_and_sized(
    tmp_path, capsys, monkeypatch
):
    """Records with ``base_eval.jsonl``: the base's per-problem outcomes are the paired reference, each
    real arm is tested against each control arm of the grid, and each control's answer changes from the
    base are set beside its real twin's (issue 40, item 4)."""
    import json

    arms = {
        "sgrpo reward_grader=flexible": ARMS["sgrpo"],
        "sgrpo reward_grader=random": CONTROL,
        "sgrpo reward_grader=shuffled-flexible": [{0, 1, 2, 3, 6, 7}, {0, 1, 2, 4, 5, 8}, {0, 1, 3, 4, 5, 9}],
    }
    root = grid(tmp_path, "g", arms)
    base = "".join(json.dumps(o) + "\n" for o in outcomes(set(range(6))))  # right on 0-5: 50%, as BASE
    for d in root.iterdir():
        (d / "base_eval.jsonl").write_text(base)
    from analysis import skill_gain

    monkeypatch.setattr(sys, "argv", ["skill_gain", str(root)])
    skill_gain.main()
    out = capsys.readouterr().out
    assert "two-way against the base (50.0%; its per-problem outcomes, base_eval.jsonl)" in out
    assert "each arm against each control of the grid (unit: seeds × problems; Holm over 2" in out
    moves = [
        line
        for line in out.splitlines()
        if line.startswith("| sgrpo reward_grader=shuffled-flexible | sgrpo reward_grader=flexible |")
    ]
    assert moves[0].endswith("| 22.2% | 38.9% | 0.57 | 0.038 | no | no | no |")  # ratio, p, three cut-offs
    assert "(mean; per run)" in out and "lower bound" not in out
    (next(root.iterdir()) / "base_eval.jsonl").write_text(
        base.replace('"completion": "12', '"completion": "13')
    )
    with pytest.raises(ValueError, match="2 different base evaluations"):
        skill_gain.main()


def test_a_one_line_working_that_reaches_the_answer_is_no_gold_working_of_a_two_step_problem():
    """Seen on the confirmation split: completions that wrote 43 + 50 = 93 for a two-step problem whose
    answer is 93 were voted its working, and verified-flexible no longer gave the recorded metric back."""
    rows = [("43 + 50 = 93\nThe answer is 93.", 3), ("43 + 51 = 94\n94 - 1 = 93\nThe answer is 93.", 2)]
    table = pd.DataFrame(
        [{"run_id": f"r{i}-{j}", "id": "q", "completion": t, "correct_flexible": True}
         for i, (t, n) in enumerate(rows) for j in range(n)]
    )  # fmt: skip
    assert ar.gold_workings(table)["q"] == ((43, "+", 50, 93),)  # the vote alone
    assert ar.gold_workings(table, n_ops=2)["q"] == ((43, "+", 51, 94), (94, "-", 1, 93))


def test_a_control_at_a_larger_rate_is_set_beside_its_twin_and_the_nearest_is_picked(
    tmp_path, capsys, monkeypatch
):
    """A calibration (recipes/oxrl_skill_matched_calibration.yaml): the random reward at several learning
    rates, each set beside the one real arm that differs in reward and rate only; the pick is the ratio
    nearest 1 on a log scale."""
    import json

    arms = {
        "sgrpo base_lr=1e-05 reward_grader=flexible": ARMS["sgrpo"],
        "sgrpo base_lr=2e-05 reward_grader=random": CONTROL,
        "sgrpo base_lr=4e-05 reward_grader=random": [
            {0, 1, 2, 3, 6, 7},
            {0, 1, 2, 4, 5, 8},
            {0, 1, 3, 4, 5, 9},
        ],
    }
    root = grid(tmp_path, "g", arms)
    base = "".join(json.dumps(o) + "\n" for o in outcomes(set(range(6))))
    for d in root.iterdir():
        (d / "base_eval.jsonl").write_text(base)
    from analysis import skill_gain

    assert skill_gain.real_twin("sgrpo base_lr=4e-05 reward_grader=random", arms) == next(iter(arms))
    two_real = {**arms, "sgrpo base_lr=3e-05 reward_grader=flexible": []}
    assert skill_gain.real_twin("sgrpo base_lr=4e-05 reward_grader=random", two_real) is None  # ambiguous
    monkeypatch.setattr(sys, "argv", ["skill_gain", str(root)])
    skill_gain.main()
    out = capsys.readouterr().out
    rows = [
        line
        for line in out.splitlines()
        if line.endswith("reward_grader=flexible | 22.2% | 38.9% | 0.57 | 0.038 | no | no | no |")
    ]
    assert rows and rows[0].startswith("| sgrpo base_lr=4e-05 reward_grader=random |")
    pick = "nearest its twin (|log ratio| smallest; the calibration's pick): sgrpo base_lr=4e-05 reward_grader=random"
    assert pick in out  # 22.2% against the control at 2e-05's smaller share


def test_a_task_whose_answer_is_not_a_number_gets_no_answer_tables(tmp_path, capsys, monkeypatch):
    """Countdown's answer is an equation: the tables of final answers (the last number) are left out, and
    the output says why; the gain tables are unchanged."""
    countdown = {"task": {"name": "countdown"}, "model": {"pretrain": {}}}
    monkeypatch.setitem(globals(), "CONFIG", countdown)
    root = grid(tmp_path, "g", {"sgrpo": ARMS["sgrpo"], "dpo": ARMS["dpo"]})
    from analysis import skill_gain

    monkeypatch.setattr(sys, "argv", ["skill_gain", str(root), "--metric", "accuracy_flexible"])
    skill_gain.main()
    out = capsys.readouterr().out
    assert "final answers: not compared (countdown's answer is not the completion's last number)" in out
    assert "same answer between its seeds" not in out and "| sgrpo |" in out
