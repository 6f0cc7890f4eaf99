"""Print the headline statistics of a study from its run records only (the numbers quoted in
results/README.md): per-cell means with two-way intervals, every arm against the baseline with
Bonferroni per scale, the leverage hierarchy, rank inversions between consecutive scales, paired tests
on shared problems, the in- vs out-of-distribution spread, and the method spread per task family
(lm-eval tasks).

    python -m analysis.study_summary results/oxrl_core [--baseline dpo]

Unit of the comparisons: seeds × problems (:mod:`analysis.crossed`, issue 40) where the runs have
per-problem outcomes, with the seed-only Welch numbers beside (``seed_*``); ``unit`` says which. Arms
whose records repeat each other (:func:`analysis.units.duplicate_arms`' rule) are merged in every table.
"""

from __future__ import annotations

import argparse

import pandas as pd

import analysis
from analysis.crossed import BOTH, two_way_summary, two_way_vs_baseline
from analysis.units import (
    UNITS,
    drop_duplicate_arms,
    duplicate_arms,
    duplicate_note,
    merged_arms,
    merged_label,
)


def leaderboard(once: pd.DataFrame, outcomes: pd.DataFrame, merged: dict, scales: list[str]) -> None:
    """Mean accuracy by method × scale (identical arms merged), then each cell's two-way interval
    (:func:`analysis.crossed.two_way_summary`) with the seed-only one beside."""
    s = two_way_summary(once, outcomes, "accuracy")
    s["method"] = s["method"].map(lambda m: merged_label(m, merged))
    table = (100 * s.pivot(index="method", columns="scale", values="mean"))[
        [c for c in scales if c in set(s["scale"])]
    ]
    print("\nmean accuracy (%) by method x scale (identical arms merged)\n", table.round(1))
    cols = ["scale", "method", "n", "mean", "ci_low", "ci_high", "seed_ci_low", "seed_ci_high", "unit"]
    shown = s[cols].assign(**{c: 100 * s[c] for c in cols[3:8]})
    print(
        "\naccuracy (%) with 95% intervals: two-way (ci_*), seed-only (seed_ci_*)\n",
        shown.round(1).to_string(),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a grid's results directory, e.g. results/oxrl_core")
    ap.add_argument("--baseline", default="dpo")
    args = ap.parse_args()
    pd.set_option("display.width", 200, "display.max_columns", 30, "display.max_rows", 200)

    df = analysis.load_runs(args.results)
    failed = analysis.load_failed(args.results)
    outcomes = analysis.load_problem_outcomes(args.results)
    print(f"{len(df)} finished runs, {len(failed)} failed")
    dups = duplicate_arms(df)  # one algorithm under two names: once in every table (issues 27.5, 40)
    once, merged = drop_duplicate_arms(df, dups), merged_arms(dups)
    print("identical arms:", duplicate_note(dups, merged=True) or "none")
    leaderboard(once, outcomes, merged, analysis.scale_order(df))
    if "base_accuracy" in df:
        print("\nbase accuracy (%)\n", (100 * df.groupby("scale")["base_accuracy"].first()).round(1))
    w = two_way_vs_baseline(once, outcomes, "accuracy", args.baseline, correction="bonferroni", alpha=0.05)
    cols = ["scale", "method", "delta", "ci_low", "ci_high", "p", "p_adj", "significant", "unit"]
    cols += ["seed_p", "seed_p_adj", "seed_significant", "hedges_g"]
    print(
        f"\nvs {args.baseline}, Bonferroni within each scale; unit: {BOTH} where the runs have per-problem "
        f"outcomes (the `unit` column), seed-only Welch beside ({UNITS['welch']})\n",
        w[cols]
        .round(4)
        .to_string(formatters={c: "{:.2g}".format for c in ("p", "p_adj", "seed_p", "seed_p_adj")}),
    )
    print(
        f"\nleverage (identical arms once; unit: {UNITS['leverage']})\n",
        analysis.leverage(once, "accuracy").round(4),
    )
    ri = analysis.rank_inversions(once, "accuracy")
    print("\nrank inversions\n", ri.drop(columns=["flips"]).round(3))
    for _, r in ri.iterrows():
        print(f"  {r['scale_from']} -> {r['scale_to']}: {len(r['flips'])} flips")
    if "ood_accuracy" in df:
        print("\nID vs OOD spread (identical arms once)\n", analysis.task_leverage(once).round(4))
    if any(c.startswith("domain_") for c in df.columns):
        fs = analysis.family_spread(once, n_boot=2000, n_perm=2000, per_task=True)
        print(
            "\nmethod spread by task family (pp; bootstrap 95% CI; permuted-label median and p; identical arms "
            f"once; unit: {UNITS['family_spread']})\n",
            fs.round(3),
        )
        means = df.groupby(["scale", "method"])[
            [c for c in df.columns if c.startswith(("domain_", "base_domain_"))]
        ]
        print("\ntask-family scores (%) by scale x method\n", (100 * means.mean()).round(1))
    if len(outcomes):
        pv = analysis.paired_vs_baseline(outcomes, df, baseline=args.baseline)
        print(f"\npaired vs {args.baseline}; unit: {UNITS['mcnemar']}\n", pv.round(4))


if __name__ == "__main__":
    main()
