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


def test_the_window_of_version_3_holds_at_least_four_rounds_and_64_prompts():
    assert cr.VERSION == 3  # the primary label
    assert cr.window_rounds(4, 16) == 16  # B_p = 4: 16 rounds, whatever n
    assert cr.window_rounds(4, 64) == cr.window_rounds(4, 2) == 16
    assert cr.window_rounds(16, 4) == 4  # B_p = 16: 4 rounds
    assert cr.window_rounds(8, 8) == 8  # the staleness cells (B_p = 8, n = 8)
    assert cr.window_rounds(64, 1) == cr.window_rounds(256, 1) == 4  # never under 4 rounds
    assert cr.window_rounds(5, 8) == 13  # ⌈64 / 5⌉


def test_version_2_keeps_the_window_of_256_rollouts():
    assert cr.window_rounds(16, 4, version=2) == 4
    assert cr.window_rounds(64, 4, version=2) == 4
    assert cr.window_rounds(8, 8, version=2) == 4  # the staleness cells: 4 rounds, not version 3's 8
    assert cr.window_rounds(4, 2, version=2) == 32
    assert cr.window_rounds(4, 8, version=2) == 8  # oxrl_skill: 8 rounds, version 3's 16
    assert cr.window_rounds(16, 3, version=2) == 6  # ⌈256 / 48⌉
    assert (
        cr.window_rounds(4, 4, version=2) == cr.window_rounds(4, 4) == 16
    )  # n = 4: 256 rollouts are 64 prompts
    with pytest.raises(ValueError, match="versions"):
        cr.window_rounds(16, 4, version=1)
    with pytest.raises(ValueError):
        cr.window_rounds(0, 4)


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


def test_a_run_whose_label_differs_between_the_versions():
    """B_p = 4, n = 8 (as oxrl_skill): version 2's window is 8 rounds, version 3's 16. A burst of 8 good
    rounds is version 2's peak window, and the reward after it is below half of it; over 16 rounds the
    burst is averaged with the rounds around it and the last window is not below half the peak."""
    rewards = [0.2] * 8 + [0.6] * 8 + [0.22] * 16
    run = record(0.8, 0.9, n=8, b_p=4)
    v2 = cr.judge_run(run, history(rewards), version=2)
    v3 = cr.judge_run(run, history(rewards))
    assert (v2["window"], v3["window"]) == (8, 16) and v2["judged"] and v3["judged"]
    assert v2["peak"] == pytest.approx(0.6) and v3["peak"] == pytest.approx(0.41)
    assert v2["failed"] and v2["reasons"] == "R" and not v3["failed"] and v3["reasons"] == ""
    assert (v2["version"], v3["version"], v3["B_p"], v3["n"], v3["B"]) == (2, 3, 4, 8, 32)
    # and the other way: B_p = 16, n = 2 has version 2's 8 rounds and version 3's 4
    dip = [0.5] * 12 + [0.1] * 4
    assert not cr.judge_run(record(n=2, b_p=16), history(dip), version=2)["failed"]  # 16 < 2 x 8: not judged
    assert cr.judge_run(record(n=2, b_p=16), history(dip))["reasons"] == "R"


def test_the_fractions_are_parameters_of_the_rule():
    rewards = history([0.8] * 8 + [0.36] * 4)  # last 0.36 against a peak of 0.8: 0.45 of it
    run = record(0.42, 0.9, b_p=16)  # 0.47 of the base's flexible accuracy; a window of 4 rounds
    at = {f: cr.judge_run(run, rewards, reward_fraction=f, accuracy_fraction=f) for f in (0.4, 0.5, 0.6)}
    assert at[0.5] == cr.judge_run(run, rewards)  # 0.5 is the default of both
    assert at[0.4]["reasons"] == "" and not at[0.4]["failed"]
    assert at[0.5]["reasons"] == "R+A" and at[0.6]["reasons"] == "R+A"
    assert cr.judge_run(run, rewards, reward_fraction=0.4)["reasons"] == "A"  # each on its own
    assert cr.judge_run(run, rewards, accuracy_fraction=0.4)["reasons"] == "R"
    assert (at[0.6]["reward_fraction"], at[0.6]["accuracy_fraction"]) == (0.6, 0.6)
    curve = [{"rollouts": 0, "accuracy_flexible": 1.0}, {"rollouts": 256, "accuracy_flexible": 0.45}]
    assert not cr.curve_condition(curve, 0.4) and cr.curve_condition(curve) and cr.curve_condition(curve, 0.6)
    assert cr.reward_condition(np.r_[[0.8] * 8, [0.36] * 4], 4, 0.4)["fired"] is False


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


