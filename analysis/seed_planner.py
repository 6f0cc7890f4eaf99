r"""How many seeds? A seed planner from pilot variances (issue 27.6).

**Fixed design** (:func:`required_seeds`): the smallest number of seeds per arm at which Welch's
two-sided t-test of two arms detects a difference ``delta`` with probability ``power`` at level
``alpha / m`` (Bonferroni over the ``m`` comparisons of the study). The power at n seeds per arm is
the noncentral t's (:func:`welch_power`): with σ_a, σ_b the arms' seed standard deviations,
ncp = δ / √(σ_a²/n_a + σ_b²/n_b) and ν the Welch-Satterthwaite degrees of freedom,
power = P(|T'| > t_{1−α/2, ν}) for T' ~ t'(ν, ncp) (Student's when σ_a = σ_b; the classic table:
Cohen's d = 1 needs 17 seeds per arm at α = 0.05 and power 0.8, d = 0.5 needs 64).
:func:`plan` reads σ from pilot seeds (:func:`analysis.load_runs`). With 3 pilot seeds an SD is uncertain
by a factor of about 2, and planning on the pilot's SD itself reaches the requested power only on average
over pilots that overestimate σ: from 3-seed pilots the achieved power averaged 0.60–0.75 (issue 40).
So by default :func:`plan` plans on the one-sided upper :data:`SD_QUANTILE` (70%) confidence limit of
each σ (:func:`sd_upper`); ``sd_quantile=None`` plans on the point estimate. The 70% limit is the
smallest of 0.55–0.90 (steps of 0.05) whose achieved power, averaged over 3-seed pilots drawn from the
truth, is at least 0.80 in every design of ``tests/test_seed_planner.py`` (0.84–0.92 there).

**Sequential design** (:func:`sequential_boundaries`, :func:`sequential_decisions`): seeds are added
in looks n_1 < … < n_K per arm, and only pairs not yet decided get more. Error control: the study's α
is split over its m pairs by Bonferroni (α/m each); within a pair, over its looks, by a Lan-DeMets
alpha-spending function: ``"obrien-fleming"`` α(t) = 2 − 2Φ(z_{1−α/2}/√t) (O'Brien-Fleming-like, the
default: little α spent early), ``"pocock"`` α(t) = α log(1 + (e − 1)t), or ``"bonferroni"`` (α/K at each
look: valid whatever the looks' correlation, conservative). t = n_k / n_K is the information fraction.
The z-boundaries of the spending functions are computed for the canonical joint law of the looks'
statistics (Corr(Z_j, Z_k) = √(t_j/t_k)) by simulation, and applied to Welch's test through its nominal
p-value at each look; :func:`simulate_sequential` checks the error rate it gives with t-tests. A pair
is *decided* when it crosses its look's boundary (a difference), or at the last look (no difference
detected). Efficacy stopping only; no futility stop.

Unit of replication throughout: seeds (each run one observation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from analysis.stats import by_arm

SPENDING = ("obrien-fleming", "pocock", "bonferroni")
#: The upper confidence limit of a pilot's σ that :func:`plan` plans on by default (module doc).
SD_QUANTILE = 0.7


def welch_df(sd_a: float, sd_b: float, n_a: int, n_b: int) -> float:
    """The Welch-Satterthwaite degrees of freedom of two arms with these SDs and seed counts."""
    va, vb = sd_a**2 / n_a, sd_b**2 / n_b
    if va + vb == 0:
        return float(n_a + n_b - 2)
    return (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))


def welch_power(delta: float, sd_a: float, sd_b: float, n_a: int, n_b: int, alpha: float) -> float:
    """The power of Welch's two-sided test at level ``alpha`` to detect a mean difference ``delta``
    (noncentral t with the Welch-Satterthwaite ν; module doc)."""
    se = math.sqrt(sd_a**2 / n_a + sd_b**2 / n_b)
    if se == 0:
        return 1.0 if delta else alpha
    nu, ncp = welch_df(sd_a, sd_b, n_a, n_b), abs(delta) / se
    crit = stats.t.ppf(1 - alpha / 2, nu)
    power = float(stats.nct.sf(crit, nu, ncp) + stats.nct.cdf(-crit, nu, ncp))
    if math.isnan(power):  # scipy's noncentral t fails far in its tail (large ncp): the normal limit
        power = float(stats.norm.sf(crit - ncp) + stats.norm.cdf(-crit - ncp))
    return power


def required_seeds(
    delta: float,
    sd_a: float,
    sd_b: float | None = None,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    m: int = 1,
    max_n: int = 10_000,
) -> int:
    """The smallest n >= 2 seeds per arm with :func:`welch_power` >= ``power`` at level ``alpha / m``
    (Bonferroni over m comparisons); ``max_n + 1`` when even ``max_n`` is not enough."""
    sd_b = sd_a if sd_b is None else sd_b
    level = alpha / m
    lo, hi = 2, 2
    while welch_power(delta, sd_a, sd_b, hi, hi, level) < power:
        if hi > max_n:
            return max_n + 1
        lo, hi = hi, hi * 2
    while lo < hi:  # power rises with n: the first n that reaches it
        mid = (lo + hi) // 2
        if welch_power(delta, sd_a, sd_b, mid, mid, level) >= power:
            hi = mid
        else:
            lo = mid + 1
    return hi


def sd_upper(sd: float, n: int, quantile: float) -> float:
    """The one-sided upper ``quantile`` confidence limit of σ from an SD over n seeds (χ² with n − 1 df)."""
    return sd * math.sqrt((n - 1) / stats.chi2.ppf(1 - quantile, n - 1))


def simulate_power(
    n: int, delta: float, sd_a: float, sd_b: float, alpha: float, *, n_sims: int = 1000, seed: int = 0
) -> float:
    """The share of ``n_sims`` simulated studies (normal seeds, n per arm) in which Welch's two-sided test
    rejects at ``alpha``: the empirical power of a plan (vectorised)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(delta, sd_a, (n_sims, n))
    b = rng.normal(0.0, sd_b, (n_sims, n))
    return float((_welch_p(a, b) < alpha).mean())


