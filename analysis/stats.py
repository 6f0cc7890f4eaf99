r"""Statistics over the tidy run table (:func:`analysis.load_runs`) and per-problem outcomes.

Two sources of noise are kept apart:

* **seed noise**: each run (one seed) gives one number per metric. :func:`summarize` and
  :func:`welch_vs_baseline` treat the seeds of a (scale, method) cell as the sample.

Arms: when the table has an ``arm`` column (:func:`analysis.load_runs` gives one), every function
here reads it in place of ``method`` (:func:`by_arm`), so runs that differ in a grid axis (say
``train.lr``) are separate arms, never seeds of one, and the ``method`` column of a result names the
arm (``"sgrpo lr=0.0001"``; a baseline is named the same way). When no axis but scale and seed
varies the arm is the method and nothing changes.
* **evaluation noise**: a run's accuracy is an average over a finite test set. :func:`mcnemar`,
  :func:`paired_bootstrap` and :func:`paired_vs_baseline` compare two methods on the *same*
  problems, so problem difficulty cancels out.

Conventions shared by every function: metric values that are NaN are dropped before anything is
computed; groups come out ordered by ``scale_params`` when ``scale`` is a grouping column and by
value otherwise; intervals are two-sided.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
from scipy import special  # scipy.stats (0.4 s more to import) only where a test needs it

from analysis.runs import scale_order

CORRECTIONS = ("bonferroni", "holm", "none")
POOLS = ("majority", "mean")
SUMMARY_COLUMNS = ["n", "mean", "std", "sem", "ci_low", "ci_high", "boot_low", "boot_high", "values"]
WELCH_COLUMNS = [
    "method",
    "n",
    "mean",
    "std",
    "baseline_n",
    "baseline_mean",
    "baseline_std",
    "delta",
    "t",
    "df",
    "p",
    "p_adj",
    "significant",
    "cohen_d",
    "hedges_g",
    "ci_low",
    "ci_high",
]
PAIRED_COLUMNS = [
    "method",
    "n_seeds",
    "baseline_n_seeds",
    "n_problems",
    "accuracy",
    "baseline_accuracy",
    "delta",
    "n_method_only",
    "n_baseline_only",
    "mcnemar_p",
    "mcnemar_p_adj",
    "boot_low",
    "boot_high",
    "boot_p",
    "boot_p_adj",
]
RANK_COLUMNS = ["method", "n", "mean", "rank"]
INVERSION_COLUMNS = ["scale_from", "scale_to", "n_methods", "tau", "p", "n_flips", "flips"]

#: Resample through a multinomial over distinct values when there are at most this many.
_MULTINOMIAL_MAX_VALUES = 64
_BOOT_CHUNK = 2_000_000


# ---------------------------------------------------------------------------------------------
# Seed-level summaries
# ---------------------------------------------------------------------------------------------


def summarize(
    df: pd.DataFrame,
    metric: str = "accuracy",
    by: str | Sequence[str] = ("scale", "method"),
    ci: float = 0.95,
    n_boot: int = 10000,
    seed: int = 0,
) -> pd.DataFrame:
    r"""Per-cell mean of ``metric`` over seeds, with a t-interval and a bootstrap interval.

    For the n values :math:`x_i` of a cell: ``mean`` :math:`\bar x`, ``std``
    :math:`s = \sqrt{\sum (x_i-\bar x)^2/(n-1)}`, ``sem`` :math:`s/\sqrt n`,
    ``ci_low, ci_high`` :math:`\bar x \mp t_{(1+ci)/2,\,n-1}\, s/\sqrt n`, and ``boot_low, boot_high``
    the :math:`(1-ci)/2` and :math:`(1+ci)/2` quantiles of ``n_boot`` bootstrap means (seeds
    resampled with replacement; percentile method; a fresh ``numpy.random.default_rng(seed)`` per
    cell, so a cell's interval does not depend on which other cells exist). ``values`` lists the
    per-seed values sorted by seed. With n = 1 the std, sem and both intervals are NaN.
    """
    cols = _cols(by)
    df = by_arm(df)
    _require(df, [*cols, metric, "seed"])
    rows = []
    for key, sub in _groups(df.dropna(subset=[metric]), cols):
        values = sub.sort_values("seed")[metric].to_numpy(float)
        rows.append({**dict(zip(cols, key)), **_describe(values, ci, n_boot, seed)})
    return pd.DataFrame(rows, columns=[*cols, *SUMMARY_COLUMNS])


def _describe(x: np.ndarray, ci: float, n_boot: int, seed: int) -> dict:
    n, mean = len(x), float(x.mean())
    std = math.sqrt(_var(x))
    sem = std / math.sqrt(n)
    half = _t_quantile((1 + ci) / 2, n - 1) * sem if n > 1 else math.nan
    boot_low = boot_high = math.nan
    if n > 1:
        boot = _boot_means(x, n_boot, np.random.default_rng(seed))
        boot_low, boot_high = np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2])
    return {
        "n": n,
        "mean": mean,
        "std": std,
        "sem": sem,
        "ci_low": mean - half,
        "ci_high": mean + half,
        "boot_low": float(boot_low),
        "boot_high": float(boot_high),
        "values": x.tolist(),
    }


# ---------------------------------------------------------------------------------------------
# Welch's t-test against a baseline method
# ---------------------------------------------------------------------------------------------


def welch_vs_baseline(
    df: pd.DataFrame,
    metric: str = "accuracy",
    baseline: str = "dpo",
    by: str | Sequence[str] = ("scale",),
    correction: str = "bonferroni",
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Welch's t-test of every method against ``baseline`` over seeds, within each group of ``by``.

    One row per (group, method != baseline) with the columns of :func:`welch` plus ``p_adj``
    (``correction`` applied within the group, over the methods compared there; see
    :func:`adjust_pvalues`) and ``significant`` (``p_adj < alpha``). Groups without the baseline
    are skipped. Rows are ordered by group, then by ``delta`` descending. A comparison whose two
    arms both have zero variance (Welch df undefined) is never ``significant``, whatever its p.
    """
    cols = _cols(by)
    df = by_arm(df)
    _require(df, [*cols, "method", metric])
    _check_method(df, baseline)
    _check_correction(correction)
    rows = []
    for key, sub in _groups(df.dropna(subset=[metric]), cols):
        arms = {m: g[metric].to_numpy(float) for m, g in sub.groupby("method")}
        if baseline not in arms:
            continue
        base = arms.pop(baseline)
        group = [{"method": m, **welch(a, base, alpha)} for m, a in sorted(arms.items())]
        adjusted = adjust_pvalues([r["p"] for r in group], correction)
        for row, p_adj in zip(group, adjusted):
            # zero variance in both arms (e.g. two seeds landing on the same accuracy) gives p = 0 but
            # no evidence: such a comparison is never reported as significant
            testable = math.isfinite(row["df"])
            row.update(
                {c: k for c, k in zip(cols, key)}, p_adj=p_adj, significant=bool(testable and p_adj < alpha)
            )
        rows += sorted(group, key=lambda r: -r["delta"])
    return pd.DataFrame(rows, columns=[*cols, *WELCH_COLUMNS])


def welch(a: Iterable[float], b: Iterable[float], alpha: float = 0.05) -> dict:
    r"""Welch's unequal-variance t-test of mean(a) − mean(b), with effect sizes.

    With :math:`v_a = s_a^2/n_a`, :math:`v_b = s_b^2/n_b` (sample variances, ddof = 1):

    * ``t`` :math:`= (\bar a - \bar b)/\sqrt{v_a + v_b}`
    * ``df`` (Welch–Satterthwaite) :math:`= (v_a+v_b)^2 / \big(v_a^2/(n_a-1) + v_b^2/(n_b-1)\big)`
    * ``p`` :math:`= 2\,P(T_{df} > |t|)` (equals ``scipy.stats.ttest_ind(a, b, equal_var=False)``)
    * ``ci_low, ci_high`` :math:`= \Delta \mp t_{1-\alpha/2,\,df}\sqrt{v_a+v_b}` (unadjusted)
    * ``cohen_d`` :math:`= \Delta / s_p`, :math:`s_p^2 = \big((n_a-1)s_a^2 + (n_b-1)s_b^2\big)/(n_a+n_b-2)`
    * ``hedges_g`` :math:`= J(\nu)\,d` with the exact small-sample factor
      :math:`J(\nu) = \Gamma(\nu/2) / \big(\sqrt{\nu/2}\,\Gamma((\nu-1)/2)\big)`, :math:`\nu = n_a+n_b-2`
      (≈ :math:`1 - 3/(4\nu - 1)`; Hedges 1981).

    Degenerate cases, never raising: if either arm has fewer than 2 values every test statistic is
    NaN. If both arms have zero variance, ``df`` is NaN and the CI collapses to ``[Δ, Δ]``; for
    Δ ≠ 0, ``t`` = ±inf and ``p`` = 0 (as scipy), ``cohen_d``/``hedges_g`` = ±inf; for Δ = 0, ``t``,
    ``cohen_d``, ``hedges_g`` are NaN and ``p`` = 1 (scipy returns NaN there).
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    na, nb = len(a), len(b)
    va, vb = _var(a) / na, _var(b) / nb
    delta = float(a.mean() - b.mean())
    row = {
        "n": na,
        "mean": float(a.mean()),
        "std": math.sqrt(_var(a)),
        "baseline_n": nb,
        "baseline_mean": float(b.mean()),
        "baseline_std": math.sqrt(_var(b)),
        "delta": delta,
    }
    return {**row, **_welch_test(delta, va, vb, na, nb, alpha), **_effect_sizes(delta, a, b)}


def _welch_test(delta: float, va: float, vb: float, na: int, nb: int, alpha: float) -> dict:
    se = math.sqrt(va + vb)
    if math.isnan(se):
        return dict.fromkeys(["t", "df", "p", "ci_low", "ci_high"], math.nan)
    if se == 0:
        t = math.copysign(math.inf, delta) if delta else math.nan
        return {"t": t, "df": math.nan, "p": 0.0 if delta else 1.0, "ci_low": delta, "ci_high": delta}
    t = delta / se
    dof = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    half = _t_quantile(1 - alpha / 2, dof) * se
    p = float(2 * special.stdtr(dof, -abs(t)))  # scipy.stats.t.sf(|t|, dof)
    return {"t": t, "df": dof, "p": p, "ci_low": delta - half, "ci_high": delta + half}


def _effect_sizes(delta: float, a: np.ndarray, b: np.ndarray) -> dict:
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return {"cohen_d": math.nan, "hedges_g": math.nan}
    nu = na + nb - 2
    pooled = math.sqrt(((na - 1) * _var(a) + (nb - 1) * _var(b)) / nu)
    d = delta / pooled if pooled else (math.copysign(math.inf, delta) if delta else math.nan)
    return {"cohen_d": d, "hedges_g": hedges_j(nu) * d}


def _t_quantile(q: float, dof: float) -> float:
    """Student's t quantile, what ``scipy.stats.t.ppf(q, dof)`` computes (it calls ``stdtrit``)."""
    return float(special.stdtrit(dof, q))


def hedges_j(nu: float) -> float:
    r"""Exact small-sample bias factor :math:`J(\nu) = \Gamma(\nu/2)/(\sqrt{\nu/2}\,\Gamma((\nu-1)/2))`."""
    return math.exp(special.gammaln(nu / 2) - special.gammaln((nu - 1) / 2)) / math.sqrt(nu / 2)


def adjust_pvalues(p: Iterable[float], correction: str = "bonferroni") -> np.ndarray:
    r"""Family-wise error corrections over the m finite p-values (NaN entries stay NaN, uncounted).

    * ``bonferroni``: :math:`\tilde p_i = \min(1, m\,p_i)`.
    * ``holm`` (step-down): sort :math:`p_{(1)} \le \dots \le p_{(m)}`, then
      :math:`\tilde p_{(k)} = \min\big(1, \max_{j \le k} (m-j+1)\,p_{(j)}\big)`, mapped back to the
      original order.
    * ``none``: unchanged.
    """
    _check_correction(correction)
    p = np.asarray(list(p), float)
    out = p.copy()
    finite = ~np.isnan(p)
    m = int(finite.sum())
    if correction == "none" or m == 0:
        return out
    q = p[finite]
    if correction == "bonferroni":
        out[finite] = np.minimum(1.0, m * q)
        return out
    order = np.argsort(q, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * q[order])
    holm = np.empty(m)
    holm[order] = np.minimum(1.0, stepped)
    out[finite] = holm
    return out


# ---------------------------------------------------------------------------------------------
# Paired tests on shared test problems
# ---------------------------------------------------------------------------------------------


def mcnemar(outcomes_a, outcomes_b, method: str = "exact") -> dict:
    r"""McNemar's test that methods a and b solve the same fraction of the shared problems.

    Only discordant problems carry information: :math:`n_{10}` (a right, b wrong; ``a_only``) and
    :math:`n_{01}` (``b_only``), :math:`n_d = n_{10} + n_{01}`.

    * ``method="exact"``: under H0 :math:`n_{10} \sim \mathrm{Binomial}(n_d, 1/2)`;
      ``statistic`` :math:`= \min(n_{10}, n_{01})`, ``p`` :math:`= \min\big(1, 2\,P(X \le \min(n_{10}, n_{01}))\big)`.
    * ``method="chi2"``: continuity-corrected (Edwards)
      :math:`\chi^2 = \max(|n_{10}-n_{01}| - 1, 0)^2 / n_d` on 1 degree of freedom. The correction is
      floored at 0 so that :math:`n_{10} = n_{01}` gives :math:`\chi^2 = 0, p = 1`.

    No discordant problem gives ``p = 1``. ``outcomes_a``/``outcomes_b`` are boolean (or 0/1) arrays
    in the same problem order, or Series indexed by problem id (aligned by id; the id sets must be
    equal). Returns ``n, both, a_only, b_only, neither, delta`` (accuracy of a − accuracy of b),
    ``statistic, p, method``.
    """
    a, b = _align(outcomes_a, outcomes_b, binary=True)
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    stat, p = _mcnemar_p(a_only, b_only, method)
    return {
        "n": len(a),
        "both": int(np.sum(a & b)),
        "a_only": a_only,
        "b_only": b_only,
        "neither": int(np.sum(~a & ~b)),
        "delta": (a_only - b_only) / len(a),
        "statistic": stat,
        "p": p,
        "method": method,
    }


def _mcnemar_p(a_only: int, b_only: int, method: str) -> tuple[float, float]:
    from scipy import stats

    discordant = a_only + b_only
    if method == "exact":
        low = min(a_only, b_only)
        p = min(1.0, 2 * float(stats.binom.cdf(low, discordant, 0.5))) if discordant else 1.0
        return float(low), p
    if method == "chi2":
        if not discordant:
            return 0.0, 1.0
        chi2 = max(abs(a_only - b_only) - 1, 0) ** 2 / discordant
        return float(chi2), float(stats.chi2.sf(chi2, 1))
    raise ValueError(f"unknown McNemar method {method!r}; expected 'exact' or 'chi2'")


def paired_bootstrap(outcomes_a, outcomes_b, n_boot: int = 10000, seed: int = 0, ci: float = 0.95) -> dict:
    r"""Paired bootstrap over problems of :math:`\Delta = \mathrm{mean}(a) - \mathrm{mean}(b)`.

    With :math:`d_i = a_i - b_i` over the n shared problems, draw ``n_boot`` resamples of the
    problems with replacement (``numpy.random.default_rng(seed)``) and take their means
    :math:`\Delta^*_k`. ``ci_low, ci_high`` are the :math:`(1-ci)/2, (1+ci)/2` quantiles (percentile
    method). ``p`` is the two-sided test of :math:`\Delta = 0` obtained by shifting the bootstrap
    distribution to the null (Efron & Tibshirani 1993, §16; Berg-Kirkpatrick et al. 2012):
    :math:`p = \big(1 + \#\{k : |\Delta^*_k - \Delta| \ge |\Delta|\}\big)/(n_{boot} + 1)`, so
    :math:`\Delta = 0` gives p = 1 and p is never 0.

    Outcomes are booleans, 0/1 or scores (e.g. the fraction of seeds that solved a problem), as
    arrays in the same problem order or Series indexed by problem id. When :math:`d` takes few
    distinct values the resample is drawn as multinomial counts over those values, which has
    exactly the distribution of resampling problems. Returns ``n, delta, ci_low, ci_high, p``.
    """
    a, b = _align(outcomes_a, outcomes_b, binary=False)
    d = a - b
    delta = float(d.mean())
    boot = _boot_means(d, n_boot, np.random.default_rng(seed))
    low, high = np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2])
    extreme = int(np.sum(np.abs(boot - delta) >= abs(delta) - 1e-12))
    p = (1 + extreme) / (n_boot + 1)
    return {"n": len(d), "delta": delta, "ci_low": float(low), "ci_high": float(high), "p": min(1.0, p)}


