"""analysis.stats against scipy and hand-computed values."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import analysis

PARADIGMS = {"sft": "sft", "dpo": "offline", "simpo": "offline_ref_free", "kto": "unpaired", "grpo": "online"}


def runs(cells: dict[tuple[str, str], list[float]], params: dict[str, int] | None = None) -> pd.DataFrame:
    """Run table: {(scale, method): [value per seed]} -> one row per seed, as load_runs would give."""
    params = params or {}
    rows = [
        {
            "scale": scale,
            "scale_params": params.get(scale, 1),
            "method": method,
            "paradigm": PARADIGMS[method],
            "seed": seed,
            "lora": False,
            "run_id": f"{scale}-{method}-{seed}",
            "accuracy": value,
        }
        for (scale, method), values in cells.items()
        for seed, value in enumerate(values)
    ]
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# summarize
# ---------------------------------------------------------------------------------------------


def test_summarize_by_hand():
    """Seeds 2, 0, 1 with values 0.6, 0.2, 0.4.

    mean 0.4; std = sqrt((0.04 + 0 + 0.04)/2) = 0.2; sem = 0.2/sqrt(3) = 0.115470;
    t_{0.975, 2} = 4.302653 so the t-interval is 0.4 ± 4.302653·0.115470 = 0.4 ± 0.496828.
    Bootstrap: the 27 equally likely resamples of 3 values have P(all = 0.2) = P(all = 0.6) = 1/27
    = 3.7% > 2.5%, so the 2.5% / 97.5% percentiles are exactly 0.2 and 0.6.
    ``values`` is ordered by seed: [0.2, 0.4, 0.6].
    """
    df = pd.DataFrame({"scale": "s", "method": "dpo", "seed": [2, 0, 1], "accuracy": [0.6, 0.2, 0.4]})
    row = analysis.summarize(df).iloc[0]
    assert row["n"] == 3 and row["mean"] == pytest.approx(0.4)
    assert row["std"] == pytest.approx(0.2) and row["sem"] == pytest.approx(0.115470, abs=1e-6)
    assert row["ci_low"] == pytest.approx(0.4 - 0.496828, abs=1e-6)
    assert row["ci_high"] == pytest.approx(0.4 + 0.496828, abs=1e-6)
    assert row["boot_low"] == pytest.approx(0.2) and row["boot_high"] == pytest.approx(0.6)
    assert row["values"] == [0.2, 0.4, 0.6]


def test_summarize_bootstrap_is_seeded_and_narrows_with_level():
    values = [0.31, 0.35, 0.42, 0.44, 0.47, 0.52]
    df = pd.DataFrame({"scale": "s", "method": "dpo", "seed": range(6), "accuracy": values})
    a, b = analysis.summarize(df, n_boot=2000, seed=3), analysis.summarize(df, n_boot=2000, seed=3)
    assert a.equals(b)
    c = analysis.summarize(df, n_boot=2000, seed=4)
    assert (a["boot_low"].iloc[0], a["boot_high"].iloc[0]) != (c["boot_low"].iloc[0], c["boot_high"].iloc[0])
    narrow = analysis.summarize(df, ci=0.5, n_boot=2000).iloc[0]
    wide = analysis.summarize(df, ci=0.95, n_boot=2000).iloc[0]
    assert wide["boot_low"] < narrow["boot_low"] < np.mean(values) < narrow["boot_high"] < wide["boot_high"]
    assert wide["ci_low"] < narrow["ci_low"] and narrow["ci_high"] < wide["ci_high"]


def test_summarize_single_seed_zero_variance_nan_and_scale_order():
    df = runs(
        {("big", "dpo"): [0.7], ("small", "dpo"): [0.5, 0.5], ("small", "simpo"): [0.4, math.nan, 0.6]},
        params={"big": 100, "small": 10},
    )
    out = analysis.summarize(df, n_boot=100)
    assert out[["scale", "method"]].values.tolist() == [["small", "dpo"], ["small", "simpo"], ["big", "dpo"]]
    single = out.iloc[2]
    assert single["n"] == 1 and single["mean"] == 0.7 and single["values"] == [0.7]
    assert all(math.isnan(single[c]) for c in ["std", "sem", "ci_low", "ci_high", "boot_low", "boot_high"])
    flat = out.iloc[0]
    assert (
        flat["std"] == 0 and flat["ci_low"] == flat["ci_high"] == flat["boot_low"] == flat["boot_high"] == 0.5
    )
    assert out.iloc[1]["n"] == 2 and out.iloc[1]["values"] == [0.4, 0.6]  # the NaN seed is dropped


# ---------------------------------------------------------------------------------------------
# Welch
# ---------------------------------------------------------------------------------------------


def test_welch_by_hand():
    """a = [1, 2, 3], b = [1, 3, 5].

    s_a² = 1, s_b² = 4; v_a = 1/3, v_b = 4/3; Δ = 2 − 3 = −1; se = sqrt(5/3) = 1.290994;
    t = −1/1.290994 = −0.774597.
    Welch df = (5/3)² / ((1/3)²/2 + (4/3)²/2) = (25/9) / (17/18) = 50/17 = 2.941176.
    Cohen's d: s_p² = (2·1 + 2·4)/4 = 2.5, d = −1/sqrt(2.5) = −0.632456.
    Hedges: ν = 4, J = Γ(2)/(sqrt(2)·Γ(3/2)) = 1/(sqrt(2)·sqrt(π)/2) = sqrt(2/π) = 0.797885,
    g = −0.504627.
    """
    r = analysis.welch([1, 2, 3], [1, 3, 5])
    assert r["delta"] == pytest.approx(-1.0) and r["t"] == pytest.approx(-0.774597, abs=1e-6)
    assert r["df"] == pytest.approx(50 / 17)
    assert r["cohen_d"] == pytest.approx(-0.632456, abs=1e-6)
    assert analysis.hedges_j(4) == pytest.approx(math.sqrt(2 / math.pi))
    assert r["hedges_g"] == pytest.approx(-0.632456 * 0.797885, abs=1e-6)
    half = stats.t.ppf(0.975, 50 / 17) * math.sqrt(5 / 3)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((-1 - half, -1 + half))


def test_hedges_j_matches_the_usual_approximation():
    """J(ν) ≈ 1 − 3/(4ν − 1) to within 0.3% for ν ≥ 4 (Hedges 1981)."""
    for nu in (4, 8, 30):
        assert analysis.hedges_j(nu) == pytest.approx(1 - 3 / (4 * nu - 1), rel=3e-3)


@pytest.mark.parametrize("seed", range(5))
def test_welch_agrees_with_scipy(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(0.5, 0.05, size=rng.integers(2, 8))
    b = rng.normal(0.45, 0.1, size=rng.integers(2, 8))
    ref = stats.ttest_ind(a, b, equal_var=False)
    r = analysis.welch(a, b)
    assert r["p"] == pytest.approx(ref.pvalue, rel=1e-9)
    assert r["t"] == pytest.approx(ref.statistic, rel=1e-9)
    assert r["df"] == pytest.approx(ref.df, rel=1e-9)
    ci = ref.confidence_interval(0.95)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)


def test_welch_zero_variance_both_arms_does_not_crash():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apart = analysis.welch([0.6, 0.6, 0.6], [0.5, 0.5])
        same = analysis.welch([0.5, 0.5], [0.5, 0.5, 0.5])
    assert apart["t"] == math.inf and apart["p"] == 0.0 and math.isnan(apart["df"])
    assert apart["ci_low"] == apart["ci_high"] == pytest.approx(0.1) and apart["cohen_d"] == math.inf
    assert math.isnan(same["t"]) and same["p"] == 1.0 and math.isnan(same["cohen_d"])
    one = analysis.welch([0.6], [0.5, 0.7])
    assert math.isnan(one["p"]) and math.isnan(one["cohen_d"]) and one["delta"] == pytest.approx(0.0)


def test_adjust_pvalues_by_hand():
    """p = [0.01, 0.04, 0.03, 0.005], m = 4.

    Bonferroni: 4p = [0.04, 0.16, 0.12, 0.02].
    Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; running max
    0.02, 0.03, 0.06, 0.06; back in the original order [0.03, 0.06, 0.06, 0.02].
    A NaN stays NaN and is not counted in m; values are capped at 1.
    """
    p = [0.01, 0.04, 0.03, 0.005]
    assert analysis.adjust_pvalues(p, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert analysis.adjust_pvalues(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert analysis.adjust_pvalues(p, "none") == pytest.approx(p)
    with_nan = analysis.adjust_pvalues([0.2, math.nan, 0.7], "holm")
    assert with_nan[0] == pytest.approx(0.4) and math.isnan(with_nan[1]) and with_nan[2] == pytest.approx(0.7)
    assert analysis.adjust_pvalues([0.3, 0.6], "bonferroni") == pytest.approx([0.6, 1.0])
    with pytest.raises(ValueError, match="unknown correction 'bh'"):
        analysis.adjust_pvalues(p, "bh")


def test_welch_vs_baseline_corrects_within_each_scale():
    """Per scale, p_adj is the correction over that scale's methods only (here m = 2 and m = 1)."""
    df = runs(
        {
            ("s", "dpo"): [0.50, 0.52, 0.51],
            ("s", "simpo"): [0.60, 0.61, 0.63],
            ("s", "kto"): [0.50, 0.55, 0.49],
            ("l", "dpo"): [0.70, 0.72, 0.69],
            ("l", "simpo"): [0.71, 0.70, 0.74],
            ("x", "simpo"): [0.1, 0.2],  # no baseline at this scale: skipped
        },
        params={"s": 1, "l": 2, "x": 3},
    )
    out = analysis.welch_vs_baseline(df, correction="holm")
    assert out[["scale", "method"]].values.tolist() == [["s", "simpo"], ["s", "kto"], ["l", "simpo"]]
    ps = {}
    for scale, method in [("s", "simpo"), ("s", "kto"), ("l", "simpo")]:
        a = df[(df.scale == scale) & (df.method == method)]["accuracy"]
        b = df[(df.scale == scale) & (df.method == "dpo")]["accuracy"]
        ps[scale, method] = stats.ttest_ind(a, b, equal_var=False).pvalue
    assert out["p"].tolist() == pytest.approx(list(ps.values()), rel=1e-9)
    p1, p2 = sorted([ps["s", "simpo"], ps["s", "kto"]])
    holm_s = {ps["s", "simpo"]: min(1, 2 * p1), ps["s", "kto"]: min(1, max(2 * p1, p2))}
    assert out["p_adj"].iloc[:2].tolist() == pytest.approx([holm_s[ps["s", "simpo"]], holm_s[ps["s", "kto"]]])
    assert out["p_adj"].iloc[2] == pytest.approx(ps["l", "simpo"])
    assert out["significant"].tolist() == [bool(p < 0.05) for p in out["p_adj"]]
    assert out["significant"].iloc[0] and not out["significant"].iloc[2]
    assert out["baseline_mean"].iloc[0] == pytest.approx(0.51)
    bonf = analysis.welch_vs_baseline(df, correction="bonferroni")
    assert bonf["p_adj"].iloc[1] == pytest.approx(min(1, 2 * ps["s", "kto"]))