def _welch_p(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two-sided Welch p-values of the rows of ``a`` against those of ``b`` (seeds along axis 1)."""
    na, nb = a.shape[1], b.shape[1]
    va, vb = a.var(axis=1, ddof=1) / na, b.var(axis=1, ddof=1) / nb
    se = np.sqrt(va + vb)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (a.mean(axis=1) - b.mean(axis=1)) / se
        nu = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    p = 2 * stats.t.sf(np.abs(t), nu)
    return np.where(se > 0, p, 1.0)


# ------------------------------------------------------------------------------------ sequential


def spent(t: np.ndarray, alpha: float, spending: str) -> np.ndarray:
    """The cumulative α spent at the looks' information fractions ``t`` (ascending, the last 1; module doc)."""
    t = np.asarray(t, float)
    if spending == "obrien-fleming":
        return 2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / np.sqrt(t))
    if spending == "pocock":
        return alpha * np.log(1 + (math.e - 1) * t)
    if spending == "bonferroni":
        return alpha * np.arange(1, len(t) + 1) / len(t)
    raise ValueError(f"unknown spending {spending!r}; expected one of {SPENDING}")


def sequential_boundaries(
    looks: Sequence[int],
    alpha: float,
    spending: str = "obrien-fleming",
    *,
    n_sims: int = 400_000,
    seed: int = 0,
) -> pd.DataFrame:
    """Per look: ``n`` (seeds per arm), ``t`` = n / n_K, cumulative ``alpha_spent``, the two-sided
    z-boundary ``z`` and the nominal two-sided p-value ``p_nominal`` = 2(1 − Φ(z)) a look's Welch p must be
    below. For ``"bonferroni"`` each look gets α/K. Otherwise each boundary is set, in order, so that the
    share of simulated standard Brownian paths (n_sims, Corr(Z_j, Z_k) = √(t_j/t_k)) first crossing at
    that look equals the α the look spends."""
    n = np.asarray(sorted(looks), float)
    if len(n) < 1 or n[0] < 2:
        raise ValueError(f"looks must be seed counts >= 2, got {list(looks)}")
    t = n / n[-1]
    cum = spent(t, alpha, spending)
    if spending == "bonferroni":
        p = np.full(len(n), alpha / len(n))
        return pd.DataFrame(
            {"n": n.astype(int), "t": t, "alpha_spent": cum, "z": stats.norm.isf(p / 2), "p_nominal": p}
        )
    rng = np.random.default_rng(seed)
    steps = rng.standard_normal((n_sims, len(n))) * np.sqrt(np.diff(np.r_[0.0, t]))
    z = np.abs(np.cumsum(steps, axis=1)) / np.sqrt(t)
    alive, bounds = np.ones(n_sims, bool), []
    for k in range(len(n)):
        target = cum[k] - (cum[k - 1] if k else 0.0)  # the share of all paths to stop at look k
        live = np.sort(z[alive, k])[::-1]
        j = int(round(target * n_sims))
        c = float(live[j - 1] + live[j]) / 2 if 0 < j < len(live) else float("inf")
        bounds.append(c)
        alive &= z[:, k] < c
    zb = np.array(bounds)
    return pd.DataFrame(
        {"n": n.astype(int), "t": t, "alpha_spent": cum, "z": zb, "p_nominal": 2 * stats.norm.sf(zb)}
    )


