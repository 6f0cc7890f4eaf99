r"""The staleness × learning-rate study (arXiv 2607.01083; VCPO, arXiv 2602.17616): pure functions of the
run records of a grid over the lag S (``online.staleness``), the learning rate η (``train.lr``) and a
correction.

* :func:`load_stability`: one row per run: ``S``, ``lr``, ``correction`` (the arm without S and η),
  ``seed``, ``collapsed``, ``collapse_step``, the final reward; :func:`load_histories`: the runs'
  per-step metrics (``ess``, ``reward_mean``, ...).
* :func:`eta_max`: per (S, correction), the largest stable η: the share of seeds that did not collapse,
  interpolated on the grid's log scale where it crosses one half.
* :func:`fit_eta_max`: the slope of log η_max against log S (S >= 1), and the two-constraint form
  η_max(S) = min(a / S, b) of the stability condition η ≪ min{R_batch/(S·G), R_crit/(T·G)}, with
  intervals from resampling seeds (:func:`bootstrap_eta_max`).
* :func:`ess_lead_time`: how many steps before its collapse a run's ESS first fell below a threshold,
  and the hit and false-alarm rates of that alarm over runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.runs import _records, read_metrics

STABILITY_COLUMNS = [
    "run_id",
    "S",
    "lr",
    "correction",
    "source",
    "seed",
    "collapsed",
    "collapse_step",
    "reward",
    "accuracy",
    "accuracy_flexible",
    "base_accuracy_flexible",
]


def load_stability(root: str | Path, *, reward: str = "reward_mean") -> pd.DataFrame:
    """One row per finished online run under ``root``: its lag S, LR, correction, seed, whether and
    when it collapsed (``record.collapse``), its last logged ``reward``, its final strict and flexible
    accuracy and its base's flexible accuracy."""
    rows = []
    for rec in _records(root):
        if rec["status"] != "finished" or rec.get("paradigm") != "online":
            continue
        cfg, collapse = rec["config"], rec.get("collapse")
        arm = {
            k: v
            for k, v in (rec.get("arm") or {}).items()
            if k not in ("online.staleness", "train.lr", "scale", "lora")
        }
        history = read_metrics(rec["_dir"] / "metrics.jsonl")
        rows.append(
            {
                "run_id": rec["run_id"],
                "S": cfg["online"].get("staleness", 0),
                "lr": cfg["train"]["lr"],
                "correction": " ".join(f"{k}={v}" for k, v in sorted(arm.items())) or rec["method"],
                "source": cfg["online"].get("source", "sync"),
                "seed": rec["seed"],
                "collapsed": collapse is not None,
                "collapse_step": collapse["step"] if collapse else math.nan,
                "reward": history[-1].get(reward, math.nan) if history else math.nan,
                **{
                    k: (rec.get("metrics") or {}).get(k, math.nan)
                    for k in ("accuracy", "accuracy_flexible", "base_accuracy_flexible")
                },
            }
        )
    return pd.DataFrame(rows, columns=STABILITY_COLUMNS)