def test_welch_vs_baseline_degenerate_arms_and_unknown_baseline():
    """simpo/dpo both constant -> t = inf, p = 0; kto has one seed -> NaN, not counted in m.

    sft [0.3, 0.5] vs dpo [0.5, 0.5]: v_a = 0.02/2 = 0.01, v_b = 0, t = −0.1/0.1 = −1,
    df = 0.01²/(0.01²/1) = 1 (Cauchy), p = P(|T_1| > 1) = 0.5; Bonferroni over m = 2: p_adj = 1.
    """
    df = runs(
        {("s", "dpo"): [0.5, 0.5], ("s", "simpo"): [0.6, 0.6], ("s", "kto"): [0.4], ("s", "sft"): [0.3, 0.5]}
    )
    out = analysis.welch_vs_baseline(df, correction="bonferroni").set_index("method")
    assert (
        out.at["simpo", "t"] == math.inf and out.at["simpo", "p"] == 0 and not out.at["simpo", "significant"]
    )  # p = 0 but no variance: untestable
    assert (
        math.isnan(out.at["kto", "p"])
        and math.isnan(out.at["kto", "p_adj"])
        and not out.at["kto", "significant"]
    )
    assert out.at["sft", "t"] == pytest.approx(-1) and out.at["sft", "df"] == pytest.approx(1)
    assert out.at["sft", "p"] == pytest.approx(0.5) and out.at["sft", "p_adj"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"unknown baseline 'dp0'; did you mean \['dpo'\]"):
        analysis.welch_vs_baseline(df, baseline="dp0")
    with pytest.raises(ValueError, match="did you mean"):
        analysis.welch_vs_baseline(df, baseline="zzz")


