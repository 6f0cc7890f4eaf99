r"""IsoCompute (arXiv 2603.12151): the compute frontier of on-policy RL and the optimal allocation.

A budgeted grid (``oxbench.grid.spec``, ``budget:``) trains runs that each spend C_max = B_p · n · M
rollouts and record a learning curve (``curve.jsonl``: the validation metrics at cumulative compute
C). Everything here is a pure function of those curves:

* :func:`load_curves`: one row per curve point of every finished run, with its arm (``n``, ``B_p``,
  ``subset``, ``seed``, the run's LR) and its compute in rollouts and tokens;
* :func:`record_breaking`: the paper's record-breaking points, the points where a run's reward
  enters a higher bucket than it ever reached before;
* :func:`frontier`: f(C) = max over points with C_j <= C (equal from all points and from the
  record-breaking ones alone, up to the bucket width);
* :func:`fit_sigmoid` / :func:`sigmoid`: a monotone sigmoid in log C,
  ``lo + (hi − lo) / (1 + exp(−k (log C − m)))`` with k >= 0, one per n (:func:`fits_by_n`);
* :func:`n_star`: n*(C), the n whose fit is highest at C (the upper envelope of the fits);
* :func:`fit_n_star` and :func:`bootstrap_n_star`: the sigmoid of log n* against log C (lower and
  upper plateaus, midpoint, slope) with intervals from resampling seeds;
* :func:`at_compute` and :func:`paired_by_problem`: best@k and worst@k per n at matched compute,
  with the two-way test (runs × validation problems, issue 40) and the Wilcoxon test over problems
  beside it;
* :func:`variance_share`: how much of the frontier's variance n explains, and how much B_p.

Units: ``x="rollouts"`` is the paper's C; ``x="generated_tokens"`` its appendix's token compute.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.runs import _records
from analysis.twoway import two_way_difference

CURVE_KEYS = ("rollouts", "generated_tokens", "trained_tokens", "step")
SIGMOID_PARAMS = ("lo", "hi", "mid", "slope")


# ------------------------------------------------------------------------------------- loading


def load_curves(root: str | Path) -> pd.DataFrame:
    """Every curve point of every finished run under ``root`` that has a ``curve.jsonl``.

    Columns: ``run_id, seed, n, B_p, subset, lr, rollouts_max`` and the curve row's keys (compute:
    ``rollouts``, ``generated_tokens``, ``trained_tokens``, ``gen_seconds``, ``train_seconds``;
    metrics: ``accuracy``, ``avg_at_k``, ``best_at_k``, ``worst_at_k``, ``correct_counts``...). A
    malformed line raises ``ValueError`` naming ``file:line``."""
    frames = []
    for record in _records(root):
        path = record["_dir"] / "curve.jsonl"
        if record["status"] != "finished" or not path.is_file():
            continue
        cfg = record["config"]
        online = cfg["online"]
        arm = {
            "run_id": record["run_id"],
            "seed": record["seed"],
            "n": online["n"],
            "B_p": online["prompts_per_batch"],
            "subset": _subset_label(cfg["data"].get("subset")),
            "lr": cfg["train"]["lr"],
            "rollouts_max": online["prompts_per_batch"] * online["n"] * online["rounds"],
            "arm": json.dumps(record.get("arm") or {}, sort_keys=True),
        }
        frames.append(pd.DataFrame([{**arm, **row} for row in _read_curve(path)]))
    if not frames:
        return pd.DataFrame(
            columns=["run_id", "seed", "n", "B_p", "subset", "lr", "rollouts_max", *CURVE_KEYS]
        )
    return pd.concat(frames, ignore_index=True).sort_values(
        ["subset", "n", "B_p", "seed", "rollouts"], ignore_index=True
    )


def _subset_label(subset) -> str:
    if subset is None:
        return "all"
    if isinstance(subset, str):
        return subset
    return "+".join(f"{k}:{v:g}" for k, v in sorted(subset.items()))


def _read_curve(path: Path) -> list[dict]:
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{i}: malformed curve row ({exc.msg})") from None
        missing = [k for k in CURVE_KEYS if k not in row]
        if missing:
            raise ValueError(f"{path}:{i}: curve row without field {missing[0]!r}")
        rows.append(row)
    return rows


# ------------------------------------------------------------------------- frontier and records


def record_breaking(
    curves: pd.DataFrame, metric: str, *, x: str = "rollouts", bucket: float = 0.01
) -> pd.DataFrame:
    """The record-breaking points: per run, in order of compute, each point whose reward falls in a
    higher bucket (``floor(reward / bucket)``) than every earlier point of that run; the first point
    of each such bucket increase is kept (``bucket=0``: every point above the run's best so far).
    Every other point is dominated by an earlier one of its run, so :func:`frontier` is the same from
    these points alone (exactly at ``bucket=0``, within one bucket otherwise)."""
    keep = []
    for _, run in curves.sort_values(x).groupby("run_id", sort=False):
        best = -math.inf
        for idx, value in run[metric].items():
            level = math.floor(value / bucket + 1e-9) if bucket > 0 else value
            if level > best:
                keep.append(idx)
                best = level
    return curves.loc[sorted(keep)]


def frontier(points: pd.DataFrame, metric: str, *, x: str = "rollouts", at=None) -> pd.DataFrame:
    """f(C) = max of ``metric`` over the points with ``x`` <= C, at each C of ``at`` (default: every
    distinct ``x`` of the points), with the arm that attains it (``n``, ``B_p``, ``run_id``)."""
    pts = points.sort_values([x, metric], ascending=[True, False])
    at = np.unique(pts[x]) if at is None else np.asarray(at)
    rows = []
    for c in at:
        seen = pts[pts[x] <= c]
        if seen.empty:
            continue
        best = seen.loc[seen[metric].idxmax()]
        rows.append(
            {x: c, metric: best[metric], "n": best["n"], "B_p": best["B_p"], "run_id": best["run_id"]}
        )
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------- sigmoids


def sigmoid(log_c, lo: float, hi: float, mid: float, slope: float):
    """``lo + (hi − lo) / (1 + exp(−slope · (log_c − mid)))``: monotone increasing for slope >= 0."""
    return lo + (hi - lo) / (1.0 + np.exp(-slope * (np.asarray(log_c, float) - mid)))


def fit_sigmoid(log_c, y, *, bounds: tuple[float, float] | None = None) -> dict:
    """Least-squares monotone sigmoid of ``y`` against ``log_c`` (natural log of compute).

    ``bounds``: the range both plateaus must lie in (default: the data's range, widened by its span).
    Parametrised as ``hi`` in that range and ``lo = lo_b + f · (hi − lo_b)`` with f in [0, 1], so
    lo <= hi (monotone increasing with slope >= 0) and neither plateau leaves the bounds (a reward
    never passes 1, however a curve still rising at the last point extrapolates). Returns ``lo, hi,
    mid, slope`` and the fit's ``rmse``. Fewer than four distinct points: a ValueError."""
    log_c, y = np.asarray(log_c, float), np.asarray(y, float)
    if len(np.unique(log_c)) < 4:
        raise ValueError(f"a sigmoid needs >= 4 distinct compute values, got {len(np.unique(log_c))}")
    span = max(float(np.ptp(y)), 1e-6)
    lo_b, hi_b = bounds if bounds is not None else (float(y.min()) - span, float(y.max()) + span)
    width = float(np.ptp(log_c))

    def model(lc, hi, frac, mid, slope):
        return sigmoid(lc, lo_b + frac * (hi - lo_b), hi, mid, slope)

    frac0 = (float(y.min()) - lo_b) / max(float(y.max()) - lo_b, 1e-9)
    p0 = [float(y.max()), frac0, float(np.median(log_c)), 4.0 / max(width, 1e-6)]
    lower = [lo_b, 0.0, float(log_c.min()) - width, 0.0]
    upper = [hi_b, 1.0, float(log_c.max()) + width, 50.0 / max(width, 1e-6)]
    p0 = np.clip(p0, lower, upper)
    from scipy import optimize  # imported where used: a report without learning curves never needs it

    (hi, frac, mid, slope), _ = optimize.curve_fit(
        model, log_c, y, p0=p0, bounds=(lower, upper), maxfev=20000
    )
    rmse = float(np.sqrt(np.mean((model(log_c, hi, frac, mid, slope) - y) ** 2)))
    lo = lo_b + frac * (hi - lo_b)
    return {"lo": float(lo), "hi": float(hi), "mid": float(mid), "slope": float(slope), "rmse": rmse}


def fits_by_n(
    curves: pd.DataFrame, metric: str, *, x: str = "rollouts", use: str = "records", bucket: float = 0.01
) -> pd.DataFrame:
    """One monotone sigmoid of ``metric`` against log C per n, fitted to the frontier of that n's runs
    (every B_p and seed; ``use="records"``: their record-breaking points, ``"all"``: every point).
    Points at C = 0 (the base) are left out of the log scale. Rows: ``n`` and the fit's parameters."""
    rows = []
    for n, runs in curves[curves[x] > 0].groupby("n"):
        pts = record_breaking(runs, metric, x=x, bucket=bucket) if use == "records" else runs
        front = frontier(pts, metric, x=x, at=np.unique(runs[x]))
        rows.append({"n": n, **fit_sigmoid(np.log(front[x]), front[metric], bounds=(0.0, 1.0))})
    return pd.DataFrame(rows)


def n_star(fits: pd.DataFrame, log_c) -> pd.DataFrame:
    """n*(C): at each log C, the n whose fitted sigmoid is highest (the upper envelope of the fits)."""
    log_c = np.asarray(log_c, float)
    curves = np.stack([sigmoid(log_c, r.lo, r.hi, r.mid, r.slope) for r in fits.itertuples()])
    best = curves.argmax(0)
    return pd.DataFrame(
        {"log_c": log_c, "C": np.exp(log_c), "n_star": fits["n"].to_numpy()[best], "reward": curves.max(0)}
    )


def fit_n_star(log_c, n_values) -> dict:
    """The sigmoid of log2 n* against log C: ``lo``/``hi`` (log2 of the plateaus' n), ``mid`` (log C at
    the midpoint) and ``slope``; also the plateaus and the midpoint in natural units
    (``n_lo``, ``n_hi``, ``C_mid``)."""
    y = np.log2(np.asarray(n_values, float))
    p = fit_sigmoid(log_c, y, bounds=(float(y.min()) - 1, float(y.max()) + 1))
    return {**p, "n_lo": 2 ** p["lo"], "n_hi": 2 ** p["hi"], "C_mid": math.exp(p["mid"])}


def bootstrap_n_star(
    curves: pd.DataFrame,
    metric: str,
    *,
    x: str = "rollouts",
    n_boot: int = 200,
    seed: int = 0,
    n_grid: int = 40,
    ci: float = 0.95,
) -> dict:
    """The n*(C) fit and percentile intervals over seeds: each replicate draws, for every (n, B_p) arm,
    its seeds with replacement, refits every n's sigmoid and refits n*(C). Replicates whose fits fail
    (too few points, a flat n*) are counted in ``failed`` and left out."""
    grid = _log_grid(curves, x, n_grid)
    point = fit_n_star(grid, n_star(fits_by_n(curves, metric, x=x), grid)["n_star"])
    rng = np.random.default_rng(seed)
    arms = {key: list(g.groupby("seed")) for key, g in curves.groupby(["n", "B_p"])}
    draws, failed = [], 0
    for _ in range(n_boot):
        parts = []
        for key, seeds in arms.items():
            for j, i in enumerate(rng.integers(0, len(seeds), len(seeds))):
                parts.append(seeds[i][1].assign(run_id=f"{key}-{j}"))
        try:
            sample = pd.concat(parts, ignore_index=True)
            draws.append(fit_n_star(grid, n_star(fits_by_n(sample, metric, x=x), grid)["n_star"]))
        except (ValueError, RuntimeError):
            failed += 1
    q = [(1 - ci) / 2 * 100, (1 + ci) / 2 * 100]
    intervals = {
        k: [float(v) for v in np.percentile([d[k] for d in draws], q)] for k in point if draws and k != "rmse"
    }
    return {
        "fit": point,
        "ci": intervals,
        "replicates": len(draws),
        "failed": failed,
        "log_c": list(grid),
        "draws": draws,
    }


def _log_grid(curves: pd.DataFrame, x: str, n: int) -> np.ndarray:
    pos = curves.loc[curves[x] > 0, x]
    return np.linspace(math.log(pos.min()), math.log(pos.max()), n)


# -------------------------------------------------------------------- matched compute, problems


def at_compute(curves: pd.DataFrame, c: float, *, x: str = "rollouts") -> pd.DataFrame:
    """Per run, its curve point with the largest ``x`` <= ``c`` (matched compute across n)."""
    pts = curves[curves[x] <= c].sort_values(x)
    return pts.groupby("run_id", sort=False).tail(1).reset_index(drop=True)


def per_problem(counts, samples: int, k: int, kind: str) -> np.ndarray:
    """Per problem, the unbiased best@k (pass@k) or worst@k (all k right) from its count of correct
    samples out of ``samples``."""
    fn = {
        "best": lambda c: 1 - math.comb(samples - c, k) / math.comb(samples, k),
        "worst": lambda c: math.comb(c, k) / math.comb(samples, k),
    }[kind]
    return np.array([fn(int(c)) for c in counts], float)


def paired_by_problem(points: pd.DataFrame, n_a: int, n_b: int, *, k: int, kind: str) -> dict:
    """best@k or worst@k of n_b against n_a on the same validation problems (one point per run, e.g.
    from :func:`at_compute`): the mean difference; the two-way test with the runs of each n as its seeds
    and the validation problems crossed with them (:func:`analysis.twoway.two_way_difference`:
    ``ci_low``, ``ci_high``, ``two_way_p``; NaN with one run on a side; unit: seeds × problems); beside
    it the Wilcoxon signed-rank test over problems of each n's runs averaged per problem (``p``; unit:
    problems) and how many problems each side wins."""
    per_n = {}
    for n in (n_a, n_b):
        rows = points[points["n"] == n]
        if rows.empty:
            raise ValueError(f"no runs with n={n} at this compute")
        per_n[n] = np.array(
            [per_problem(r.correct_counts, r.samples_per_problem, k, kind) for r in rows.itertuples()]
        )
    from scipy import stats

    diff = per_n[n_b].mean(0) - per_n[n_a].mean(0)
    nonzero = diff[diff != 0]
    p = float(stats.wilcoxon(nonzero).pvalue) if len(nonzero) >= 1 else 1.0
    tw = two_way_difference(per_n[n_b], per_n[n_a])
    return {
        "kind": kind,
        "n_a": n_a,
        "n_b": n_b,
        "a": float(per_n[n_a].mean()),
        "b": float(per_n[n_b].mean()),
        "delta": float(diff.mean()),
        "ci_low": tw["ci_low"],
        "ci_high": tw["ci_high"],
        "two_way_p": tw["p"],
        "p": p,
        "b_wins": int((diff > 0).sum()),
        "a_wins": int((diff < 0).sum()),
        "problems": len(diff),
    }


def variance_share(points: pd.DataFrame, metric: str, factors=("n", "B_p")) -> dict:
    """The share of the variance of ``metric`` (e.g. each run's reward at matched compute) that each
    factor explains on its own (one-way η² = SS_between / SS_total), plus ``residual`` = 1 − the
    two-factor model's R² (main effects, least squares on one-hot factors)."""
    y = points[metric].to_numpy(float)
    total = float(((y - y.mean()) ** 2).sum())
    out = {}
    for f in factors:
        means = points.groupby(f)[metric].transform("mean").to_numpy(float)
        out[f] = float(((means - y.mean()) ** 2).sum() / total) if total else math.nan
    design = pd.get_dummies(points[list(factors)].astype(str), drop_first=True).to_numpy(float)
    design = np.column_stack([np.ones(len(y)), design])
    fitted = design @ np.linalg.lstsq(design, y, rcond=None)[0]
    out["residual"] = float(((y - fitted) ** 2).sum() / total) if total else math.nan
    return out