def paired_vs_baseline(
    outcomes_df: pd.DataFrame,
    runs_df: pd.DataFrame,
    baseline: str = "dpo",
    by: str | Sequence[str] = ("scale",),
    pool: str = "majority",
    split: str | None = "test",
    column: str = "correct",
    n_boot: int = 10000,
    seed: int = 0,
    correction: str = "bonferroni",
) -> pd.DataFrame:
    """Problem-level comparison of every method with ``baseline``, within each group of ``by``.

    ``outcomes_df`` (:func:`analysis.load_problem_outcomes`) is joined to ``runs_df`` on
    ``run_id`` (runs missing from ``runs_df``, e.g. failed ones, are dropped); only problems of
    ``split`` are used (``None``: all, keyed by (split, id)). For each (group, method) the seeds are
    pooled **per problem** before testing, so the tests see evaluation noise only:

    * ``pool="majority"`` (default): a problem counts as solved when **more than half** of the
      method's seeds solved it (a tie counts as unsolved). Both :func:`mcnemar` (exact) and
      :func:`paired_bootstrap` run on these booleans.
    * ``pool="mean"``: the per-problem score is the fraction of seeds that solved it;
      :func:`paired_bootstrap` runs on these scores and the McNemar columns are NaN (McNemar needs
      binary outcomes).

    Every run of a method must have an outcome for every problem of the group, and the method and
    the baseline must share the same problems; otherwise ``ValueError``. ``accuracy`` is the pooled
    per-problem mean; ``n_method_only``/``n_baseline_only`` count problems only one side solved
    (majority pooling). ``*_p_adj`` apply ``correction`` within the group (:func:`adjust_pvalues`).
    Groups without the baseline are skipped.
    """
    if pool not in POOLS:
        raise ValueError(f"unknown pool {pool!r}; expected one of {POOLS}")
    _check_correction(correction)
    cols = _cols(by)
    merged = _join_outcomes(outcomes_df, by_arm(runs_df), cols, split, column)
    _check_method(merged, baseline)
    rows = []
    for key, sub in _groups(merged, cols):
        where = ", ".join(f"{c}={k}" for c, k in zip(cols, key)) or "all runs"
        pooled = {m: _pool(g, column, pool, f"{m} at {where}") for m, g in sub.groupby("method")}
        if baseline not in pooled:
            continue
        base = pooled.pop(baseline)
        group = [
            {
                **dict(zip(cols, key)),
                "method": m,
                **_paired_row(arm, base, pool, n_boot, seed, f"{m} at {where}"),
            }
            for m, arm in sorted(pooled.items())
        ]
        for name in ("mcnemar_p", "boot_p"):
            for row, p_adj in zip(group, adjust_pvalues([r[name] for r in group], correction)):
                row[f"{name}_adj"] = p_adj
        rows += group
    return pd.DataFrame(rows, columns=[*cols, *PAIRED_COLUMNS])


