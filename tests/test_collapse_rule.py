"""The pre-registered collapse rule (docs/collapse_rule.md) and η_max(S) from its labels (issue 27.1)."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import collapse_rule as cr
from analysis import staleness_relabel as sr

ROOT = Path(__file__).resolve().parents[1]
STALENESS = ROOT / "results" / "staleness"


def record(accuracy_flexible=0.8, base=0.9, *, n=8, b_p=8, collapse=None, verified=None) -> dict:
    m = {"accuracy_flexible": accuracy_flexible, "base_accuracy_flexible": base,
         "accuracy_verified_flexible": verified, "base_accuracy_verified_flexible": base}  # fmt: skip
    return {"config": {"online": {"n": n, "prompts_per_batch": b_p}}, "metrics": m, "collapse": collapse}


def history(rewards) -> list[dict]:
    return [{"round": i, "reward_mean": r} for i, r in enumerate(rewards)]


def test_the_window_holds_at_least_four_rounds_and_256_rollouts():
    assert cr.window_rounds(64) == 4
    assert cr.window_rounds(256) == 4
    assert cr.window_rounds(8) == 32
    assert cr.window_rounds(48) == 6


def test_a_rise_and_fall_is_a_collapse_the_first_window_rule_misses():
    rewards = np.r_[[0.2] * 4, [0.8] * 8, [0.3] * 4]
    r = cr.reward_condition(rewards, 4)
    assert r["peak"] == pytest.approx(0.8) and r["last"] == pytest.approx(0.3)
    assert r["fired"]  # 0.3 < 0.5 * 0.8 (peak) although 0.3 > 0.5 * 0.2 (the first window)
    assert not cr.reward_condition(np.r_[[0.2] * 4, [0.8] * 8, [0.45] * 4], 4)["fired"]


def test_a_run_shorter_than_two_windows_is_not_judged_on_reward():
    r = cr.reward_condition(np.array([0.8, 0.8, 0.8, 0.1, 0.1, 0.1, 0.1]), 4)
    assert not r["judged"] and not r["fired"]


def test_rows_of_one_round_are_averaged_and_old_records_count_rows():
    rows = [
        {"round": 0, "reward_mean": 0.2},
        {"round": 0, "reward_mean": 0.4},
        {"round": 1, "reward_mean": 1.0},
    ]
    assert cr.round_rewards(rows).tolist() == pytest.approx([0.3, 1.0])
    assert cr.round_rewards([{"reward_mean": 0.1}, {"reward_mean": 0.2}]).tolist() == [0.1, 0.2]


def test_judge_run_fails_on_lost_accuracy_whatever_the_reward():
    steady = history([0.5] * 20)
    assert not cr.judge_run(record(0.8, 0.9), steady)["failed"]
    lost = cr.judge_run(record(0.4, 0.9), steady)
    assert lost["failed"] and lost["A"] and not lost["R"] and lost["reasons"] == "A"
    verified = cr.judge_run(record(0.8, 0.9, verified=0.3), steady)
    assert verified["A_verified"] and not verified["failed"]  # a sensitivity column, not the label


def test_the_learning_curve_condition_and_the_non_finite_stop():
    curve = [{"rollouts": 0, "accuracy_flexible": 1.0}, {"rollouts": 256, "accuracy_flexible": 0.4}]
    assert cr.judge_run(record(), history([0.5] * 20), curve)["reasons"] == "C"
    stopped = record(collapse={"step": 3, "reason": "non-finite loss (nan) at step 3"})
    out = cr.judge_run(stopped, history([0.5] * 3))
    assert out["N"] and out["failed"] and out["old"]


def test_the_step_scale_is_one_without_an_lr_scaling_correction():
    plain = [
        {"lr": 1e-4, "lr_effective": 5e-5},
        {"lr": 1e-4, "lr_effective": 1e-4},
        {"lr": 1e-4, "lr_effective": 1e-4},
    ]
    assert cr.step_scale(plain) == 1.0
    scaled = [
        {"lr": 1e-4, "lr_effective": 5e-5},
        {"lr": 1e-4, "lr_effective": 5e-5},
        {"lr": 1e-4, "lr_effective": 2.5e-5},
    ]
    assert cr.step_scale(scaled) == pytest.approx(0.375)
    assert math.isnan(cr.step_scale([{"lr": 1e-4}]))


def labels_frame(cells: dict) -> pd.DataFrame:
    """cells: (correction, S, lr) -> list of failed flags (one per seed)."""
    rows = []
    for (corr, s, lr), flags in cells.items():
        for seed, f in enumerate(flags):
            arm = {"loss.is_correction": corr, "online.staleness": s, "train.lr": lr}
            rows.append({"grid": "g", "run_id": f"{corr}-{s}-{lr}-{seed}", "arm": json.dumps(arm, sort_keys=True),
                         "correction": corr, "S": s, "lr": lr, "seed": seed, "failed": f, "lr_effective": lr,
                         "fingerprint": f"{corr}-{s}-{lr}-{seed}"})  # fmt: skip
    return pd.DataFrame(rows)


LRS = (1e-4, 2e-4, 4e-4, 8e-4)


def grid(first_failed: dict[int, int], corr: str = "none") -> dict:
    """Each S stable (both seeds) below the LR index ``first_failed[S]`` and failed from it on."""
    return {(corr, s, lr): [i >= j] * 2 for s, j in first_failed.items() for i, lr in enumerate(LRS)}


def test_brackets_and_the_grid_resolution_interval_of_the_slope():
    lab = labels_frame(grid({0: 2, 1: 2, 2: 2, 4: 2, 8: 2}))
    table = sr.eta_brackets(lab)
    assert (table["lo"] == 2e-4).all() and (table["hi"] == 4e-4).all() and not table["split"].any()
    out = sr.slope_intervals(table)
    x = np.log([1, 2, 4, 8])
    half = math.log(2) * 0.5 * np.abs(x - x.mean()).sum() / ((x - x.mean()) ** 2).sum()
    assert out["slope"] == pytest.approx(0.0)
    assert out["grid_lo"] == pytest.approx(-half) and out["grid_hi"] == pytest.approx(half)
    assert sr.slope_verdict((out["grid_lo"], out["grid_hi"]), (0.0, 0.0)).startswith("no fall")


def test_a_censored_bracket_makes_the_slope_untestable():
    table = sr.eta_brackets(labels_frame(grid({1: 2, 2: 2, 4: 0, 8: 2})))
    out = sr.slope_intervals(table)
    assert out["grid_lo"] == -math.inf and out["grid_hi"] > 0
    assert sr.slope_verdict((out["grid_lo"], out["grid_hi"]), (-0.2, -0.1)).startswith("untestable")
    falls = sr.slope_intervals(sr.eta_brackets(labels_frame(grid({1: 2, 2: 2, 4: 0, 8: 0}))))
    assert falls["grid_hi"] < 0  # below the grid at S = 4 and 8: a fall, of unknown size
    assert sr.slope_verdict((falls["grid_lo"], falls["grid_hi"]), (-0.6, -0.3)).startswith("η_max falls")
    assert sr.slope_verdict((-1.5, -1.2), (-1.4, -1.1)) == "η_max falls with S; the 1/S law is excluded"


def test_a_correction_raises_eta_max_only_with_disjoint_brackets():
    lab = labels_frame({**grid({4: 1}, "none"), **grid({4: 3}, "decoupled"), **grid({4: 2}, "tis")})
    table = sr.eta_brackets(lab)
    assert sr.separable(table, "decoupled", "none", 4) == "raises"
    assert sr.separable(table, "none", "decoupled", 4) == "lowers"
    assert sr.separable(table, "tis", "none", 4) == "raises"  # [2e-4, 4e-4] vs [1e-4, 2e-4]: touching counts
    assert sr.separable(table, "tis", "decoupled", 4) == "lowers"


def test_s0_cells_of_every_correction_are_one_on_policy_run():
    lab = labels_frame({**grid({0: 2, 1: 2}, "none"), **grid({0: 2, 1: 1}, "tis")})
    u = sr.unique_runs(lab)
    assert (u["S"] == 0).sum() == len(LRS) * 2 and (u["S"] == 1).sum() == 2 * len(LRS) * 2
    table = sr.eta_brackets(lab)
    assert table.loc[table["S"] == 0, "shared"].tolist() == [2, 2]


@pytest.fixture(scope="module")
def committed() -> pd.DataFrame:
    if not STALENESS.is_dir():
        pytest.skip("no committed staleness records")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cr.label_runs(STALENESS)


def test_on_the_committed_records_no_stable_run_has_lost_half_its_arithmetic(committed):
    assert len(committed) == 120
    stable = committed[~committed["failed"]]
    assert (stable["accuracy_flexible"] >= 0.5 * stable["base_accuracy_flexible"]).all()
    assert committed.loc[committed["old"], "failed"].all()  # the rule never clears an engine flag
    assert (committed.loc[committed["ess_lr"] == "none", "step_scale"] == 1.0).all()


def test_on_the_committed_records_s0_is_eight_runs_and_eta_max_falls_to_the_grid_bottom(committed):
    u = sr.unique_runs(committed)
    assert (u["S"] == 0).sum() == 8 and len(u) == 104
    table = sr.eta_brackets(committed)
    s0 = table[table["S"] == 0]
    assert (s0["eta_max"] == s0["eta_max"].iloc[0]).all() and (s0["shared"] == 3).all()
    assert (table.loc[table["S"] == 8, "eta_max"] <= 1.8e-4 + 1e-12).all()


def test_a_follow_up_grid_pools_with_its_study_under_one_correction_name():
    """A grid that varies no correction (its arm names none) runs the coupled clip; one that pins seeds
    or rates in its variants runs the correction its keys name: each spelled as the study spells it."""
    study = {"loss.is_cap": None, "loss.is_correction": "none", "online.ess_lr": "none", "train.lr": 1e-4}
    plain = {"method": "sgrpo", "online.staleness": 1, "train.lr": 2.4e-4}
    tis = {"loss.is_cap": 2.0, "loss.is_correction": "tis_token", "seed": 3, "train.lr": 1e-4}
    names = [sr.canonical_correction(json.dumps(a)) for a in (study, plain, tis)]
    assert names[0] == names[1] == "loss.is_cap=None loss.is_correction=none online.ess_lr=none"
    assert names[2] == "loss.is_cap=2.0 loss.is_correction=tis_token online.ess_lr=none"
