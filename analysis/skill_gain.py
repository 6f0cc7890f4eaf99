"""Does an arm raise skill over its base? From a grid's records only (issue 27.4's target).

    python -m analysis.skill_gain results/isocompute_flexible [--metric accuracy_verified_flexible]

Per arm (every axis but the seed): the change in ``metric`` on the test set over
the base's greedy value, in points, per seed; a one-sample t-test against 0 (the base is one
deterministic greedy evaluation; unit: seeds), and Holm's correction over the arms (picking the best
arm after the fact needs it). Then every run pooled, the allocation a nuisance (unit: runs).
The target: at least one arm ≥ 5 points with p < 0.01 over ≥ 3 seeds.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
from scipy import stats

from analysis import load_runs
from analysis.stats import adjust_pvalues


def gains(root: Path, metric: str) -> dict[str, list[float]]:
    """Arm -> its finished runs' changes over the base, in points, in seed order (the records as
    :func:`analysis.load_runs` reads them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = load_runs(root)
    runs = runs[runs["status"] == "finished"].sort_values("seed")
    delta = 100 * (runs[metric] - runs[f"base_{metric}"])
    return {arm: [float(d) for d in g] for arm, g in delta.groupby(runs["arm"], sort=False)}


def table(by_arm: dict[str, list[float]]) -> list[dict]:
    rows = [
        {
            "arm": arm,
            "seeds": d,
            "mean": float(np.mean(d)),
            "p": float(stats.ttest_1samp(d, 0).pvalue) if len(d) > 1 else float("nan"),
        }
        for arm, d in by_arm.items()
    ]
    for r, p in zip(rows, adjust_pvalues([r["p"] for r in rows], "holm")):
        r["p_holm"] = float(p)
    return sorted(rows, key=lambda r: -r["mean"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--metric", default="accuracy_verified_flexible")
    args = ap.parse_args()
    by_arm = gains(args.root, args.metric)
    print(
        f"{args.root.name}: {args.metric}, change over the base in points (unit: seeds; Holm over {len(by_arm)} arms)"
    )
    print(
        "| arm | per seed | mean | p | p (Holm) | target (≥ 5, p < 0.01, ≥ 3 seeds) |\n|---|---|---|---|---|---|"
    )
    for r in table(by_arm):
        met = r["mean"] >= 5 and r["p"] < 0.01 and len(r["seeds"]) >= 3
        print(
            f"| {r['arm']} | {', '.join(f'{d:+.1f}' for d in r['seeds'])} | {r['mean']:+.2f} | {r['p']:.2g} | "
            f"{r['p_holm']:.2g} | {'met' if met else 'no'} |"
        )
    pooled = [d for v in by_arm.values() for d in v]
    t = stats.ttest_1samp(pooled, 0)
    print(
        f"\nall {len(pooled)} runs pooled (unit: runs): {np.mean(pooled):+.2f} ± {np.std(pooled, ddof=1):.2f} points, "
        f"p = {t.pvalue:.2g}"
    )


if __name__ == "__main__":
    main()