def load_histories(root: str | Path) -> pd.DataFrame:
    """Every logged step of every finished online run: ``run_id`` plus the metrics row."""
    frames = [
        pd.DataFrame(read_metrics(rec["_dir"] / "metrics.jsonl")).assign(run_id=rec["run_id"])
        for rec in _records(root)
        if rec["status"] == "finished" and rec.get("paradigm") == "online"
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run_id", "step"])


# ------------------------------------------------------------------------------------ η_max(S)


def eta_max(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (S, correction): the stable share p(η) = share of seeds not collapsed at each η, and η_max,
    where p crosses 1/2, linear in log η between the last grid η with p >= 1/2 and the next (η ascending).
    ``censored``: ``"above"`` if every η was stable (η_max is then the largest η tried), ``"below"``
    if none was (the smallest), ``""`` otherwise."""
    rows = []
    for (s, corr), g in runs.groupby(["S", "correction"]):
        p = 1.0 - g.groupby("lr")["collapsed"].mean().sort_index()  # the share of seeds that stayed stable
        rows.append({"S": s, "correction": corr, **_crossing(p.index.to_numpy(float), p.to_numpy(float))})
    return pd.DataFrame(rows, columns=["S", "correction", "eta_max", "censored"])


def _crossing(lrs: np.ndarray, stable: np.ndarray) -> dict:
    if stable[0] < 0.5:
        return {"eta_max": float(lrs[0]), "censored": "below"}
    below = np.nonzero(stable < 0.5)[0]
    if not len(below):
        return {"eta_max": float(lrs[-1]), "censored": "above"}
    j = below[0]
    x0, x1, p0, p1 = math.log(lrs[j - 1]), math.log(lrs[j]), stable[j - 1], stable[j]
    frac = (p0 - 0.5) / (p0 - p1)
    return {"eta_max": math.exp(x0 + frac * (x1 - x0)), "censored": ""}


def fit_eta_max(table: pd.DataFrame) -> dict:
    """For one correction's ``eta_max`` rows: ``slope`` of log η_max vs log S over S >= 1 (−1 is the
    O(S·η) law's), and the two-constraint fit log η_max = min(log a − log S, log b) over every S (S = 0
    gives b), least squares in log η. ``a``: the staleness constraint's scale (R_batch/G); ``b``: the
    on-policy ceiling (R_crit/(T·G)); ``S_knee`` = a / b, where the first starts to bind."""
    s, eta = table["S"].to_numpy(float), table["eta_max"].to_numpy(float)
    pos = s >= 1
    slope = float(np.polyfit(np.log(s[pos]), np.log(eta[pos]), 1)[0]) if pos.sum() >= 2 else math.nan
    y = np.log(eta)

    def loss(p):
        la, lb = p
        with np.errstate(divide="ignore"):
            pred = np.minimum(np.where(s > 0, la - np.log(np.where(s > 0, s, 1)), np.inf), lb)
        return float(((pred - y) ** 2).sum())

    from scipy import optimize  # imported where used: every report asks load_stability, few fit

    start = [float(np.max(y + np.log(np.maximum(s, 1)))), float(y.max())]
    best = optimize.minimize(
        loss, start, method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-12, "maxiter": 4000}
    )
    la, lb = best.x
    return {
        "slope": slope,
        "a": math.exp(la),
        "b": math.exp(lb),
        "S_knee": math.exp(la - lb),
        "sse": float(best.fun),
    }


def bootstrap_eta_max(
    runs: pd.DataFrame, correction: str, *, n_boot: int = 500, seed: int = 0, ci: float = 0.95
) -> dict:
    """:func:`fit_eta_max` for one correction, with percentile intervals from resampling, in every
    (S, η) cell, its seeds with replacement."""
    sub = runs[runs["correction"] == correction]
    point = fit_eta_max(eta_max(sub))
    rng = np.random.default_rng(seed)
    cells = [g for _, g in sub.groupby(["S", "lr"])]
    draws = []
    for _ in range(n_boot):
        sample = pd.concat([g.iloc[rng.integers(0, len(g), len(g))] for g in cells], ignore_index=True)
        draws.append(fit_eta_max(eta_max(sample)))
    q = [(1 - ci) / 2 * 100, (1 + ci) / 2 * 100]
    keys = ("slope", "a", "b", "S_knee")
    return {
        "fit": point,
        "ci": {k: [float(v) for v in np.nanpercentile([d[k] for d in draws], q)] for k in keys},
    }


# ----------------------------------------------------------------------------------- ESS alarm


def ess_lead_time(
    runs: pd.DataFrame, histories: pd.DataFrame, *, threshold: float = 0.5, metric: str = "ess"
) -> dict:
    """Per run, the first step whose ``metric`` fell below ``threshold``; for collapsed runs the lead
    time = collapse step − that step (a hit when the alarm came at or before the collapse). Returns
    the per-run table and the ``hit_rate`` (over collapsed runs), ``false_alarm_rate`` (share of runs
    that never collapsed whose ESS still fell below the threshold) and the median lead of the hits."""
    rows = []
    for r in runs.itertuples():
        h = histories[histories["run_id"] == r.run_id].sort_values("step")
        low = h.loc[h[metric] < threshold, "step"]
        alarm = float(low.iloc[0]) if len(low) else math.nan
        lead = r.collapse_step - alarm if r.collapsed and not math.isnan(alarm) else math.nan
        rows.append(
            {
                "run_id": r.run_id,
                "collapsed": r.collapsed,
                "collapse_step": r.collapse_step,
                "alarm_step": alarm,
                "lead": lead,
                "hit": bool(r.collapsed and lead >= 0),
            }
        )
    table = pd.DataFrame(rows, columns=["run_id", "collapsed", "collapse_step", "alarm_step", "lead", "hit"])
    collapsed, stable = table[table["collapsed"]], table[~table["collapsed"]]
    hits = collapsed[collapsed["hit"]]
    return {
        "table": table,
        "hit_rate": float(collapsed["hit"].mean()) if len(collapsed) else math.nan,
        "false_alarm_rate": float(stable["alarm_step"].notna().mean()) if len(stable) else math.nan,
        "median_lead": float(hits["lead"].median()) if len(hits) else math.nan,
    }
