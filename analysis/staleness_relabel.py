r"""η_max(S) from the pre-registered collapse labels (issue 27; ``docs/collapse_rule.md``).

Input: the per-run labels of :func:`analysis.collapse_rule.label_runs` for a staleness grid (S × η ×
correction × seeds; arXiv 2607.01083's stability condition η ≪ min{R_batch/(S·G), R_crit/(T·G)}).

* :func:`shared_runs`: records whose deterministic content is identical (one ``fingerprint``), e.g.
  the S = 0 cells of every correction: counted once in pooled counts (:func:`unique_runs`).
* :func:`eta_brackets`: per (S, correction) η_max (where the stable share crosses 1/2, log-linear, as
  :func:`analysis.staleness.eta_max`) and its **bracket** on the grid, against the nominal η or the
  **effective** η (the cell's mean ``lr_effective`` = η x the run's mean √ESS step scale).
* :func:`slope_intervals`: the slope of log η_max in log S (S >= 1) with its **grid-resolution
  interval** (the extreme least-squares slopes of any η_max(S) inside the brackets) and
  :func:`bootstrap_slope` its percentile interval over seeds resampled within cells.
* :func:`slope_verdict` and :func:`separable`: the verdict wording fixed in the rule's page.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from analysis.staleness import _crossing

BRACKET_COLUMNS = [
    "correction",
    "S",
    "lr_axis",
    "eta_max",
    "censored",
    "lo",
    "hi",
    "split",
    "cells",
    "seeds",
    "shared",
    "identical",
]


def shared_runs(labels: pd.DataFrame) -> pd.DataFrame:
    """One row per fingerprint carried by more than one record: ``fingerprint``, ``records``, the
    ``run_ids``, the ``corrections`` and ``S`` values it appears under (identical runs: count once)."""
    groups = labels.groupby("fingerprint").filter(lambda g: len(g) > 1).groupby("fingerprint")
    rows = [
        {
            "fingerprint": fp,
            "records": len(g),
            "run_ids": " ".join(g["run_id"]),
            "corrections": " | ".join(sorted(g["correction"].unique())),
            "S": sorted(g["S"].unique()),
        }
        for fp, g in groups
    ]
    return pd.DataFrame(rows, columns=["fingerprint", "records", "run_ids", "corrections", "S"])


#: The arm keys of an off-policy correction: at S = 0 every importance weight is 1 and the ESS-scaled
#: step is the nominal one, so runs that differ only in these are one on-policy run.
CORRECTION_KEYS = ("loss.is_correction", "loss.is_cap", "online.ess_lr")


#: What a correction key means where an arm leaves it out: the study method's defaults (sgrpo's coupled clip).
CORRECTION_DEFAULTS = {"loss.is_correction": "none", "loss.is_cap": None, "online.ess_lr": "none"}


def canonical_correction(arm: str) -> str:
    """The correction an arm (JSON) runs, spelled alike whichever keys its grid varied: every key of
    :data:`CORRECTION_KEYS`, the defaults filled in. A follow-up grid that varies no correction, or that
    pins seeds and rates in its variants, pools with the study it adds seeds to."""
    items = json.loads(arm)
    return " ".join(f"{k}={items.get(k, CORRECTION_DEFAULTS[k])}" for k in sorted(CORRECTION_KEYS))


def on_policy_arm(arm: str) -> str | None:
    """An arm (JSON, the ``arm`` column of the labels) without its correction keys (:data:`CORRECTION_KEYS`);
    None when the arm names no correction (a grid that does not vary one: nothing to merge)."""
    items = json.loads(arm)
    if not any(k in items for k in CORRECTION_KEYS):
        return None
    return json.dumps({k: v for k, v in items.items() if k not in CORRECTION_KEYS}, sort_keys=True)


def unique_runs(labels: pd.DataFrame) -> pd.DataFrame:
    """``labels`` with each run counted once for pooling: one record per ``fingerprint``, and at S = 0 one
    per (grid, arm without its correction keys, seed), the shared on-policy cell of the rule page (the
    first record kept)."""
    out = labels.drop_duplicates("fingerprint", keep="first")
    arm = out["arm"].map(on_policy_arm)
    key = out.assign(_arm=arm.where(arm.notna(), out["run_id"]), _s0=out["S"] == 0)
    dup = key["_s0"] & key.duplicated(["grid", "_arm", "seed", "_s0"], keep="first")
    return out[~dup.to_numpy()].reset_index(drop=True)


def cells(labels: pd.DataFrame, label: str = "failed") -> pd.DataFrame:
    """Per (correction, S, η): ``seeds``, ``failed`` (count of ``label``), ``stable`` share and the mean
    ``lr_effective`` of the cell's seeds."""
    g = labels.groupby(["correction", "S", "lr"])
    out = g.agg(seeds=("seed", "count"), failed=(label, "sum"), lr_effective=("lr_effective", "mean"))
    out["stable"] = 1.0 - out["failed"] / out["seeds"]
    return out.reset_index()