# ---------------------------------------------------------------------------------------------
# McNemar and the paired bootstrap
# ---------------------------------------------------------------------------------------------


def table(both: int, a_only: int, b_only: int, neither: int) -> tuple[np.ndarray, np.ndarray]:
    a = [True] * both + [True] * a_only + [False] * b_only + [False] * neither
    b = [True] * both + [False] * a_only + [True] * b_only + [False] * neither
    return np.array(a), np.array(b)


def test_mcnemar_exact_and_chi2_by_hand():
    """2×2 table: both 5, a only 8, b only 1, neither 6 (n = 20).

    Exact: discordant n_d = 9, min = 1; P(X ≤ 1 | Bin(9, 1/2)) = (1 + 9)/512; p = 20/512 = 0.0390625.
    χ² (continuity-corrected): (|8 − 1| − 1)²/9 = 36/9 = 4; p = P(χ²_1 > 4) = 2(1 − Φ(2)) = 0.0455003.
    """
    a, b = table(5, 8, 1, 6)
    exact = analysis.mcnemar(a, b)
    assert (exact["both"], exact["a_only"], exact["b_only"], exact["neither"]) == (5, 8, 1, 6)
    assert exact["p"] == pytest.approx(20 / 512) and exact["statistic"] == 1
    assert exact["p"] == pytest.approx(stats.binomtest(8, 9, 0.5).pvalue)
    assert exact["delta"] == pytest.approx((13 - 6) / 20)
    chi2 = analysis.mcnemar(a, b, method="chi2")
    assert chi2["statistic"] == pytest.approx(4.0) and chi2["p"] == pytest.approx(0.0455003, abs=1e-7)
    assert chi2["p"] == pytest.approx(2 * stats.norm.sf(2))