def _label_staleness(version: int, fraction: float = 0.5) -> pd.DataFrame:
    if not STALENESS.is_dir():
        pytest.skip("no committed staleness records")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cr.label_runs(STALENESS, version=version, reward_fraction=fraction, accuracy_fraction=fraction)


@pytest.fixture(scope="module")
def committed() -> pd.DataFrame:
    return _label_staleness(3)


@pytest.fixture(scope="module")
def committed_v2() -> pd.DataFrame:
    return _label_staleness(2)


def test_on_the_committed_records_no_stable_run_has_lost_half_its_arithmetic(committed, committed_v2):
    assert len(committed) == 120 and (committed["version"] == 3).all()
    stable = committed[~committed["failed"]]
    assert (stable["accuracy_flexible"] >= 0.5 * stable["base_accuracy_flexible"]).all()
    assert committed_v2.loc[committed_v2["old"], "failed"].all()  # version 2 never clears an engine flag
    # version 3's window is 8 rounds here (B_p = 8), not the engine's 4: one flagged run stopped at
    # round 17 is judged on 8-round windows and is stable (the rule page's erratum to version 3)
    cleared = committed[committed["old"] & ~committed["failed"]]
    assert cleared["run_id"].tolist() == ["tiny-m-sgrpo-s0-0b6a8c7104"] and cleared["rounds"].tolist() == [17]
    assert (committed.loc[committed["ess_lr"] == "none", "step_scale"] == 1.0).all()


def test_on_the_committed_records_the_versions_differ_in_two_labels(committed, committed_v2):
    assert (committed_v2["window"] == 4).all() and (committed["window"] == 8).all()
    both = committed.merge(committed_v2, on="run_id", suffixes=("", "_v2"), validate="one_to_one")
    changed = both[both["failed"] != both["failed_v2"]]
    assert sorted(changed["run_id"]) == ["tiny-m-sgrpo-s0-0b6a8c7104", "tiny-m-sgrpo-s1-3d88edee83"]
    assert (
        (changed["reasons_v2"] == "R").all()
        and (changed["reasons"] == "").all()
        and (changed["S"] == 8).all()
    )


def test_on_the_committed_records_a_lower_cut_off_only_clears_runs(committed, committed_v2):
    """label_runs passes both fractions to every record; a lower one can only turn failures stable."""
    low = _label_staleness(3, 0.4)
    assert (low[["version", "reward_fraction", "accuracy_fraction"]] == [3, 0.4, 0.4]).all().all()
    assert (committed_v2["version"] == 2).all() and (committed["reward_fraction"] == 0.5).all()
    assert low["run_id"].tolist() == committed["run_id"].tolist()
    assert (
        not (low["failed"] & ~committed["failed"]).any() and low["failed"].sum() < committed["failed"].sum()
    )


def test_on_the_committed_records_s0_is_eight_runs_and_eta_max_at_s8(committed, committed_v2):
    u = sr.unique_runs(committed)
    assert (u["S"] == 0).sum() == 8 and len(u) == 104
    table, table_v2 = sr.eta_brackets(committed), sr.eta_brackets(committed_v2)
    s0 = table[table["S"] == 0]
    assert (s0["eta_max"] == s0["eta_max"].iloc[0]).all() and (s0["shared"] == 3).all()
    # version 2 (2 seeds): every correction at the grid's 1.8e-4 at S = 8; version 3 lifts the coupled
    # clip's to 2.4e-4, its seed-0 run at 1.8e-4 now stable
    assert (table_v2.loc[table_v2["S"] == 8, "eta_max"] <= 1.8e-4 + 1e-12).all()
    at8 = table[table["S"] == 8]
    coupled = at8["correction"].str.contains("is_correction=none")
    assert at8.loc[coupled, "eta_max"].tolist() == pytest.approx([2.4e-4])
    assert (at8.loc[~coupled, "eta_max"] <= 1.8e-4 + 1e-12).all()


def test_a_follow_up_grid_pools_with_its_study_under_one_correction_name():
    """A grid that varies no correction (its arm names none) runs the coupled clip; one that pins seeds
    or rates in its variants runs the correction its keys name: each spelled as the study spells it."""
    study = {"loss.is_cap": None, "loss.is_correction": "none", "online.ess_lr": "none", "train.lr": 1e-4}
    plain = {"method": "sgrpo", "online.staleness": 1, "train.lr": 2.4e-4}
    tis = {"loss.is_cap": 2.0, "loss.is_correction": "tis_token", "seed": 3, "train.lr": 1e-4}
    names = [sr.canonical_correction(json.dumps(a)) for a in (study, plain, tis)]
    assert names[0] == names[1] == "loss.is_cap=None loss.is_correction=none online.ess_lr=none"
    assert names[2] == "loss.is_cap=2.0 loss.is_correction=tis_token online.ess_lr=none"
