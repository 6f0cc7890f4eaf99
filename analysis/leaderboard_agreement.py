"""Do the skill testbed and the format testbed rank the post-training methods alike? From the records only
(issue 40, item 8).

    python -m analysis.leaderboard_agreement results/oxrl_skill results/oxrl_core [--scale tiny-m]
        [--skill-metrics accuracy_verified_flexible accuracy_flexible]
        [--format-metrics accuracy accuracy_verified_flexible]

Per method: its mean change over the base, in points (the seed mean of each run's metric minus the
base's, as the leaderboards print it), on the skill grid (each of ``--skill-metrics``; the first,
verified-flexible, is the one the skill leaderboard ranks) and on the format grid at the skill grid's
scale (each of ``--format-metrics``: strict and verified-flexible). Then Spearman's ρ between each skill
column and each format column, with its two-sided p (:func:`scipy.stats.spearmanr`: the t approximation;
ties take mean ranks). Unit of replication: methods.

Identical arms are one method (:func:`analysis.units.duplicate_arms`' rule: ≥ 99% identical test
completions on every seed), merged on each grid, and the primary ρ is over the merged methods. A set
merged on either grid is one method on both (a rank correlation needs one list of methods), named by the
arm the skill grid keeps (else the format grid's): on a grid whose rule merges it, its value is the arm
the rule keeps (the value that grid's leaderboard prints); on a grid that keeps its arms apart, the mean
of their values (no arm preferred); in general, the mean over the grid's own methods in the set. Beside
it: ρ over every arm unmerged (how the figure was first computed), and, as a sensitivity, ρ with each set
valued by its kept arm on both grids. Values are ranked as computed (rounded to 1e-9 points, so equal
seed means tie) and printed to 0.01 point.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import pandas as pd
from scipy import stats

from analysis.skill_gain import finished
from analysis.units import duplicate_arms, merged_arms, merged_label

SKILL_METRICS = ("accuracy_verified_flexible", "accuracy_flexible")  # the first: the skill leaderboard's
FORMAT_METRICS = ("accuracy", "accuracy_verified_flexible")
NAMES2 = ("skill testbed", "format testbed")  # the two grids' names in the tables (--names)
NAMES = {
    "accuracy": "strict",
    "accuracy_verified_flexible": "verified-flexible",
    "accuracy_flexible": "flexible",
    "accuracy_verified": "verified",
}


def arm_gains(runs: pd.DataFrame, metric: str) -> pd.Series:
    """Arm -> the seed mean of its runs' change over the base, in points (rounded to 1e-9 so ties tie)."""
    delta = 100 * (runs[metric] - runs[f"base_{metric}"])
    return delta.groupby(runs["method"]).mean().round(9)


def _root(parent: dict[str, str], arm: str) -> str:
    while parent[arm] != arm:
        arm = parent[arm]
    return arm


def method_sets(arms: list[str], merges: list[dict[str, list[str]]]) -> dict[str, list[str]]:
    """Method -> its arms, its name first: the arms of ``arms`` joined by any grid's merge
    (:func:`analysis.units.merged_arms` per grid), named by the first grid's kept arm in the set (the
    skill grid's), else the next grid's, else the arm itself."""
    parent = {a: a for a in arms}
    for merged in merges:
        for kept, dups in merged.items():
            for d in dups:
                parent[_root(parent, d)] = _root(parent, kept)
    sets: dict[str, list[str]] = {}
    for a in arms:
        sets.setdefault(_root(parent, a), []).append(a)
    out = {}
    for members in sets.values():
        name = next((k for merged in merges for k in merged if k in members), members[0])
        out[name] = [name, *sorted(a for a in members if a != name)]
    return out


def method_values(gains: pd.Series, sets: dict[str, list[str]], merged: dict, *, kept: bool) -> pd.Series:
    """Method -> its value on one grid (module doc): the mean over the grid's own methods in its set (the
    arms that grid's ``merged`` does not fold into another), so the kept arm's value where this grid
    merges the whole set and the mean of its arms' where it merges none; with ``kept``, the set's name."""
    folded = {d for dups in merged.values() for d in dups}
    out = {}
    for method, arms in sets.items():
        own = [arms[0]] if kept else [a for a in arms if a not in folded]
        out[method] = float(gains[own].mean())
    return pd.Series(out).round(9)


def spearman(x: pd.Series, y: pd.Series) -> tuple[float, float]:
    """Spearman's ρ between two method -> value series (on their shared methods) and its two-sided p."""
    common = x.index.intersection(y.index)
    res = stats.spearmanr(x[common], y[common])
    return float(res.statistic), float(res.pvalue)


def _points(v: float) -> str:
    return f"{v:+.2f}".replace("-", "−")