def _join_outcomes(
    outcomes: pd.DataFrame, runs: pd.DataFrame, cols: list[str], split: str | None, column: str
) -> pd.DataFrame:
    _require(outcomes, ["run_id", "id", "split", column])
    _require(runs, ["run_id", "method", *cols])
    run_cols = ["run_id", "method", *cols, *(["scale_params"] if "scale_params" in runs.columns else [])]
    if runs["run_id"].duplicated().any():
        raise ValueError(
            f"runs_df has duplicate run_id {runs['run_id'][runs['run_id'].duplicated()].iloc[0]!r}"
        )
    if split is not None:
        outcomes = outcomes[outcomes["split"] == split]
    return outcomes[["run_id", "split", "id", column]].merge(runs[list(dict.fromkeys(run_cols))], on="run_id")


def _pool(rows: pd.DataFrame, column: str, pool: str, where: str) -> tuple[pd.Series, int]:
    """Per-problem pooled outcome over a method's runs, indexed by (split, id)."""
    table = rows.pivot(index=["split", "id"], columns="run_id", values=column).astype(float)
    if table.isna().any().any():
        run = table.columns[table.isna().any()].tolist()[0]
        missing = int(table[run].isna().sum())
        raise ValueError(
            f"{where}: run {run!r} has no {column!r} outcome for {missing} problem(s) that other runs of this method have"
        )
    share = table.mean(axis=1)
    return (share > 0.5 if pool == "majority" else share), table.shape[1]


