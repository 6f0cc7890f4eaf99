"""The study scripts decide on seeds × problems (issue 40, items 5 and 8): IsoCompute's comparisons over
validation problems two-way with the Wilcoxon test beside, the summed learning rate of a matched-M
comparison, identical arms merged in every leaderboard, the testbed's gains two-way against a base at 0."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
from run_records import run_record, write_run

from analysis import isocompute as iso
from analysis import isocompute_confound as ic
from analysis.units import duplicate_arms, duplicate_note, merged_arms, merged_label

LONG_WARMUP = {"warmup_ratio": 0.5, "warmup_steps": None, "schedule": "constant", "min_lr_ratio": 0.0}


def test_cumulative_lr_gives_the_larger_n_six_times_at_matched_updates():
    """n = 2 and n = 8 at B_p = 4 and C = 4,096: 512 and 128 updates, warm-up over half of each, the step
    √4 = 2 times larger for n = 8. At M = 128, n = 2 is half-way up its warm-up (Σ = 128·129/2/257) and
    n = 8 is done (64·65/2/65 + 64 = 96): 2 · 96 / 32.1 = 5.98 times the summed learning rate."""
    small = ic.cumulative_lr(1.0, 128, 512, LONG_WARMUP)
    large = ic.cumulative_lr(2.0, 128, 128, LONG_WARMUP)
    assert small == pytest.approx(128 * 129 / 2 / 257) and large == pytest.approx(2 * 96)
    assert large / small == pytest.approx(5.98, abs=0.01)
    short = {**LONG_WARMUP, "warmup_steps": 10}
    assert ic.cumulative_lr(1.0, 20, 512, short) == pytest.approx(sum(range(1, 11)) / 11 + 10)
    cosine = {**LONG_WARMUP, "warmup_ratio": 0.0, "schedule": "cosine"}
    assert ic.cumulative_lr(1.0, 100, 100, cosine) == pytest.approx(50.0, abs=0.6)


def curves(counts: dict[int, list[list[int]]], rollouts=(0, 4096)) -> pd.DataFrame:
    """One curve per (n, seed): 4 samples per problem, the correct counts given at the last point and
    1 of 4 at rollouts 0; lr by the √B rule from 1e-4 at B = 128."""
    rows = []
    for n, seeds in counts.items():
        for s, final in enumerate(seeds):
            for c in rollouts:
                rows.append(
                    {
                        "run_id": f"n{n}-s{s}",
                        "subset": "hard",
                        "n": n,
                        "B_p": 4,
                        "seed": s,
                        "rollouts": c,
                        "samples_per_problem": 4,
                        "correct_counts": final if c else [1] * len(final),
                        "lr": 1e-4 * (4 * n / 128) ** 0.5,
                        "rollouts_max": max(rollouts),
                    }
                )
    return pd.DataFrame(rows)


def test_paired_by_problem_is_two_way_with_the_wilcoxon_test_beside():
    rng = np.random.default_rng(0)
    data = {
        2: [list(rng.integers(0, 3, 30)) for _ in range(3)],
        8: [list(rng.integers(1, 5, 30)) for _ in range(3)],
    }
    out = iso.paired_by_problem(iso.at_compute(curves(data), 4096), 2, 8, k=2, kind="best")
    assert out["ci_low"] < out["delta"] < out["ci_high"] and 0 < out["two_way_p"] < 0.05
    assert 0 < out["p"] < 0.05 and out["problems"] == 30
    one = iso.paired_by_problem(
        iso.at_compute(curves({2: data[2][:1], 8: data[8][:1]}), 4096), 2, 8, k=2, kind="best"
    )
    assert np.isnan(one["two_way_p"]) and one["p"] < 0.05  # one run a side: no seed variance, no two-way test


def test_versus_control_and_matched_updates_carry_the_two_way_numbers():
    rng = np.random.default_rng(1)
    real = curves({2: [list(rng.integers(2, 5, 20)) for _ in range(3)]})
    control = curves({2: [list(rng.integers(0, 3, 20)) for _ in range(3)]})
    (best, worst) = ic.versus_control(real, control, 4096, k=2)
    assert best["claim"] and best["two_way_difference"] > 0 and best["two_way_p"] < 0.05
    assert best["two_way_holm"] == pytest.approx(best["two_way_p"]) and "two_way_holm" not in worst
    grid = curves({2: [[2] * 10] * 2, 8: [[3] * 10] * 2}, rollouts=tuple(range(0, 4097, 256)))
    rows = ic.matched_updates(grid, 2, 8, 4, k=2, train=LONG_WARMUP)
    assert rows[0]["M"] == 128 and rows[0]["lr_sum_b"] / rows[0]["lr_sum_a"] == pytest.approx(5.98, abs=0.01)
    assert "lr_sum_a" not in ic.matched_updates(grid, 2, 8, 4, k=2)[0]


def test_a_set_merged_through_a_third_arm_states_its_own_agreement(tmp_path):
    """b repeats a on 99.5%, c repeats b on 99.5%: one set, and c's agreement with a (99.0%) is given,
    not NaN."""
    base = ["x"] * 200
    comps = {"a": base, "b": base[:-1] + ["y"], "c": base[:-2] + ["y", "z"]}
    rows = []
    for arm, comp in comps.items():
        (tmp_path / arm).mkdir()
        lines = [
            json.dumps({"id": str(i), "split": "test", "correct": False, "completion": c})
            for i, c in enumerate(comp)
        ]
        (tmp_path / arm / "eval.jsonl").write_text("\n".join(lines) + "\n")
        rows.append(
            {
                "scale": "s",
                "method": arm,
                "seed": 0,
                "run_id": arm,
                "path": str(tmp_path / arm),
                "accuracy": 0.5,
            }
        )
    dups = duplicate_arms(pd.DataFrame(rows))
    assert dups.set_index("duplicate")["min_agreement"].to_dict() == pytest.approx({"b": 0.995, "c": 0.99})
    assert merged_arms(dups) == {"a": ["b", "c"]} and merged_label("a", merged_arms(dups)) == "a (= b, c)"
    assert "≥ 99.0%" in duplicate_note(dups) and "so does the leaderboard" in duplicate_note(
        dups, merged=True
    )


N = 40


def format_grid(root):
    """A format testbed: the base strict 0 (so its per-problem outcomes are known: all wrong), three
    methods × 3 seeds, sft and sft_copy the same completions (merged)."""
    for method, right in (("sft", 30), ("sft_copy", 30), ("dpo", 20)):
        for seed in range(3):
            k = right + seed
            outcomes = [
                {
                    "id": f"q{i}",
                    "split": "test",
                    "correct": i < k,
                    "correct_flexible": i < k + 5,
                    "completion": f"{i < k}{seed}{i}",
                }
                for i in range(N)
            ]
            metrics = {
                "accuracy": k / N,
                "accuracy_flexible": (k + 5) / N,
                "accuracy_verified": k / N,
                "accuracy_verified_flexible": (k + 5) / N,
                "base_accuracy": 0.0,
                "base_accuracy_flexible": 0.9,
                "base_accuracy_verified_flexible": 0.9,
                "chance": 0.02,
            }
            rec = run_record(
                method,
                "tiny-m",
                seed,
                scale_params=800_000,
                paradigm="offline",
                metrics=metrics,
                run_id=f"{method}-s{seed}",
            )
            write_run(root, rec, outcomes=outcomes)
    return root / "g1"


def test_testbed_targets_and_study_summary_decide_two_way_with_seed_only_beside(
    tmp_path, capsys, monkeypatch
):
    root = format_grid(tmp_path)
    from analysis import study_summary, testbed_targets

    monkeypatch.setattr(sys, "argv", ["testbed_targets", str(root)])
    testbed_targets.main()
    out = capsys.readouterr().out
    assert "Δ strict: two-way against the base [95% CI] (unit: seeds × problems)" in out
    assert "| sft (= sft_copy) | 3 |" in out and "| sft_copy |" not in out
    row = next(line for line in out.splitlines() if line.startswith("| dpo |"))
    assert "+52.5 [" in row  # (20 + 21 + 22) / 120 right against a base with none
    monkeypatch.setattr(sys, "argv", ["study_summary", str(root), "--baseline", "dpo"])
    study_summary.main()
    out = capsys.readouterr().out
    assert "sft (= sft_copy)" in out and "seeds × problems" in out and "seed_p_adj" in out


def test_study_summary_adds_the_metrics_asked_for_and_names_a_missing_one(tmp_path, capsys, monkeypatch):
    """``--metrics``: a task's own metrics (Countdown's format share, pass@k) join the scores table."""
    root = format_grid(tmp_path)
    from analysis import study_summary

    monkeypatch.setattr(sys, "argv", ["study_summary", str(root), "--baseline", "dpo", "--metrics", "chance"])
    study_summary.main()
    table = capsys.readouterr().out.split("\nscores (%)")[1].split("\n\n")[0]
    assert table.splitlines()[1].split()[-1] == "chance"
    assert all(line.split()[-1] == "2.0" for line in table.splitlines()[2:])  # 0.02, in percent
    monkeypatch.setattr(sys, "argv", ["study_summary", str(root), "--metrics", "pass_at_7"])
    with pytest.raises(SystemExit, match=r"--metrics: the records have no \['pass_at_7'\]"):
        study_summary.main()
