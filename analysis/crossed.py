"""Arms compared with seeds and test problems as crossed sources of variation, from the records.

The default inference of the report, ``oxbench report`` and the study scripts (issue 40). For each cell
(scale, arm) the runs' per-problem outcomes (``eval.jsonl``, :func:`analysis.runs.load_problem_outcomes`)
form a seeds × problems array, and :mod:`analysis.twoway` gives the interval of its mean (inside
[0, 1]) and of each arm's difference to the baseline (problems paired, seeds independent). The
seed-only numbers (:func:`analysis.stats.summarize`, :func:`analysis.stats.welch_vs_baseline`) stay
beside them in ``seed_*`` columns; decisions (``p_adj``, ``significant``) are the two-way ones.

A metric has per-problem outcomes when it is one of :data:`OUTCOMES` (strict and flexible test
accuracy, OOD accuracy, and verified-flexible accuracy where the outcome table carries the column
:mod:`analysis.arith_records` recovers). A deterministic base enters a comparison through
:func:`fixed_base` where its metric fixes its per-problem outcomes (0 or 1). A cell whose runs lack
them (records without ``eval.jsonl``, another metric) keeps the seed-only numbers, and its ``unit``
column says ``seeds``; otherwise ``unit`` is ``seeds × problems``. Runs of one cell are aligned on the problems they all have.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.stats import adjust_pvalues, by_arm, summarize, welch_vs_baseline
from analysis.twoway import two_way_difference, two_way_mean

#: metric -> (split, outcome column) of eval.jsonl
OUTCOMES = {
    "accuracy": ("test", "correct"),
    "accuracy_flexible": ("test", "correct_flexible"),
    "ood_accuracy": ("ood", "correct"),
    # recovered from the completions (analysis.arith_records.with_verified_flexible); absent from
    # analysis.load_problem_outcomes' table, where such a cell keeps the seed-only numbers
    "accuracy_verified_flexible": ("test", "verified_flexible"),
}
BOTH = "seeds × problems"


def outcome_matrix(runs: pd.DataFrame, outcomes: pd.DataFrame, metric: str) -> pd.DataFrame | None:
    """The outcomes of ``runs`` (one cell's): a row per run, ordered by seed, a column per problem they
    all have; None when ``metric`` has no per-problem outcome or a run has none."""
    if metric not in OUTCOMES or not len(outcomes):
        return None
    split, column = OUTCOMES[metric]
    if column not in outcomes.columns:
        return None
    rows = outcomes[(outcomes["split"] == split) & outcomes["run_id"].isin(runs["run_id"])]
    rows = rows.dropna(subset=[column])
    table = rows.pivot_table(index="run_id", columns="id", values=column, aggfunc="first")
    order = [r for r in runs.sort_values("seed")["run_id"] if r in table.index]
    if len(order) < len(runs) or table.empty:
        return None
    table = table.loc[order].dropna(axis=1).astype(float)
    return table if table.shape[1] else None


def fixed_base(value: float, n_problems: int) -> np.ndarray | None:
    """The per-problem outcomes of a deterministic base (one greedy evaluation, its ``base_<metric>``),
    as the (2, ``n_problems``) array :func:`analysis.twoway.two_way_difference` takes (no seed or
    residual variance), where its metric determines them: 0 (every problem wrong) or 1 (every problem
    right). None otherwise: the records hold the base's metrics, not its per-problem outcomes."""
    if value in (0.0, 1.0):
        return np.full((2, n_problems), float(value))
    return None


def two_way_summary(arms: pd.DataFrame, outcomes: pd.DataFrame, metric: str) -> pd.DataFrame:
    """:func:`~analysis.stats.summarize`'s table with the two-way interval in ``ci_low``/``ci_high`` where
    the cell has per-problem outcomes; the seed-only t-interval in ``seed_ci_low``/``seed_ci_high``; both
    clipped to [0, 1] for a share (a metric of :data:`OUTCOMES`, or one whose values all lie in [0, 1]);
    ``n_problems`` and ``unit``. A cell is an arm (:func:`~analysis.stats.by_arm`), as in the table."""
    arms = by_arm(arms)
    table = summarize(arms, metric)
    if metric in OUTCOMES or arms[metric].dropna().between(0, 1).all():  # a share: intervals inside [0, 1]
        table["ci_low"], table["ci_high"] = table["ci_low"].clip(lower=0.0), table["ci_high"].clip(upper=1.0)
    table["seed_ci_low"], table["seed_ci_high"] = table["ci_low"], table["ci_high"]
    table["n_problems"], table["unit"] = np.nan, "seeds"
    for i, row in table.iterrows():
        cell = arms[(arms["scale"] == row["scale"]) & (arms["method"] == row["method"])].dropna(
            subset=[metric]
        )
        y = outcome_matrix(cell, outcomes, metric)
        if y is None or y.shape[0] < 2:
            continue
        tw = two_way_mean(y.to_numpy())
        table.loc[i, ["ci_low", "ci_high", "n_problems", "unit"]] = [
            tw["ci_low"],
            tw["ci_high"],
            y.shape[1],
            BOTH,
        ]
    return table


def two_way_vs_baseline(
    arms: pd.DataFrame, outcomes: pd.DataFrame, metric: str, baseline: str, *, correction: str, alpha: float
) -> pd.DataFrame:
    """:func:`~analysis.stats.welch_vs_baseline`'s table, decided on the two-way test where both cells have
    per-problem outcomes: ``delta``, ``ci_low``/``ci_high``, ``p``, ``p_adj`` (``correction`` over the arms
    of a scale), ``significant``, and ``adj_ci_low``/``adj_ci_high`` at level 1 − α/m; the seed-only
    Welch numbers in ``seed_ci_low``, ``seed_ci_high``, ``seed_p``, ``seed_p_adj``, ``seed_significant``.
    A cell is an arm (:func:`~analysis.stats.by_arm`), as in Welch's table."""
    arms = by_arm(arms)
    tests = welch_vs_baseline(arms, metric, baseline, correction=correction, alpha=alpha)
    for col in ("ci_low", "ci_high", "p", "p_adj", "significant"):
        tests[f"seed_{col}"] = tests[col]
    tests["adj_ci_low"], tests["adj_ci_high"], tests["n_problems"], tests["unit"] = (
        np.nan,
        np.nan,
        np.nan,
        "seeds",
    )
    for scale, group in tests.groupby("scale", sort=False):
        cell = arms[arms["scale"] == scale].dropna(subset=[metric])
        base = outcome_matrix(cell[cell["method"] == baseline], outcomes, metric)
        m = int(group["p"].count())
        for i, t in group.iterrows():
            arm = outcome_matrix(cell[cell["method"] == t["method"]], outcomes, metric)
            _two_way_row(tests, i, arm, base, alpha, m if correction != "none" else 1)
        ps = tests.loc[group.index, "p"]
        tests.loc[group.index, "p_adj"] = adjust_pvalues(ps.to_numpy(float), correction)
    testable = tests["p"].notna() & tests["df"].map(math.isfinite)
    tests["significant"] = testable & (tests["p_adj"] < alpha)
    return tests


def _two_way_row(tests: pd.DataFrame, i, arm, base, alpha: float, m: int) -> None:
    """Row ``i`` of ``tests`` decided on the two-way test of ``arm`` against ``base`` (outcome tables of
    :func:`outcome_matrix`) on the problems both have, where both have 2 seeds or more; left seed-only
    otherwise."""
    if arm is None or base is None or min(len(arm), len(base)) < 2:
        return
    common = arm.columns.intersection(base.columns)
    if not len(common):
        return
    arm, base = arm[common].to_numpy(), base[common].to_numpy()
    d, adj = two_way_difference(arm, base, alpha), two_way_difference(arm, base, alpha / m)
    tests.loc[i, ["delta", "ci_low", "ci_high", "p", "df"]] = [
        d["delta"],
        d["ci_low"],
        d["ci_high"],
        d["p"],
        d["df"],
    ]
    tests.loc[i, ["adj_ci_low", "adj_ci_high", "n_problems", "unit"]] = [
        adj["ci_low"],
        adj["ci_high"],
        arm.shape[1],
        BOTH,
    ]
