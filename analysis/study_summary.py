"""Print the headline statistics of a study from its run records only (the numbers quoted in
results/README.md): per-cell means with two-way intervals, each arm's scores (strict mean ± SD over
seeds, flexible, verified-flexible and each lm-eval task's, the base's beside; the tasks' documents and
chance levels), every arm against the baseline (Δ in points)
with Bonferroni per scale, the leverage hierarchy, rank inversions between consecutive scales, paired tests
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
from analysis.stats import by_arm
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


#: the scores table's columns: record column -> header (strict with its SD over seeds beside)
SCORES = {"accuracy": "strict", "accuracy_flexible": "flexible", "accuracy_verified_flexible": "verified"}
#: lm-eval tasks (record column ``lmeval_<task>``) in the order the scores table gives them; others after
TASKS = ("oxbench_order", "oxbench_next", "oxbench_reverse", "oxbench_arith_hard")


def lmeval_tasks(df: pd.DataFrame) -> list[str]:
    """The lm-eval tasks the records score (``lmeval_<task>``), :data:`TASKS` first."""
    found = {
        c.removeprefix("lmeval_") for c in df if c.startswith("lmeval_") and not c.endswith(("_n", "_chance"))
    }
    return sorted(found, key=lambda t: (TASKS.index(t) if t in TASKS else len(TASKS), t))


def score_columns(df: pd.DataFrame, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Record column -> header of the scores table: :data:`SCORES` the records have, then each lm-eval
    task's score (its name without ``oxbench_``), then the ``extra`` metrics asked for (``--metrics``:
    a task's own, pass@k), each a one-line error when the records lack it."""
    own = {c: h for c, h in SCORES.items() if c in df}
    missing = [c for c in extra if c not in df]
    if missing:
        raise SystemExit(f"--metrics: the records have no {missing}")
    lmeval = {f"lmeval_{t}": t.removeprefix("oxbench_") for t in lmeval_tasks(df)}
    return {**own, **lmeval, **{c: c for c in extra}}


def task_design(df: pd.DataFrame) -> None:
    """Each lm-eval task's documents and chance level (%), as the records give them (the first run's)."""
    rows = [
        {
            "task": t,
            "documents": df[f"lmeval_{t}_n"].iloc[0],
            "chance": 100 * df[f"lmeval_{t}_chance"].iloc[0],
        }
        for t in lmeval_tasks(df)
        if f"lmeval_{t}_n" in df and f"lmeval_{t}_chance" in df
    ]
    if rows:
        table = pd.DataFrame(rows).astype({"documents": int})
        print("\nlm-eval tasks: test documents and chance (%)\n", table.round(1).to_string(index=False))


def scores(once: pd.DataFrame, merged: dict, scales: list[str], extra: tuple[str, ...] = ()) -> None:
    """Each arm's mean over seeds (%) of strict accuracy with its SD over seeds, and of flexible and
    verified-flexible accuracy where the records have them (identical arms merged); first in each scale
    the base's greedy scores (``base_<metric>``), where the records have them."""
    arms, cols = by_arm(once), score_columns(once, extra)
    rows = []
    for scale in scales:
        cell = arms[arms["scale"] == scale]
        if len(cell) and all(f"base_{c}" in cell for c in cols):
            rows.append(
                {"scale": scale, "method": "base", **{h: cell[f"base_{c}"].iloc[0] for c, h in cols.items()}}
            )
        for method, g in cell.groupby("method"):
            row = {"scale": scale, "method": merged_label(method, merged), "n": len(g)}
            rows.append({**row, **{h: g[c].mean() for c, h in cols.items()}, "sd": g["accuracy"].std()})
    table = pd.DataFrame(rows, columns=["scale", "method", "n", "strict", "sd", *list(cols.values())[1:]])
    table[table.columns[3:]] *= 100
    table["n"] = table["n"].astype("Int64")
    print(
        "\nscores (%): mean over seeds, strict with its SD over seeds (sd), flexible and verified-flexible, "
        "each lm-eval task's where the records have them (identical arms merged; base: the base model's "
        "greedy scores)\n",
        table.round(1).to_string(na_rep="", float_format="{:.1f}".format),
    )


def versus_baseline(once: pd.DataFrame, outcomes: pd.DataFrame, baseline: str) -> None:
    """Every arm against ``baseline`` (:func:`analysis.crossed.two_way_vs_baseline`): Δ and its interval in
    points, Bonferroni over the arms compared within a scale; the seed-only Welch numbers beside."""
    w = two_way_vs_baseline(once, outcomes, "accuracy", baseline, correction="bonferroni", alpha=0.05)
    w[["delta", "ci_low", "ci_high"]] *= 100
    m = ", ".join(f"{s} {n}" for s, n in w.groupby("scale", sort=False)["p"].count().items())
    cols = ["scale", "method", "delta", "ci_low", "ci_high", "p", "p_adj", "significant", "unit"]
    cols += ["seed_p", "seed_p_adj", "seed_significant", "hedges_g"]
    print(
        f"\nvs {baseline}: delta and its 95% interval in points; Bonferroni within each scale (m = {m or 0}); "
        f"unit: {BOTH} where the runs have per-problem outcomes (the `unit` column), seed-only Welch beside "
        f"({UNITS['welch']})\n",
        w[cols].to_string(
            formatters={
                **{c: "{:.2g}".format for c in ("p", "p_adj", "seed_p", "seed_p_adj")},
                **{c: "{:+.2f}".format for c in ("delta", "ci_low", "ci_high", "hedges_g")},
            }
        ),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a grid's results directory, e.g. results/oxrl_core")
    ap.add_argument("--baseline", default="dpo")
    ap.add_argument("--metrics", nargs="+", default=[], help="more record metrics for the scores table")
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
    scores(once, merged, analysis.scale_order(df), tuple(args.metrics))
    task_design(df)
    versus_baseline(once, outcomes, args.baseline)
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
