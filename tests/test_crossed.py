"""analysis.crossed: arms compared with seeds and test problems crossed, from records (issue 40, item 1)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.crossed import BOTH, outcome_matrix, two_way_summary, two_way_vs_baseline


def grid(
    n_problems: int = 60, seeds: int = 3, *, drop: str | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two arms ("base", "arm") x ``seeds`` on the same problems: every run solves the problems its arm
    solves (the arm 3 more than the base), but for one problem flipped at random per run (seed noise);
    a run's accuracy is its test mean, as a real record's is. Seeds agree closely, so a seed-only test
    sees the 5-point gain at once; it rests on 3 problems of 60, so the two-way test does not."""
    rng = np.random.default_rng(1)
    solved = rng.random(n_problems) < 0.5
    runs, outcomes = [], []
    for method, extra in (("base", 0), ("arm", 3)):
        own = solved.copy()
        own[np.flatnonzero(~solved)[:extra]] = True
        for seed in range(seeds):
            run_id, correct = f"{method}-{seed}", own.copy()
            correct[rng.integers(n_problems)] ^= True
            ids = [f"q{i}" for i in range(n_problems)]
            keep = [i for i, q in enumerate(ids) if q != drop or method == "base"]
            outcomes += [
                {
                    "run_id": run_id,
                    "id": ids[i],
                    "split": "test",
                    "correct": bool(correct[i]),
                    "correct_flexible": None,
                }
                for i in keep
            ]
            runs.append(
                {
                    "run_id": run_id,
                    "scale": "s",
                    "method": method,
                    "seed": seed,
                    "accuracy": float(correct[keep].mean()),
                }
            )
    return pd.DataFrame(runs), pd.DataFrame(outcomes)


def test_the_outcome_matrix_is_seeds_by_the_problems_every_run_has():
    runs, outcomes = grid(drop="q3")
    arm = outcome_matrix(runs[runs["method"] == "arm"], outcomes, "accuracy")
    assert arm.shape == (3, 59) and "q3" not in arm.columns
    assert list(arm.index) == ["arm-0", "arm-1", "arm-2"]
    assert outcome_matrix(runs, outcomes, "best_at_4") is None  # no per-problem outcome for it


def test_the_two_way_interval_is_wider_and_inside_0_1_and_the_seed_only_one_stands_beside_it():
    runs, outcomes = grid()
    table = two_way_summary(runs, outcomes, "accuracy").set_index("method")
    for method in ("base", "arm"):
        row = table.loc[method]
        assert row["unit"] == BOTH and row["n_problems"] == 60
        assert 0 <= row["ci_low"] < row["mean"] < row["ci_high"] <= 1
        assert row["ci_high"] - row["ci_low"] > row["seed_ci_high"] - row["seed_ci_low"]


def test_the_comparison_is_decided_on_the_two_way_test():
    runs, outcomes = grid()
    t = two_way_vs_baseline(runs, outcomes, "accuracy", "base", correction="bonferroni", alpha=0.05).iloc[0]
    assert t["unit"] == BOTH and t["ci_low"] < t["delta"] < t["ci_high"]
    assert t["seed_p"] < 0.05 < t["p"]  # 60 problems: seeds alone see a difference the problems do not carry
    assert not t["significant"] and t["seed_significant"]
    assert t["adj_ci_low"] == t["ci_low"]  # m = 1: the corrected interval is the plain one


def test_without_outcomes_a_cell_keeps_the_seed_only_numbers_and_says_so():
    runs, _ = grid()
    empty = pd.DataFrame(columns=["run_id", "id", "split", "correct", "correct_flexible"])
    t = two_way_vs_baseline(runs, empty, "accuracy", "base", correction="none", alpha=0.05).iloc[0]
    assert t["unit"] == "seeds" and t["p"] == t["seed_p"] and math.isnan(t["adj_ci_low"])
    one = two_way_summary(runs[runs["seed"] == 0], empty, "accuracy")
    assert one["ci_low"].isna().all()  # one seed: no interval at all


def test_a_cell_is_an_arm_not_every_run_of_its_method():
    """Two arms of one method (full fine-tuning "arm" and "arm (LoRA)", as lora_factorial's): each cell's
    outcomes are its own arm's runs, as the seed-only table's are (they once pooled both arms' runs)."""
    runs, outcomes = grid()
    lora = runs[runs["method"] == "arm"].assign(run_id=lambda r: r["run_id"] + "-lora", accuracy=0.0)
    zero = outcomes[outcomes["run_id"].str.startswith("arm")].assign(
        run_id=lambda o: o["run_id"] + "-lora", correct=False
    )
    runs = pd.concat([runs, lora], ignore_index=True)
    runs["arm"] = runs["method"] + np.where(runs["run_id"].str.endswith("-lora"), " (LoRA)", "")
    outcomes = pd.concat([outcomes, zero], ignore_index=True)
    table = two_way_summary(runs, outcomes, "accuracy").set_index("method")
    assert (table["unit"] == BOTH).all() and table.loc["arm (LoRA)", "mean"] == 0.0
    assert table.loc["arm", "ci_low"] < table.loc["arm", "mean"] < table.loc["arm", "ci_high"]
    t = two_way_vs_baseline(runs, outcomes, "accuracy", "base", correction="none", alpha=0.05)
    t = t.set_index("method")
    full = runs[runs["arm"] == "arm"]["accuracy"].mean()
    assert t.loc["arm", "delta"] == pytest.approx(full - t.loc["arm", "baseline_mean"])
    assert t.loc["arm (LoRA)", "unit"] == BOTH and t.loc["arm (LoRA)", "p"] < 0.05
