r"""The leverage hierarchy: which design factor moves the metric the most?

The grid crosses three independent factors, ``scale``, ``method`` and ``lora``. The factors
ranked here are those, or coarsenings of ``method``:

=====================  ===============  ====================  ===========================
factor                 level column     held fixed            rows used
=====================  ===============  ====================  ===========================
``scale``              ``scale``        ``method, lora``      all
``paradigm``           ``paradigm``     ``scale, lora``       all
``online_vs_offline``  ``online``       ``scale, lora``       all (SFT counts as offline)
``loss``               ``method``       ``scale, lora``       ``family == "preference"``
``lora``               ``lora``         ``scale, method``     all
=====================  ===============  ====================  ===========================

(``paradigm``, ``online`` and ``family`` are functions of ``method``, so holding the method fixed
would leave them a single level; they are compared at fixed scale and LoRA setting instead.)
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.stats import _cols, _groups, _require, by_arm

#: factor -> (level column, columns held fixed, family restriction or None)
FACTORS = {
    "scale": ("scale", ("method", "lora"), None),
    "paradigm": ("paradigm", ("scale", "lora"), None),
    "online_vs_offline": ("online", ("scale", "lora"), None),
    "loss": ("method", ("scale", "lora"), "preference"),
    "lora": ("lora", ("scale", "method"), None),
}
LEVERAGE_COLUMNS = ["factor", "n_levels", "range_points", "eta_squared", "n_contexts", "n_runs"]
TASK_COLUMNS = ["n_methods", "id_spread", "ood_spread", "ratio", "id_best", "ood_best"]
_CELL = ["scale", "method", "lora"]


def leverage(df: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    r"""One row per factor of :data:`FACTORS` that takes at least two levels in ``df``.

    Runs with a NaN ``metric`` are dropped first. ``n_levels`` counts the factor's levels and
    ``n_runs`` the runs used (only the preference family for ``loss``).

    ``range_points`` (how far the factor moves the metric with everything else fixed):

    1. Cell means: average the runs (seeds) of each (scale, method, lora) cell (of each arm of it,
       when ``df`` has an ``arm`` column; a method's arms then count once each in step 2).
    2. Level means per context: a *context* is one combination of the held-fixed columns (table
       above). Within a context, a level's mean is the unweighted mean of its cell means (for
       ``scale``, ``loss`` and ``lora`` that is exactly one cell; for ``paradigm`` and
       ``online_vs_offline`` it averages the methods of that paradigm, each method counting once
       whatever its seed count).
    3. Per context: max − min of the level means. Contexts where fewer than two levels of the
       factor were run are **skipped** (they say nothing about the factor); ``n_contexts`` counts
       the ones kept.
    4. ``range_points`` = 100 × the mean of those per-context ranges (percentage points for a
       metric in [0, 1]); NaN if no context has two levels.

    ``eta_squared`` = one-way ANOVA :math:`\eta^2` by the factor's level over the per-run values
    :math:`x_i` (not the cell means): :math:`SS_{between}/SS_{total}` with
    :math:`SS_{between} = \sum_l n_l(\bar x_l - \bar x)^2` and :math:`SS_{total} = \sum_i (x_i - \bar x)^2`
    (NaN when every value is equal). Other factors are not controlled for here.

    Rows are sorted by ``range_points`` descending (NaN last, ties in the order of :data:`FACTORS`).
    """
    _require(df, [*_CELL, "paradigm", "online", "family", metric])
    runs = df.dropna(subset=[metric])
    rows = [_factor_row(name, runs, metric) for name in FACTORS]
    out = pd.DataFrame([r for r in rows if r is not None], columns=LEVERAGE_COLUMNS)
    return out.sort_values(
        "range_points", ascending=False, na_position="last", kind="stable", ignore_index=True
    )


def _factor_row(name: str, runs: pd.DataFrame, metric: str) -> dict | None:
    level, fixed, family = FACTORS[name]
    if family is not None:
        runs = runs[runs["family"] == family]
    if runs[level].nunique() < 2:
        return None
    ranges = _context_ranges(_cell_means(runs, metric), level, list(fixed))
    return {
        "factor": name,
        "n_levels": int(runs[level].nunique()),
        "range_points": 100 * float(ranges.mean()) if len(ranges) else math.nan,
        "eta_squared": eta_squared(runs[metric], runs[level]),
        "n_contexts": len(ranges),
        "n_runs": len(runs),
    }


def _cell_means(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    keep = {"paradigm": ("paradigm", "first"), "online": ("online", "first")}
    cell = _CELL + (["arm"] if "arm" in runs.columns else [])
    return runs.groupby(cell).agg(value=(metric, "mean"), **keep).reset_index()


def _context_ranges(cells: pd.DataFrame, level: str, fixed: list[str]) -> pd.Series:
    """max − min of the level means within each context that has at least two levels."""
    level_means = cells.groupby([*fixed, level])["value"].mean().reset_index()
    per_context = level_means.groupby(fixed)["value"].agg(["max", "min", "size"])
    kept = per_context[per_context["size"] >= 2]
    return kept["max"] - kept["min"]


def eta_squared(values: pd.Series, groups: pd.Series) -> float:
    r"""One-way ANOVA :math:`\eta^2 = SS_{between}/SS_{total}` of ``values`` grouped by ``groups``."""
    x = pd.Series(np.asarray(values, float), index=np.arange(len(values)))
    g = pd.Series(np.asarray(groups), index=x.index)
    grand = x.mean()
    total = float(((x - grand) ** 2).sum())
    if total == 0:
        return math.nan
    stats = x.groupby(g).agg(["size", "mean"])
    between = float((stats["size"] * (stats["mean"] - grand) ** 2).sum())
    return between / total


def task_leverage(
    df: pd.DataFrame,
    id_metric: str = "accuracy",
    ood_metric: str = "ood_accuracy",
    by: str | tuple[str, ...] = ("scale",),
) -> pd.DataFrame:
    """How much the choice of method matters in- vs out-of-distribution, per group of ``by``.

    Within each group, over the methods that have both metrics (``n_methods``): the method means
    over seeds of ``id_metric`` and ``ood_metric``; ``id_spread`` and ``ood_spread`` = 100 × (max −
    min) of those means (percentage points); ``ratio = ood_spread / id_spread`` (inf when only the
    OOD spread is non-zero, NaN when both are zero); ``id_best``/``ood_best`` = the method with the
    highest mean (first by name on ties). Groups with fewer than two such methods are skipped.
    With an ``arm`` column the arms are compared (see :func:`analysis.stats.by_arm`).
    """
    cols = _cols(by)
    df = by_arm(df)
    _require(df, [*cols, "method", id_metric, ood_metric])
    rows = []
    for key, sub in _groups(df, cols):
        means = sub.groupby("method")[[id_metric, ood_metric]].mean().dropna().sort_index()
        if len(means) >= 2:
            rows.append({**dict(zip(cols, key)), **_spreads(means[id_metric], means[ood_metric])})
    return pd.DataFrame(rows, columns=[*cols, *TASK_COLUMNS])


def _spreads(id_means: pd.Series, ood_means: pd.Series) -> dict:
    id_spread = 100 * float(id_means.max() - id_means.min())
    ood_spread = 100 * float(ood_means.max() - ood_means.min())
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(np.float64(ood_spread) / np.float64(id_spread))
    return {
        "n_methods": len(id_means),
        "id_spread": id_spread,
        "ood_spread": ood_spread,
        "ratio": ratio,
        "id_best": id_means.idxmax(),
        "ood_best": ood_means.idxmax(),
    }