def simulate_sequential(
    boundaries: pd.DataFrame, delta: float, sd_a: float, sd_b: float, *, n_sims: int = 20_000, seed: int = 1
) -> dict:
    """Simulated studies of one pair under the sequential plan with Welch's test at each look: the share
    that ``reject`` (the type I error when ``delta`` = 0, the power otherwise), the mean seeds per arm
    used (``expected_n``), and the share stopped at each look."""
    rng = np.random.default_rng(seed)
    n_max = int(boundaries["n"].max())
    a, b = rng.normal(delta, sd_a, (n_sims, n_max)), rng.normal(0.0, sd_b, (n_sims, n_max))
    done, used, stops = np.zeros(n_sims, bool), np.full(n_sims, n_max, float), []
    for r in boundaries.itertuples():
        hit = ~done & (_welch_p(a[:, : r.n], b[:, : r.n]) < r.p_nominal)
        used[hit], done = r.n, done | hit
        stops.append(float(hit.mean()))
    return {"reject": float(done.mean()), "expected_n": float(used.mean()), "stopped_at": stops}


# ------------------------------------------------------------------------------- from the records


def pilot(df: pd.DataFrame, metric: str = "accuracy", by: Sequence[str] = ("scale",)) -> pd.DataFrame:
    """Per group of ``by`` and arm (:func:`analysis.stats.by_arm`): pilot seeds ``n``, ``mean`` and seed ``sd``
    of ``metric``; arms that repeat another's records (:func:`analysis.units.duplicate_arms`) left out."""
    g = _once(df).dropna(subset=[metric]).groupby([*by, "method"])[metric]
    return g.agg(
        n="count", mean="mean", sd=lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else math.nan
    ).reset_index()