def test_mcnemar_edge_cases():
    a, b = table(4, 0, 0, 3)
    assert analysis.mcnemar(a, b)["p"] == 1.0 and analysis.mcnemar(a, b, method="chi2")["p"] == 1.0
    a, b = table(0, 3, 3, 0)
    assert analysis.mcnemar(a, b)["p"] == 1.0 and analysis.mcnemar(a, b, method="chi2")["statistic"] == 0
    with pytest.raises(ValueError, match="unknown McNemar method"):
        analysis.mcnemar(a, b, method="midp")
    with pytest.raises(ValueError, match="boolean"):
        analysis.mcnemar([0.5, 1.0], [1, 0])


def test_outcomes_align_by_problem_id():
    a = pd.Series([True, True, False, True], index=["q1", "q2", "q3", "q4"])
    b = pd.Series([False, True, True, False], index=["q4", "q3", "q2", "q1"])
    # aligned: q1 (T, F), q2 (T, T), q3 (F, T), q4 (T, F) -> a_only 2, b_only 1, both 1
    r = analysis.mcnemar(a, b)
    assert (r["both"], r["a_only"], r["b_only"], r["neither"]) == (1, 2, 1, 0)
    boot = analysis.paired_bootstrap(a, b, n_boot=500)
    assert boot["delta"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match=r"problem ids differ: 1 only in a \(e.g. \['q4'\]\), 1 only in b"):
        analysis.mcnemar(a, b.rename({"q4": "q5"}))
    with pytest.raises(ValueError, match="duplicate problem ids"):
        analysis.mcnemar(a, b.rename({"q4": "q1"}))
    with pytest.raises(ValueError, match="both as arrays"):
        analysis.mcnemar(a, b.to_numpy())
    with pytest.raises(ValueError, match="differ in length"):
        analysis.paired_bootstrap([1, 0, 1], [1, 0])


def test_paired_bootstrap_degenerate_cases():
    """Δ_i all equal: every resample has mean Δ, so CI = [Δ, Δ]; |Δ* − Δ| = 0 < |Δ| gives p = 1/(B+1).
    Identical outcomes: Δ = 0 and p = 1."""
    r = analysis.paired_bootstrap([1, 1, 1, 1], [0, 0, 0, 0], n_boot=999)
    assert r["delta"] == 1 and r["ci_low"] == r["ci_high"] == 1 and r["p"] == pytest.approx(1 / 1000)
    same = analysis.paired_bootstrap([1, 0, 1], [1, 0, 1], n_boot=999)
    assert same["delta"] == 0 and same["p"] == 1 and same["ci_low"] == same["ci_high"] == 0