def leaderboard_table(table: pd.DataFrame, labels: dict[str, str], header: list[str]) -> list[str]:
    """A markdown table: one row per method of ``table`` (ordered by its first column, highest first)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, row in table.sort_values(table.columns[0], ascending=False, kind="stable").iterrows():
        lines.append(f"| {labels.get(method, method)} | " + " | ".join(_points(v) for v in row) + " |")
    return lines


def _rho(x: pd.Series, y: pd.Series) -> str:
    rho, p = spearman(x, y)
    return f"{rho:.2f} | {p:.2g}"


def rho_table(
    merged: pd.DataFrame,
    kept: pd.DataFrame,
    unmerged: pd.DataFrame,
    n_skill: int,
    names: tuple[str, str] = NAMES2,
) -> list[str]:
    """Spearman's ρ and p of each skill column (the first ``n_skill``) against each format column (the
    rest), three ways: identical arms merged (the primary), every arm unmerged, each set as its kept arm."""
    n, k = len(merged), len(unmerged)
    lines = [
        f"| {names[0]} | {names[1]} | ρ, identical arms merged ({n} methods) | p "
        f"| ρ, unmerged ({k} arms) | p | ρ, each set as its kept arm ({n} methods) | p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s, f in itertools.product(merged.columns[:n_skill], merged.columns[n_skill:]):
        cells = [_rho(t[s], t[f]) for t in (merged, unmerged, kept)]
        lines.append(f"| {s.split(': ')[1]} | {f.split(': ')[1]} | " + " | ".join(cells) + " |")
    return lines


def _merge_line(grids: list[str], merges: list[dict[str, list[str]]]) -> str:
    sets = [("; ".join(f"{k} = {', '.join(v)}" for k, v in m.items()) or "none") for m in merges]
    return "; ".join(f"{g}: {s}" for g, s in zip(grids, sets))


def report(
    skill: pd.DataFrame,
    fmt: pd.DataFrame,
    skill_metrics: list[str],
    format_metrics: list[str],
    names: tuple[str, str] = NAMES2,
) -> list[str]:
    """Every line :func:`main` prints: the merges, the merged leaderboards, the unmerged ones, the ρ table."""
    arms = sorted(set(skill["method"]) & set(fmt["method"]))
    grids = [skill["grid"].iloc[0], fmt["grid"].iloc[0]]
    merges = [merged_arms(duplicate_arms(skill)), merged_arms(duplicate_arms(fmt))]
    sets = method_sets(arms, merges)
    gains = [(0, arm_gains(skill, m)) for m in skill_metrics] + [
        (1, arm_gains(fmt, m)) for m in format_metrics
    ]
    columns = [f"{names[0]}: {NAMES.get(m, m)}" for m in skill_metrics]
    columns += [f"{names[1]}: {NAMES.get(m, m)}" for m in format_metrics]

    def frame(*, kept: bool) -> pd.DataFrame:
        return pd.DataFrame(
            {c: method_values(g, sets, merges[i], kept=kept) for c, (i, g) in zip(columns, gains)}
        )

    merged, kept = frame(kept=False), frame(kept=True)
    unmerged = pd.DataFrame({c: g[arms] for c, (_, g) in zip(columns, gains)})
    labels = {m: merged_label(m, {m: a[1:]}) for m, a in sets.items()}
    return [
        f"{grids[0]} against {grids[1]} at {fmt['scale'].iloc[0]}: each method's mean change over its base "
        "(points; seed means); unit: methods",
        "identical arms (the rule: ≥ 99% identical test completions on every seed), merged on each grid: "
        + _merge_line(grids, merges),
        "a set merged on one grid is one method on both: the arm kept on the grid that merges it, the mean "
        "of its arms on the grid that does not",
        "",
        *leaderboard_table(merged, labels, ["method (identical arms merged)", *columns]),
        "",
        *leaderboard_table(unmerged, {}, ["arm (unmerged)", *columns]),
        "",
        *rho_table(merged, kept, unmerged, len(skill_metrics), names),
    ]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("skill", type=Path, help="the skill testbed's grid (results/oxrl_skill)")
    ap.add_argument("format", type=Path, help="the format testbed's grid (results/oxrl_core)")
    ap.add_argument("--scale", help="the format grid's rung (default: the skill grid's scale)")
    ap.add_argument("--skill-metrics", nargs="+", default=list(SKILL_METRICS), help="the first: the order")
    ap.add_argument("--format-metrics", nargs="+", default=list(FORMAT_METRICS))
    ap.add_argument("--names", nargs=2, default=list(NAMES2), help="the two grids' names in the tables")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    skill, fmt = finished(args.skill), finished(args.format)
    scale = args.scale or skill["scale"].iloc[0]
    skill, fmt = skill[skill["scale"] == scale], fmt[fmt["scale"] == scale]
    if not len(skill) or not len(fmt):
        raise SystemExit(f"no finished runs at {scale} in {args.skill} and {args.format}")
    print("\n".join(report(skill, fmt, args.skill_metrics, args.format_metrics, tuple(args.names))))


if __name__ == "__main__":
    main()
