"""The testbed's targets (issue 11), computed from a study's records only.

    python -m analysis.testbed_targets results/testbed [--online sgrpo grpo dr_grpo gspo rloo]

Unit: seeds × problems (:mod:`analysis.twoway`), with the seed-only numbers beside, labelled. Arms
whose records repeat each other are merged by :func:`analysis.units.duplicate_arms`' rule. Prints, per
method: strict / flexible / verified accuracy (mean ± std over seeds) beside the base model's and
chance; the gain in strict points over the base: two-way where the base's strict accuracy fixes its
per-problem outcomes (0%: every problem wrong, :func:`analysis.crossed.fixed_base`), with the seed-only
one-sample t-test against the base's value beside; the change in flexible and verified-flexible points
(the base's per-problem outcomes there are not recorded: the arm's two-way interval of flexible
accuracy is printed beside the base's value, no paired test); the training reward of the first and
last four steps (each step's prompts are fresh draws from the 10,000-problem train pool, so the reward
is measured on prompts the policy has not trained on); and the spread between the best and the worst
online loss, two-way, with the seed-only Welch test beside.
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from pathlib import Path

import pandas as pd
from scipy import stats

from analysis import load_problem_outcomes, load_runs
from analysis.crossed import BOTH, fixed_base, outcome_matrix
from analysis.runs import read_metrics
from analysis.stats import by_arm
from analysis.twoway import two_way_difference, two_way_mean
from analysis.units import drop_duplicate_arms, duplicate_arms, duplicate_note, merged_arms, merged_label


def load(root: Path) -> pd.DataFrame:
    """The finished runs (:func:`analysis.load_runs`: validated, one metric per key), ``method`` set to
    each run's arm, each with its per-step history from ``metrics.jsonl``
    (:func:`analysis.runs.read_metrics`) in ``_history``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = by_arm(load_runs(root))
    return runs.assign(_history=[read_metrics(Path(p) / "metrics.jsonl") for p in runs["path"]])


def mean_sd(xs) -> str:
    xs = list(xs)
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{100 * statistics.mean(xs):5.1f} ± {100 * sd:3.1f}"


def reward_rise(histories) -> str:
    """Mean training reward over the first and last four logged steps, averaged over seeds."""
    first = [statistics.mean(h["reward_mean"] for h in hist[:4]) for hist in histories]
    last = [statistics.mean(h["reward_mean"] for h in hist[-4:]) for hist in histories]
    return f"{statistics.mean(first):.3f} -> {statistics.mean(last):.3f}"


def strict_gain(y: pd.DataFrame | None, base: float, strict: list[float]) -> tuple[str, str]:
    """(two-way gain over the base with its interval and p, the seed-only p) in strict points."""
    seed_p = stats.ttest_1samp(strict, base).pvalue if len(strict) > 1 else float("nan")
    fixed = fixed_base(base, y.shape[1]) if y is not None else None
    if fixed is None or len(y) < 2:
        return f"{100 * (statistics.mean(strict) - base):+.1f} (seeds only)", f"{seed_p:.2g}"
    d = two_way_difference(y.to_numpy(), fixed)
    text = f"{100 * d['delta']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}], p = {d['p']:.2g}"
    return text, f"{seed_p:.2g}"


def flexible_cell(y: pd.DataFrame | None, base: float, values: list[float]) -> str:
    """The change in flexible points over the base (seed means) and the arm's two-way interval."""
    text = f"{100 * (statistics.mean(values) - base):+.1f}"
    if y is None or len(y) < 2:
        return text
    m = two_way_mean(y.to_numpy())
    return f"{text} (arm [{100 * m['ci_low']:.1f}, {100 * m['ci_high']:.1f}])"