def _paired_row(arm: tuple, base: tuple, pool: str, n_boot: int, seed: int, where: str) -> dict:
    (scores, n_seeds), (base_scores, base_seeds) = arm, base
    try:
        boot = paired_bootstrap(scores, base_scores, n_boot=n_boot, seed=seed)
        test = mcnemar(scores, base_scores) if pool == "majority" else {}
    except ValueError as err:
        raise ValueError(f"{where} vs baseline: {err}") from None
    return {
        "n_seeds": n_seeds,
        "baseline_n_seeds": base_seeds,
        "n_problems": boot["n"],
        "accuracy": float(scores.mean()),
        "baseline_accuracy": float(base_scores.mean()),
        "delta": boot["delta"],
        "n_method_only": test.get("a_only", math.nan),
        "n_baseline_only": test.get("b_only", math.nan),
        "mcnemar_p": test.get("p", math.nan),
        "boot_low": boot["ci_low"],
        "boot_high": boot["ci_high"],
        "boot_p": boot["p"],
    }


def _align(a, b, binary: bool) -> tuple[np.ndarray, np.ndarray]:
    """Two equal-length outcome vectors; Series are aligned on their (unique, equal) index."""
    if isinstance(a, pd.Series) != isinstance(b, pd.Series):
        raise ValueError("pass both outcomes as Series indexed by problem id, or both as arrays")
    if isinstance(a, pd.Series):
        a, b = _align_series(a, b)
    x, y = _as_outcomes(a, "outcomes_a", binary), _as_outcomes(b, "outcomes_b", binary)
    if len(x) != len(y):
        raise ValueError(f"outcome arrays differ in length: {len(x)} vs {len(y)}")
    if not len(x):
        raise ValueError("no problems to compare")
    return x, y


