"""Does a grid order its methods as a reference does? From the records only (issue 42, item 2).

    python -m analysis.paper_order results/countdown_core [--metric accuracy]
        [--order sgrpo=58.0 rft=54.4 dpo=49.1 simpo=38.7]

The reference defaults to the OXRL paper's GSM8K order at 1.5B (arXiv 2603.19335: SGRPO 58.0 > SFT
54.4 > DPO 49.1 > SimPO 38.7; the paper's SFT is oxbench's ``rft``, trained on the policy's own
correct samples). For the methods both hold: each method's mean over seeds, Kendall's τ-b between those
means and the reference's values (``scipy.stats.kendalltau``), and every pair in the reference's order
with the grid's difference, tested two-way (:func:`analysis.twoway.two_way_difference`: seeds and test
problems crossed, problems paired). The verdict (recipes/countdown_core.yaml): the order "agrees" when
no pair is inverted (τ = 1); an inverted pair whose interval holds 0 is "not separated", and the
verdict counts the pairs whose interval excludes 0 (unadjusted 95% intervals, as pre-registered), with
the count after Holm over the pairs beside it (its sensitivity to the multiple comparisons).
"""

from __future__ import annotations

import argparse
import itertools
import warnings
from pathlib import Path

import pandas as pd
from scipy import stats

from analysis import load_problem_outcomes, load_runs
from analysis.crossed import BOTH, outcome_matrix
from analysis.skill_gain import versus
from analysis.stats import adjust_pvalues, by_arm

#: the OXRL paper's GSM8K accuracies at 1.5B (its Table of the core methods), in points
OXRL_GSM8K_1P5B = {"sgrpo": 58.0, "rft": 54.4, "dpo": 49.1, "simpo": 38.7}


def parse_order(items: list[str]) -> dict[str, float]:
    """``["sgrpo=58.0", ...]`` as ``{"sgrpo": 58.0, ...}``; a one-line error on a malformed item."""
    order = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            order[name] = float(value)
        except ValueError:
            raise SystemExit(f"--order: {item!r} is not METHOD=VALUE") from None
    return order


def pair_rows(runs: pd.DataFrame, outcomes: pd.DataFrame, order: dict[str, float], metric: str) -> list[dict]:
    """Every pair (a, b) with a above b in ``order``: the grid's difference a − b in points, two-way."""
    rows = []
    ranked = sorted(order, key=order.get, reverse=True)
    for a, b in itertools.combinations(ranked, 2):
        ya = outcome_matrix(runs[runs["method"] == a], outcomes, metric)
        yb = outcome_matrix(runs[runs["method"] == b], outcomes, metric)
        if ya is None or yb is None:
            raise SystemExit(f"{a} or {b}: no per-problem outcomes for {metric} in the records")
        d = versus(ya, yb)  # a - b on the problems both hold, in points
        pair = {"pair": f"{a} > {b}", **{k: d[k] for k in ("delta", "lo", "hi", "p")}}
        rows.append(pair | {"inverted": d["delta"] < 0, "separated": d["lo"] > 0 or d["hi"] < 0})
    return rows


def report(runs: pd.DataFrame, outcomes: pd.DataFrame, order: dict[str, float], metric: str) -> None:
    """Print the means, τ-b and the pair table, then the verdict."""
    means = 100 * runs.groupby("method")[metric].mean()
    missing = [m for m in order if m not in means.index]
    if missing:
        raise SystemExit(f"the grid has no finished runs of {missing}")
    seeds = runs.groupby("method")["seed"].nunique()
    print("| method | reference | grid: mean over seeds | seeds |\n|---|---|---|---|")
    for m in sorted(order, key=order.get, reverse=True):
        print(f"| {m} | {order[m]:.1f} | {means[m]:.1f} | {seeds[m]} |")
    tau = stats.kendalltau([order[m] for m in order], [means[m] for m in order])
    print(f"\nKendall's tau-b over {len(order)} methods: {tau.statistic:+.2f} (p = {tau.pvalue:.2g})")
    rows = pair_rows(runs, outcomes, order, metric)
    holm = adjust_pvalues([r["p"] for r in rows], "holm")
    print(f"\nevery pair in the reference's order: the grid's difference in points (unit: {BOTH})")
    print(f"| pair | Δ [95% CI] | p | p (Holm, {len(rows)}) | in the grid |\n|---|---|---|---|---|")
    for r, h in zip(rows, holm):
        where = ("inverted" if r["inverted"] else "agrees") + ("" if r["separated"] else ", not separated")
        interval = f"{r['delta']:+.1f} [{r['lo']:+.1f}, {r['hi']:+.1f}]"
        print(f"| {r['pair']} | {interval} | {r['p']:.2g} | {h:.2g} | {where} |")
    inverted = sum(r["inverted"] for r in rows)
    separated = [r for r in rows if r["separated"]]
    flips = sum(r["inverted"] for r in separated)
    verdict = "agrees (no pair inverted)" if not inverted else f"{inverted} of {len(rows)} pairs inverted"
    print(
        f"\nverdict: the order {verdict}; {len(separated)} of {len(rows)} pairs separated "
        f"(interval excludes 0), {flips} of them inverted; with Holm over the {len(rows)} pairs, "
        f"{sum(h < 0.05 for h in holm)} separated"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--metric", default="accuracy", help="a metric with per-problem outcomes")
    ap.add_argument("--order", nargs="+", help="METHOD=VALUE ... (default: the OXRL paper's GSM8K at 1.5B)")
    args = ap.parse_args()
    order = parse_order(args.order) if args.order else OXRL_GSM8K_1P5B
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs, outcomes = load_runs(args.root), load_problem_outcomes(args.root)
    runs = by_arm(runs[runs["status"] == "finished"])
    runs = runs[runs["method"].isin(order)]
    print(f"{args.root.name}: {args.metric} (%), against the reference order {order}")
    report(runs, outcomes, order, args.metric)


if __name__ == "__main__":
    main()