@pytest.mark.parametrize("scores", ["binary", "continuous"])
def test_paired_bootstrap_matches_normal_approximation(scores):
    """For n = 400 problems the percentile interval ≈ Δ ± 1.96·sd(d)/sqrt(n) and p ≈ the z-test.

    Binary outcomes go through the multinomial-over-distinct-values path, continuous scores (400
    distinct differences) through index resampling; both must approximate the same normal law.
    """
    rng = np.random.default_rng(1)
    if scores == "binary":
        a, b = rng.random(400) < 0.6, rng.random(400) < 0.5
    else:
        a, b = rng.random(400), rng.random(400) * 0.9
    d = a.astype(float) - b.astype(float)
    se = d.std(ddof=0) / math.sqrt(len(d))
    r = analysis.paired_bootstrap(a, b, n_boot=4000, seed=2)
    assert r["delta"] == pytest.approx(d.mean())
    assert r["ci_low"] == pytest.approx(d.mean() - 1.96 * se, abs=0.15 * se)
    assert r["ci_high"] == pytest.approx(d.mean() + 1.96 * se, abs=0.15 * se)
    assert r["p"] == pytest.approx(2 * stats.norm.sf(abs(d.mean()) / se), abs=0.02)
    assert analysis.paired_bootstrap(a, b, n_boot=4000, seed=2) == r


def outcome_rows(run_id: str, pattern: str, split: str = "test") -> list[dict]:
    return [
        {"run_id": run_id, "id": f"q{i}", "split": split, "correct": c == "1"} for i, c in enumerate(pattern)
    ]


def test_paired_vs_baseline_majority_and_mean_pooling():
    """Six problems, three seeds each.

    dpo seeds 110000, 100000, 111000 -> per-problem share 1, 2/3, 1/3, 0, 0, 0 -> majority 110000.
    simpo seeds 111100, 011110, 101100 -> share 2/3, 2/3, 1, 1, 1/3, 0 -> majority 111100.
    Majority: simpo solves q2, q3 that dpo does not (n_method_only = 2, n_baseline_only = 0);
    exact McNemar p = 2·P(X ≤ 0 | Bin(2, 1/2)) = 2/4 = 0.5; accuracy 4/6 vs 2/6.
    Mean pooling: accuracy = mean share = (2/3+2/3+1+1+1/3+0)/6 = 11/18 vs (1+2/3+1/3)/6 = 1/3.
    The ood row and the failed run (absent from runs_df) are ignored.
    """
    df = runs({("s", "dpo"): [0.0] * 3, ("s", "simpo"): [0.0] * 3})
    patterns = {"dpo": ["110000", "100000", "111000"], "simpo": ["111100", "011110", "101100"]}
    rows = [
        r for m, ps in patterns.items() for seed, p in enumerate(ps) for r in outcome_rows(f"s-{m}-{seed}", p)
    ]
    rows += outcome_rows("s-simpo-0", "0", split="ood") + outcome_rows("s-kto-0", "111111")
    outcomes = pd.DataFrame(rows)

    out = analysis.paired_vs_baseline(outcomes, df, n_boot=2000).iloc[0]
    assert out["method"] == "simpo" and out["n_seeds"] == 3 and out["baseline_n_seeds"] == 3
    assert out["n_problems"] == 6 and (out["n_method_only"], out["n_baseline_only"]) == (2, 0)
    assert out["accuracy"] == pytest.approx(4 / 6) and out["baseline_accuracy"] == pytest.approx(2 / 6)
    assert out["delta"] == pytest.approx(2 / 6) and out["mcnemar_p"] == pytest.approx(0.5)
    assert out["boot_low"] <= out["delta"] <= out["boot_high"] and out["mcnemar_p_adj"] == out["mcnemar_p"]

    mean = analysis.paired_vs_baseline(outcomes, df, pool="mean", n_boot=2000).iloc[0]
    assert mean["accuracy"] == pytest.approx(11 / 18) and mean["baseline_accuracy"] == pytest.approx(1 / 3)
    assert mean["delta"] == pytest.approx(11 / 18 - 1 / 3) and math.isnan(mean["mcnemar_p"])