def _bracket(lrs: np.ndarray, stable: np.ndarray) -> tuple[float, float]:
    """(last grid η with p >= 1/2 before the first p < 1/2, that first η); 0 / inf where censored."""
    below = np.nonzero(stable < 0.5)[0]
    if not len(below):
        return float(lrs[-1]), math.inf
    j = below[0]
    return (float(lrs[j - 1]) if j > 0 else 0.0), float(lrs[j])


def eta_brackets(labels: pd.DataFrame, *, label: str = "failed", effective: bool = False) -> pd.DataFrame:
    """Per (correction, S): η_max, ``censored`` (as :func:`analysis.staleness.eta_max`), the bracket
    ``lo``/``hi`` (0 / inf where censored), on the nominal η axis or (``effective``) each cell's mean
    effective η. ``split``: a bracketing cell has seeds on both sides (one seed decides the bracket);
    ``shared``: how many corrections this cell is one on-policy cell with (S = 0: every correction);
    ``identical``: how many of its records another correction's cell at S repeats (same fingerprint)."""
    table, rows = cells(labels, label), []
    for (corr, s), g in table.groupby(["correction", "S"]):
        g = g.sort_values("lr")
        lrs = g["lr_effective" if effective else "lr"].to_numpy(float)
        p = g["stable"].to_numpy(float)
        lo, hi = _bracket(lrs, p)
        split = bool(((p > 0) & (p < 1) & ((lrs == lo) | (lrs == hi))).any())
        rows.append(
            {
                "correction": corr,
                "S": s,
                "lr_axis": "effective" if effective else "nominal",
                **_crossing(lrs, p),
                "lo": lo,
                "hi": hi,
                "split": split,
                "cells": len(g),
                "seeds": int(g["seeds"].sum()),
                "shared": _shared(labels, corr, s),
                "identical": _identical(labels, corr, s),
            }
        )
    return pd.DataFrame(rows, columns=BRACKET_COLUMNS)


def _shared(labels: pd.DataFrame, corr: str, s: int) -> int:
    """How many corrections this (S, correction) cell is one on-policy cell with (S = 0 only)."""
    if s != 0:
        return 1
    at = labels[labels["S"] == 0]
    mine = set(at.loc[at["correction"] == corr, "arm"].map(on_policy_arm))
    return int(at.loc[at["arm"].map(on_policy_arm).isin(mine), "correction"].nunique())


def _identical(labels: pd.DataFrame, corr: str, s: int) -> int:
    """How many of the cell's records carry a fingerprint that another correction's record at S has too."""
    at = labels[labels["S"] == s]
    others = set(at.loc[at["correction"] != corr, "fingerprint"])
    return int(at.loc[at["correction"] == corr, "fingerprint"].isin(others).sum())


def _ols_slope(x: np.ndarray, y: np.ndarray) -> float:
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / (xc**2).sum())


