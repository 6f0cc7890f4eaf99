"""Print the headline statistics of a study from its run records only (the numbers quoted in
results/README.md): per-cell means, Welch vs DPO with Bonferroni per scale, the leverage
hierarchy, rank inversions between consecutive scales, paired tests on shared problems, and
the in- vs out-of-distribution spread, and the method spread per task family (lm-eval tasks).

    python -m analysis.study_summary results/oxrl_core [--baseline dpo]
"""

from __future__ import annotations

import argparse

import pandas as pd

import analysis
from analysis.units import UNITS, drop_duplicate_arms, duplicate_arms, duplicate_note


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a grid's results directory, e.g. results/oxrl_core")
    ap.add_argument("--baseline", default="dpo")
    args = ap.parse_args()
    pd.set_option("display.width", 200, "display.max_columns", 30, "display.max_rows", 200)

    df = analysis.load_runs(args.results)
    failed = analysis.load_failed(args.results)
    print(f"{len(df)} finished runs, {len(failed)} failed")
    dups = duplicate_arms(df)  # one algorithm under two names: once in spreads and η² (issue 27.5)
    once = drop_duplicate_arms(df, dups)
    print("identical arms:", duplicate_note(dups) or "none")

    s = analysis.summarize(df, "accuracy")
    s = s.assign(mean=100 * s["mean"], std=100 * s["std"])
    table = s.pivot(index="method", columns="scale", values="mean")
    table = table[[c for c in analysis.scale_order(df) if c in table]]
    print("\nmean accuracy (%) by method x scale\n", table.round(1))
    if "base_accuracy" in df:
        print("\nbase accuracy (%)\n", (100 * df.groupby("scale")["base_accuracy"].first()).round(1))

    w = analysis.welch_vs_baseline(df, baseline=args.baseline, correction="bonferroni")
    cols = ["scale", "method", "delta", "p", "p_adj", "significant", "hedges_g"]
    print(
        f"\nWelch vs {args.baseline}, Bonferroni within each scale; unit: {UNITS['welch']}\n",
        w[cols].round(4),
    )

    print(
        f"\nleverage (identical arms once; unit: {UNITS['leverage']})\n",
        analysis.leverage(once, "accuracy").round(4),
    )
    ri = analysis.rank_inversions(df, "accuracy")
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
    outcomes = analysis.load_problem_outcomes(args.results)
    if len(outcomes):
        pv = analysis.paired_vs_baseline(outcomes, df, baseline=args.baseline)
        print(f"\npaired vs {args.baseline}; unit: {UNITS['mcnemar']}\n", pv.round(4))


if __name__ == "__main__":
    main()