def method_rows(runs: pd.DataFrame, outcomes: pd.DataFrame, base: dict, merged: dict) -> None:
    """The table, one row per (merged) method, best strict mean first."""
    order = runs.groupby("method")["accuracy"].mean().sort_values(ascending=False).index
    for method in order:
        rs = runs[runs["method"] == method]
        strict = list(rs["accuracy"])
        gain, seed_p = strict_gain(outcome_matrix(rs, outcomes, "accuracy"), base["accuracy"], strict)
        flex = flexible_cell(
            outcome_matrix(rs, outcomes, "accuracy_flexible"),
            base["accuracy_flexible"],
            list(rs["accuracy_flexible"]),
        )
        d_ver = rs["accuracy_verified_flexible"].mean() - base["accuracy_verified_flexible"]
        hist = list(rs["_history"])
        rise = reward_rise(hist) if hist[0] and "reward_mean" in hist[0][0] else "-"
        print(
            f"| {merged_label(method, merged)} | {len(rs)} | {mean_sd(strict)} | {mean_sd(rs['accuracy_verified'])} | "
            f"{mean_sd(rs['accuracy_flexible'])} | {gain} | {seed_p} | {flex} | {100 * d_ver:+.1f} | {rise} |"
        )


def online_spread(runs: pd.DataFrame, outcomes: pd.DataFrame, online: list[str]) -> None:
    """The best minus the worst online loss (by strict mean): two-way, seed-only Welch beside."""
    means = runs.groupby("method")["accuracy"].agg(["mean", "std"])
    online = [m for m in online if m in means.index]
    if len(online) < 2:
        return
    best, worst = means.loc[online, "mean"].idxmax(), means.loc[online, "mean"].idxmin()
    spread = 100 * (means.loc[best, "mean"] - means.loc[worst, "mean"])
    ya, yb = (outcome_matrix(runs[runs["method"] == m], outcomes, "accuracy") for m in (best, worst))
    sds = ", ".join(f"{k} {100 * means.loc[k, 'std']:.1f}" for k in online)
    text = f"online spread: {best} - {worst} = {spread:.1f} points"
    if ya is not None and yb is not None and min(len(ya), len(yb)) > 1:
        common = ya.columns.intersection(yb.columns)
        d = two_way_difference(ya[common].to_numpy(), yb[common].to_numpy())
        text += (
            f" [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}], p = {d['p']:.2g} (unit: {BOTH}); "
            f"seed-only Welch p = {d['seed_only_p']:.2g}"
        )
    print(f"{text}; per-seed std: {sds}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("--online", nargs="+", default=["sgrpo", "grpo", "dr_grpo", "gspo", "rloo"])
    args = ap.parse_args()
    runs = load(args.root)
    dups = duplicate_arms(runs)
    once, merged = drop_duplicate_arms(runs, dups), merged_arms(dups)
    outcomes = load_problem_outcomes(args.root)
    m0 = runs.iloc[0]
    base = {k: m0[f"base_{k}"] for k in ("accuracy", "accuracy_flexible", "accuracy_verified_flexible")}
    line = (
        f"base: strict {100 * base['accuracy']:.1f}, flexible {100 * base['accuracy_flexible']:.1f}, "
        f"verified-flexible {100 * base['accuracy_verified_flexible']:.1f}, chance {100 * m0['chance']:.1f}"
    )
    best, avg = m0.get("base_best_at_16"), m0.get("base_avg_at_16")
    if pd.notna(best) and pd.notna(avg):
        line += f"; sampled at T = 1, strict pass@16 {100 * best:.1f}, avg@16 (pass@1) {100 * avg:.1f}"
    print(line)
    print("identical arms (merged below):", duplicate_note(dups, merged=True) or "none")
    print(
        f"Δ strict: two-way against the base [95% CI] (unit: {BOTH}), the seed-only one-sample t beside "
        "(unit: seeds); Δ flexible: seed means, the arm's two-way 95% interval of flexible accuracy beside "
        "(the base's per-problem outcomes are not recorded)"
    )
    print(
        "| method | seeds | strict | verified | flexible | Δ strict (pp) [95% CI], p | seed-only p | Δ flexible (pp) "
        "| Δ verified-flexible (pp) | train reward first→last 4 steps |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    method_rows(once, outcomes, base, merged)
    online_spread(once, outcomes, args.online)


if __name__ == "__main__":
    main()