def slope_intervals(table: pd.DataFrame) -> dict:
    """For one correction's :func:`eta_brackets` rows: ``slope`` of log η_max in log S over S >= 1 and the
    grid-resolution interval ``grid_lo``/``grid_hi``: least squares is linear in the y's, so its extremes
    over y_i in [log lo_i, log hi_i] take each y_i at an end (the low end where (x_i − x̄) > 0 for the
    smallest slope); unbounded when a needed end is censored (0 or inf)."""
    t = table[table["S"] >= 1].sort_values("S")
    if len(t) < 2:
        return {"slope": math.nan, "grid_lo": math.nan, "grid_hi": math.nan}
    x = np.log(t["S"].to_numpy(float))
    w = x - x.mean()
    with np.errstate(divide="ignore"):
        lo, hi = np.log(t["lo"].to_numpy(float)), np.log(t["hi"].to_numpy(float))
    ends = {"grid_lo": np.where(w > 0, lo, hi), "grid_hi": np.where(w > 0, hi, lo)}
    out = {"slope": _ols_slope(x, np.log(t["eta_max"].to_numpy(float)))}
    for key, y in ends.items():
        finite = np.isfinite(y[w != 0]).all()
        out[key] = (
            _ols_slope(x, np.where(w == 0, 0.0, y))
            if finite
            else (-math.inf if key == "grid_lo" else math.inf)
        )
    return out


def bootstrap_slope(
    labels: pd.DataFrame,
    correction: str,
    *,
    label: str = "failed",
    effective: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
    ci: float = 0.95,
) -> dict:
    """The percentile interval of the slope of log η_max in log S (S >= 1) for one correction, over
    ``n_boot`` resamples of the seeds within each (S, η) cell (each cell's η axis, nominal or effective,
    held at its point value). Replicates whose slope is undefined are counted in ``failed``."""
    sub = labels[(labels["correction"] == correction) & (labels["S"] >= 1)]
    axis = "lr_effective" if effective else "lr"
    per_s = []
    for s, g in sub.groupby("S"):
        by_lr = sorted(g.groupby("lr"), key=lambda kv: kv[0])
        lrs = np.array([c[axis].mean() for _, c in by_lr])
        per_s.append((math.log(s), lrs, [c[label].to_numpy(bool) for _, c in by_lr]))
    if len(per_s) < 2:
        return {"ci": [math.nan, math.nan], "replicates": 0, "failed": n_boot}
    rng, x = np.random.default_rng(seed), np.array([p[0] for p in per_s])
    slopes = []
    for _ in range(n_boot):
        y = [
            math.log(
                _crossing(lrs, np.array([1 - f[rng.integers(0, len(f), len(f))].mean() for f in flags]))[
                    "eta_max"
                ]
            )
            for _, lrs, flags in per_s
        ]
        slopes.append(_ols_slope(x, np.array(y)))
    q = [(1 - ci) / 2 * 100, (1 + ci) / 2 * 100]
    good = np.array([v for v in slopes if math.isfinite(v)])
    return {
        "ci": [float(v) for v in np.percentile(good, q)],
        "replicates": len(good),
        "failed": n_boot - len(good),
    }


def slope_verdict(grid: tuple[float, float], boot: tuple[float, float]) -> str:
    """The pre-registered wording (docs/collapse_rule.md) from the grid-resolution and bootstrap
    intervals of the slope."""
    lo, hi = min(grid[0], boot[0]), max(grid[1], boot[1])
    if grid[0] <= 0 <= grid[1] and grid[0] <= -1 <= grid[1]:
        return "untestable at these budgets (the grid cannot tell a flat η_max from the 1/S law)"
    parts = ["η_max falls with S" if hi < 0 else "no fall of η_max with S shown"]
    parts.append("the 1/S law is excluded" if (lo > -1 or hi < -1) else "the 1/S law is not excluded")
    return "; ".join(parts)


def separable(table: pd.DataFrame, a: str, b: str, s: int) -> str:
    """Whether correction ``a`` raises η_max over ``b`` at lag ``s``: only if a's lower bracket is at or
    above b's upper bracket (and the reverse for lowering); else "not separable on this grid"."""
    ra = table[(table["correction"] == a) & (table["S"] == s)]
    rb = table[(table["correction"] == b) & (table["S"] == s)]
    if ra.empty or rb.empty:
        return "not run"
    ra, rb = ra.iloc[0], rb.iloc[0]
    if ra["lo"] >= rb["hi"]:
        return "raises"
    if rb["lo"] >= ra["hi"]:
        return "lowers"
    return "not separable on this grid"