def _once(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` by arm, each set of arms that repeat one another's records counted once (issue 27.5)."""
    from analysis.units import drop_duplicate_arms, duplicate_arms

    if {"run_id", "path"} <= set(df.columns):
        df = drop_duplicate_arms(df, duplicate_arms(df))
    return by_arm(df)


def plan(
    df: pd.DataFrame,
    baseline: str,
    delta: float,
    *,
    metric: str = "accuracy",
    alpha: float = 0.05,
    power: float = 0.8,
    sd_quantile: float | None = SD_QUANTILE,
    by: Sequence[str] = ("scale",),
) -> pd.DataFrame:
    """Per group and arm against ``baseline`` (Welch, Bonferroni over the group's m comparisons): the
    pilot ``n`` and SDs (their upper ``sd_quantile`` confidence limits if given), the observed difference,
    the power the pilot's n has for ``delta`` (``power_now``), and the seeds per arm needed to detect
    ``delta`` (``n_for_delta``) and to detect the observed difference (``n_for_observed``)."""
    p, rows = pilot(df, metric, by), []
    for key, g in p.groupby(list(by), sort=False):
        base = g[g["method"] == baseline]
        if base.empty:
            continue
        b, arms = base.iloc[0], g[g["method"] != baseline]
        m = len(arms)
        for a in arms.itertuples():
            sda, sdb = a.sd, b["sd"]
            if sd_quantile is not None:
                sda, sdb = sd_upper(sda, a.n, sd_quantile), sd_upper(sdb, int(b["n"]), sd_quantile)
            observed = a.mean - b["mean"]
            rows.append(
                {
                    **dict(zip(by, key if isinstance(key, tuple) else (key,))),
                    "method": a.method,
                    "baseline": baseline,
                    "n_pilot": int(min(a.n, b["n"])),
                    "sd": sda,
                    "sd_baseline": sdb,
                    "observed": observed,
                    "m": m,
                    "alpha_each": alpha / m,
                    "power_now": welch_power(delta, sda, sdb, a.n, int(b["n"]), alpha / m),
                    "n_for_delta": required_seeds(delta, sda, sdb, alpha=alpha, power=power, m=m),
                    "n_for_observed": required_seeds(observed, sda, sdb, alpha=alpha, power=power, m=m)
                    if observed
                    else math.inf,
                }
            )
    return pd.DataFrame(rows)


def sequential_decisions(
    df: pd.DataFrame,
    baseline: str,
    looks: Sequence[int],
    *,
    metric: str = "accuracy",
    alpha: float = 0.05,
    spending: str = "obrien-fleming",
    by: Sequence[str] = ("scale",),
) -> pd.DataFrame:
    """Per group and arm against ``baseline``: the sequential plan's state on the seeds run so far. α is
    split over the group's m pairs (Bonferroni) and over each pair's looks by ``spending``
    (:func:`sequential_boundaries`); each look tests the first n_k seeds (by seed number) of both arms.
    ``decision``: ``"differs"`` (crossed at ``look``: add no more seeds), ``"no difference detected"``
    (the last look passed without crossing), or ``"add seeds"`` with ``next_n`` seeds per arm to run."""
    d, rows = _once(df).dropna(subset=[metric]), []
    for key, g in d.groupby(list(by), sort=False):
        arms = sorted(set(g["method"]) - {baseline})
        if baseline not in set(g["method"]) or not arms:
            continue
        bounds = sequential_boundaries(looks, alpha / len(arms), spending)
        base = g[g["method"] == baseline].sort_values("seed")[metric].to_numpy(float)
        for arm in arms:
            x = g[g["method"] == arm].sort_values("seed")[metric].to_numpy(float)
            row = _sequential_row(x, base, bounds)
            rows.append(
                {
                    **dict(zip(by, key if isinstance(key, tuple) else (key,))),
                    "method": arm,
                    "baseline": baseline,
                    "seeds": int(min(len(x), len(base))),
                    "m": len(arms),
                    **row,
                }
            )
    return pd.DataFrame(rows)


def _sequential_row(x: np.ndarray, base: np.ndarray, bounds: pd.DataFrame) -> dict:
    """One pair's state: the first look it crossed, or where it stands."""
    have, last, p, bound = min(len(x), len(base)), None, math.nan, math.nan
    for r in bounds.itertuples():
        if r.n > have:
            return {"look": last, "p": p, "p_nominal": bound, "decision": "add seeds", "next_n": int(r.n)}
        p, last, bound = float(_welch_p(x[None, : r.n], base[None, : r.n])[0]), int(r.n), float(r.p_nominal)
        if p < bound:
            return {"look": last, "p": p, "p_nominal": bound, "decision": "differs", "next_n": None}
    return {"look": last, "p": p, "p_nominal": bound, "decision": "no difference detected", "next_n": None}


# ------------------------------------------------------------------------------------------- CLI


def plan_text(
    directory: str | None,
    *,
    baseline: str = "dpo",
    delta: float = 0.05,
    power: float = 0.8,
    alpha: float = 0.05,
    metric: str = "accuracy",
    sd: Sequence[float] = (),
    comparisons: int = 1,
    looks: Sequence[int] = (3, 5, 8, 12),
    spending: str = "obrien-fleming",
    sd_quantile: float | None = SD_QUANTILE,
) -> str:
    """What ``oxbench plan-seeds`` prints: from ``sd`` (one or two seed SDs; ``comparisons`` = m) or from the
    pilot records under ``directory``, the seeds per arm to detect ``delta`` at α/m with ``power``, the
    sequential plan's boundaries and, for records, each pair's sequential decision. Bad input: ValueError."""
    if not 0 < alpha < 1 or not 0 < power < 1 or delta <= 0 or spending not in SPENDING:
        raise ValueError(f"need 0 < alpha, power < 1, delta > 0 and spending in {SPENDING}")
    m = comparisons
    lines = [
        f"Welch's two-sided t-test, unit of replication: seeds; α = {alpha:g} split by Bonferroni; "
        f"difference to detect δ = {100 * delta:g} points; power {power:g}."
    ]
    df = None
    if sd:
        a, b = float(sd[0]), float(sd[-1])
        n = required_seeds(delta, a, b, alpha=alpha, power=power, m=m)
        lines.append(
            f"σ = {100 * a:g} and {100 * b:g} points, m = {m}: {n} seeds per arm "
            f"(power there {welch_power(delta, a, b, n, n, alpha / m):.3f})."
        )
    else:
        df, m, fixed = _pilot_plan(directory, baseline, delta, metric, alpha, power, sd_quantile)
        lines += fixed
    bounds = sequential_boundaries(looks, alpha / m, spending)
    lines += [
        "",
        f"Sequential design ({spending} spending of α/m = {alpha / m:.3g} per pair over looks at "
        f"{', '.join(map(str, bounds['n']))} seeds per arm; a pair that crosses stops getting seeds):",
        bounds.to_string(index=False, float_format=lambda v: f"{v:.3g}"),
    ]
    if sd:
        h1, h0 = (simulate_sequential(bounds, d, a, b, n_sims=20_000) for d in (delta, 0.0))
        lines.append(
            f"Simulated (20,000 studies of one pair): power {h1['reject']:.3f} with "
            f"{h1['expected_n']:.1f} seeds per arm on average; error rate at δ = 0: {h0['reject']:.4f}."
        )
    else:
        dec = sequential_decisions(df, baseline, looks, metric=metric, alpha=alpha, spending=spending)
        lines += [
            "",
            "Where each pair stands on the seeds run so far:",
            dec.to_string(index=False, float_format=lambda v: f"{v:.3g}"),
        ]
    return "\n".join(lines)


def _pilot_plan(
    directory: str | None,
    baseline: str,
    delta: float,
    metric: str,
    alpha: float,
    power: float,
    sd_quantile: float | None = SD_QUANTILE,
) -> tuple[pd.DataFrame, int, list[str]]:
    """The pilot records under ``directory``, the number of comparisons m they hold, and the fixed design's
    lines: the seeds per arm each pair needs (ValueError where there are none to plan from)."""
    if directory is None:
        raise ValueError("give a results directory with pilot seeds, or --sd")
    from analysis.runs import load_runs

    df = load_runs(directory)
    table = plan(df, baseline, delta, metric=metric, alpha=alpha, power=power, sd_quantile=sd_quantile)
    if table.empty:
        raise ValueError(f"{directory}: no arm beside a baseline {baseline!r} with {metric!r}")
    lines = [
        "",
        "Fixed design, from the pilot seeds (σ in points"
        + (f", each its {sd_quantile:.0%} upper confidence limit" if sd_quantile else ", the pilots' own")
        + "; n_for_delta / n_for_observed: seeds per arm):",
        _fmt_table(table, ("sd", "sd_baseline", "observed")),
    ]
    return df, int(table["m"].max()), lines


def _fmt_table(table: pd.DataFrame, points: Sequence[str]) -> str:
    """The plan as text, the ``points`` columns (fractions of the metric) shown in points."""
    shown = table.assign(**{c: 100 * table[c] for c in points})
    return shown.to_string(index=False, float_format=lambda v: f"{v:.3g}")