def test_paired_vs_baseline_majority_tie_counts_as_unsolved_and_errors():
    """Two seeds 1 and 0 on a problem: share 1/2 is not a strict majority, so it is unsolved."""
    df = runs({("s", "dpo"): [0.0, 0.0], ("s", "simpo"): [0.0]})
    rows = outcome_rows("s-dpo-0", "10") + outcome_rows("s-dpo-1", "01") + outcome_rows("s-simpo-0", "11")
    out = analysis.paired_vs_baseline(pd.DataFrame(rows), df, n_boot=200).iloc[0]
    assert out["baseline_accuracy"] == 0 and out["accuracy"] == 1 and out["n_method_only"] == 2

    missing = outcome_rows("s-dpo-0", "10") + outcome_rows("s-dpo-1", "0") + outcome_rows("s-simpo-0", "11")
    with pytest.raises(ValueError, match=r"dpo at scale=s: run 's-dpo-1' has no 'correct' outcome for 1"):
        analysis.paired_vs_baseline(pd.DataFrame(missing), df, n_boot=200)
    other = outcome_rows("s-dpo-0", "10") + outcome_rows("s-dpo-1", "01") + outcome_rows("s-simpo-0", "111")
    with pytest.raises(ValueError, match=r"simpo at scale=s vs baseline: problem ids differ"):
        analysis.paired_vs_baseline(pd.DataFrame(other), df, n_boot=200)
    with pytest.raises(ValueError, match="did you mean"):
        analysis.paired_vs_baseline(pd.DataFrame(rows), df, baseline="dpp")
    with pytest.raises(ValueError, match="unknown pool"):
        analysis.paired_vs_baseline(pd.DataFrame(rows), df, pool="vote")


# ---------------------------------------------------------------------------------------------
# Rankings
# ---------------------------------------------------------------------------------------------


def test_rank_table_orders_scales_and_breaks_ties_with_min_rank():
    df = runs(
        {
            ("big", "dpo"): [0.5, 0.7],
            ("big", "simpo"): [0.6],
            ("big", "kto"): [0.1],
            ("small", "dpo"): [0.2],
            ("small", "simpo"): [0.3],
        },
        params={"big": 9, "small": 1},
    )
    out = analysis.rank_table(df, "accuracy")
    assert out.columns.tolist() == ["scale", "method", "n", "mean", "rank"]
    assert out[["scale", "method", "rank"]].values.tolist() == [
        ["small", "simpo", 1],
        ["small", "dpo", 2],
        ["big", "dpo", 1],  # dpo 0.6 ties simpo 0.6: both rank 1, names break the row order
        ["big", "simpo", 1],
        ["big", "kto", 3],
    ]
    assert out["n"].tolist() == [1, 1, 2, 1, 1]
    worst_first = analysis.rank_table(df, "accuracy", higher_is_better=False)
    assert worst_first[worst_first.scale == "big"]["method"].iloc[0] == "kto"


def test_rank_inversions_kendall_tau_by_hand():
    """Means at s1: sft .4 > dpo .3 > simpo .2 > kto .1; at s2: dpo .35 > simpo .25 > sft .1 > kto .05.

    Of the C(4, 2) = 6 pairs, (sft, dpo) and (sft, simpo) flip; the other 4 keep their order.
    τ = (concordant − discordant)/6 = (4 − 2)/6 = 1/3. grpo only exists at s1 and is left out.
    s2 -> s3 keeps the order exactly: τ = 1, no flips.
    """
    s1 = {"sft": 0.4, "dpo": 0.3, "simpo": 0.2, "kto": 0.1, "grpo": 0.9}
    s2 = {"sft": 0.1, "dpo": 0.35, "simpo": 0.25, "kto": 0.05}
    s3 = {m: v + 0.1 for m, v in s2.items()}
    cells = {(s, m): [v] for s, means in (("s1", s1), ("s2", s2), ("s3", s3)) for m, v in means.items()}
    out = analysis.rank_inversions(runs(cells, params={"s1": 1, "s2": 2, "s3": 3}), "accuracy")
    first, second = out.iloc[0], out.iloc[1]
    assert (first["scale_from"], first["scale_to"], first["n_methods"]) == ("s1", "s2", 4)
    assert first["tau"] == pytest.approx(1 / 3)
    assert first["tau"] == pytest.approx(
        stats.kendalltau([0.4, 0.3, 0.2, 0.1], [0.1, 0.35, 0.25, 0.05]).statistic
    )
    assert first["flips"] == [("sft", "dpo"), ("sft", "simpo")] and first["n_flips"] == 2
    assert second["tau"] == pytest.approx(1.0) and second["flips"] == []