def _align_series(a: pd.Series, b: pd.Series) -> tuple[pd.Series, pd.Series]:
    for s, name in ((a, "outcomes_a"), (b, "outcomes_b")):
        if not s.index.is_unique:
            raise ValueError(f"{name} has duplicate problem ids, e.g. {s.index[s.index.duplicated()][0]!r}")
    only_a, only_b = a.index.difference(b.index), b.index.difference(a.index)
    if len(only_a) or len(only_b):
        raise ValueError(
            f"problem ids differ: {len(only_a)} only in a (e.g. {list(only_a[:3])}), "
            f"{len(only_b)} only in b (e.g. {list(only_b[:3])})"
        )
    return a, b.reindex(a.index)


def _as_outcomes(values, name: str, binary: bool) -> np.ndarray:
    series = pd.Series(np.asarray(values).ravel() if not isinstance(values, pd.Series) else values.to_numpy())
    if series.isna().any():
        raise ValueError(f"{name} has missing outcomes")
    x = series.to_numpy(float)
    if binary:
        if not np.isin(x, (0.0, 1.0)).all():
            raise ValueError(f"{name} must be boolean (or 0/1) for McNemar's test")
        return x.astype(bool)
    return x


def _boot_means(x: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``n_boot`` resamples of ``x`` with replacement (chunked to bound memory)."""
    values, counts = np.unique(x, return_counts=True)
    n = len(x)
    few = len(values) <= _MULTINOMIAL_MAX_VALUES
    step = max(1, _BOOT_CHUNK // (len(values) if few else n))
    out = np.empty(n_boot)
    for start in range(0, n_boot, step):
        k = min(step, n_boot - start)
        if few:
            out[start : start + k] = rng.multinomial(n, counts / n, size=k) @ values / n
        else:
            out[start : start + k] = x[rng.integers(0, n, size=(k, n))].mean(axis=1)
    return out


# ---------------------------------------------------------------------------------------------
# Rankings across scales
# ---------------------------------------------------------------------------------------------


def rank_table(
    df: pd.DataFrame,
    metric: str = "accuracy",
    by: str | Sequence[str] = "scale",
    higher_is_better: bool = True,
) -> pd.DataFrame:
    """Methods ranked by their mean ``metric`` (over seeds) within each group of ``by``.

    Columns: ``by`` columns, ``method, n, mean, rank``; rank 1 is the best (highest mean unless
    ``higher_is_better=False``), ties share the smallest rank (``method="min"``). Rows are ordered
    by group (scales by ``scale_params``), then rank, then method name.
    """
    cols = _cols(by)
    df = by_arm(df)
    _require(df, [*cols, "method", metric])
    rows = []
    for key, sub in _groups(df.dropna(subset=[metric]), cols):
        cell = sub.groupby("method")[metric].agg(n="size", mean="mean").reset_index()
        cell["rank"] = cell["mean"].rank(ascending=not higher_is_better, method="min").astype(int)
        for c, k in zip(cols, key):
            cell[c] = k
        rows.append(cell.sort_values(["rank", "method"]))
    if not rows:
        return pd.DataFrame(columns=[*cols, *RANK_COLUMNS])
    return pd.concat(rows, ignore_index=True)[[*cols, *RANK_COLUMNS]]


def rank_inversions(df: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    r"""How the method ranking changes between consecutive scales (ordered by ``scale_params``).

    For each pair of consecutive scales (s, t), over the methods present at both (``n_methods``):
    ``tau, p`` = ``scipy.stats.kendalltau`` (τ-b) between the methods' mean ``metric`` at s and at t
    (NaN with fewer than 2 methods or a constant side), and ``flips`` = the sorted list of pairs
    ``(a, b)`` where a had the strictly higher mean at s and b the strictly higher mean at t
    (``n_flips`` = their number). Without ties :math:`\tau = 1 - 2\,n_{flips}/\binom{n}{2}`.
    """
    means = rank_table(df, metric, by="scale").pivot(index="method", columns="scale", values="mean")
    order = [s for s in scale_order(df) if s in means.columns]
    rows = [_inversion_row(means[s], means[t], s, t) for s, t in zip(order, order[1:])]
    return pd.DataFrame(rows, columns=INVERSION_COLUMNS)


def _inversion_row(x: pd.Series, y: pd.Series, s: str, t: str) -> dict:
    both = pd.concat([x, y], axis=1, keys=["x", "y"]).dropna().sort_index()
    from scipy import stats

    tau = p = math.nan
    if len(both) >= 2 and both["x"].nunique() > 1 and both["y"].nunique() > 1:
        result = stats.kendalltau(both["x"], both["y"])
        tau, p = float(result.statistic), float(result.pvalue)
    flips = []
    methods = list(both.index)
    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
            dx, dy = both.at[a, "x"] - both.at[b, "x"], both.at[a, "y"] - both.at[b, "y"]
            if dx * dy < 0:
                flips.append((a, b) if dx > 0 else (b, a))
    return {
        "scale_from": s,
        "scale_to": t,
        "n_methods": len(both),
        "tau": tau,
        "p": p,
        "n_flips": len(flips),
        "flips": sorted(flips),
    }


# ---------------------------------------------------------------------------------------------
# Frame helpers (shared with analysis.leverage)
# ---------------------------------------------------------------------------------------------


def by_arm(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its ``method`` column replaced by its ``arm`` column, if it has one (a copy)."""
    if "arm" not in df.columns:
        return df
    return df.assign(method=df["arm"])


def _cols(by: str | Sequence[str]) -> list[str]:
    return [by] if isinstance(by, str) else list(by)


def _require(df: pd.DataFrame, columns: Iterable[str]) -> None:
    missing = [c for c in dict.fromkeys(columns) if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}; have {list(df.columns)}")


def _groups(df: pd.DataFrame, cols: list[str]) -> Iterator[tuple[tuple, pd.DataFrame]]:
    """(key tuple, rows) per group; scales ordered by ``scale_params``, other columns by value."""
    if not cols:
        if len(df):
            yield (), df
        return
    groups = {(k if isinstance(k, tuple) else (k,)): g for k, g in df.groupby(cols, sort=False)}
    position = {s: i for i, s in enumerate(scale_order(df))} if "scale" in cols and len(df) else {}
    rank = [(lambda v: position[v]) if c == "scale" else (lambda v: v) for c in cols]
    for key in sorted(groups, key=lambda k: tuple(f(v) for f, v in zip(rank, k))):
        yield key, groups[key]


def _check_method(df: pd.DataFrame, baseline: str) -> None:
    methods = sorted(df["method"].unique())
    if baseline in methods:
        return
    close = difflib.get_close_matches(baseline, methods, n=3)
    raise ValueError(f"unknown baseline {baseline!r}; did you mean {close or methods}?")


def _check_correction(correction: str) -> None:
    if correction not in CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; expected one of {CORRECTIONS}")


def _var(x: np.ndarray) -> float:
    """Sample variance (ddof=1); exactly 0 for constant input, NaN for fewer than 2 values."""
    if len(x) < 2:
        return math.nan
    return 0.0 if np.ptp(x) == 0 else float(np.var(x, ddof=1))
