r"""Intervals for accuracies when seeds and test problems are both random (a crossed two-way design).

Why
---
An arm is trained with S seeds and every seed is evaluated on the same P test problems, so an outcome
:math:`y_{sq} \in [0, 1]` (correct or not, or a fraction such as avg@k) has two crossed sources of
variation: the seed (training run) and the problem (which problems happened to be in the test set). A
seed-only analysis (Welch over per-seed means, :func:`analysis.stats.welch`) answers "on this exact
test set"; the functions here answer "on problems drawn like these", which is what a claim about an
algorithm means: their variance is the seed-only one plus the problem term it leaves out.

The model
---------
Seeds and problems are i.i.d. draws from their populations and :math:`y_{sq} = f(U_s, V_q, W_{sq})`
(an exchangeable array). Its ANOVA (Hoeffding) decomposition

.. math:: y_{sq} = \theta + a_s + b_q + e_{sq}, \quad
          \operatorname{Var} a = \sigma^2_{seed},\ \operatorname{Var} b = \sigma^2_{prob},\
          \operatorname{Var} e = \sigma^2_{res}

has mutually uncorrelated terms (:math:`e` holds the seed×problem interaction and, for binary outcomes,
the Bernoulli draw), so with no normality assumption

.. math:: \operatorname{Var}\bar y = \sigma^2_{seed}/S + \sigma^2_{prob}/P + \sigma^2_{res}/(SP).

The estimand is :math:`\theta = E\,y`, the accuracy over the seed and the problem populations.

The estimator
-------------
Method-of-moments (ANOVA) estimates for the balanced crossed random-effects model (Searle, Casella &
McCulloch 1992, *Variance Components*, ch. 4). With seed means :math:`\bar y_{s\cdot}`, problem means
:math:`\bar y_{\cdot q}`, :math:`MS_{seed} = P\,\mathrm{var}(\bar y_{s\cdot})`,
:math:`MS_{res} = \sum (y_{sq} - \bar y_{s\cdot} - \bar y_{\cdot q} + \bar y)^2/((S-1)(P-1))` and
:math:`s^2_{prob} = \mathrm{var}(\bar y_{\cdot q})` (sample variances, ddof 1):

.. math:: \widehat{\operatorname{Var}}\,\bar y = \frac{MS_{seed}}{SP}
          + \frac{(s^2_{prob} - MS_{res}/S)^+}{P}.

The first term is the seed-only variance (a seed mean has variance
:math:`\sigma^2_{seed} + \sigma^2_{res}/P`, estimated without bias by the spread of the seed means);
the second is the problem term a seed-only analysis leaves out (:math:`E\,s^2_{prob} =
\sigma^2_{prob} + \sigma^2_{res}/S`), truncated at 0. So the two-way variance is never below the
seed-only one, and untruncated it is :math:`(MS_{seed} + S s^2_{prob} - MS_{res})/(SP)`, unbiased: the
two-way cluster-robust variance of Cameron, Gelbach & Miller (2011) with the unbiased residual mean
square as its intersection term. The components returned are :math:`\hat\sigma^2_{seed} =
(MS_{seed} - MS_{res})^+/P`, :math:`\hat\sigma^2_{prob} = (s^2_{prob} - MS_{res}/S)^+` and
:math:`\hat\sigma^2_{res} = MS_{res}` (variances of one outcome).

For a difference of two arms on the same problems (their seeds independent training runs), the seed
terms add (Welch) and the problem term uses the per-problem difference :math:`d_q = \bar y^A_{\cdot q}
- \bar y^B_{\cdot q}`, so problem difficulty shared by the arms cancels and only the arm×problem
interaction remains: :math:`\widehat{\operatorname{Var}}\,\hat\Delta = MS^A_{seed}/(S_A P) +
MS^B_{seed}/(S_B P) + (s^2_d - MS^A_{res}/S_A - MS^B_{res}/S_B)^+/P`.

Degrees of freedom: Satterthwaite (1946), :math:`\nu = (\sum_i c_i M_i)^2 / \sum_i (c_i M_i)^2/\nu_i`
over the mean squares :math:`M_i` of the estimate (:math:`\nu_i` = S−1, P−1, (S−1)(P−1)), with one
change: in this formula each :math:`MS_{seed}` is replaced by :math:`\max(MS_{seed}, MS_{res})`, the
positive part of its expectation's estimate (:math:`E\,MS_{seed} = P\sigma^2_{seed} + \sigma^2_{res}
\ge E\,MS_{res}`). With the plain plug-in ν a seed spread that is small by chance both shrinks the
variance and raises ν, and the validation under-covered (0.90 at 2 seeds, 0.93 at 3); with the floor
it does not. When seed variance matters ν is close to S−1 (Welch's df for a difference); when problems
dominate, ν is large.

Intervals: the difference, ``t`` and ``p`` are on the accuracy scale (the interval is clipped to
[−1, 1]). The interval for one arm's accuracy is computed on the logit scale by the delta method,
:math:`\operatorname{logit}\bar y \pm t_\nu\,\widehat{se}/(\bar y(1-\bar y))`, and mapped back, so it
stays inside (0, 1). At a mean of exactly 0 (or 1) every outcome is 0 (or 1) and the data hold no
variance: the interval is then the Clopper–Pearson one for 0 (or n) successes in n = S·P trials,
:math:`[0, 1-(\alpha/2)^{1/n}]`, which treats the outcomes as independent (optimistic); ``note`` says so.
An estimated variance of exactly 0 otherwise (seed means that tie, no problem term) gives a
zero-width interval and a ``note`` that it is degenerate.

With 1 seed in an arm (or 1 problem) a variance component cannot be estimated: every interval
quantity is NaN and ``note`` says why; the components that can be estimated are still returned
(``var_problem`` then includes the residual). No fallback borrows a seed variance from elsewhere.

References: Searle, Casella & McCulloch (1992); Satterthwaite (1946), Biometrics Bulletin 2:110;
Cameron, Gelbach & Miller (2011), JBES 29:238; Owen (2007), "The pigeonhole bootstrap", AoAS 1:386
(the same variance formula for crossed designs, and a bootstrap for it); Miller (2024), "Adding error
bars to evals", arXiv:2411.00640 (clustered standard errors for LLM evaluations).

Validation (``python benchmarks/twoway_coverage.py``, ``benchmarks/results/twoway_coverage.json``,
``docs/twoway.md``): binary outcomes from a logit-normal crossed model with known components, the true
θ by Gauss–Hermite integration, 1,000 simulations per design, over seeds {3, 5} × problems
{100, 300} × seed-, problem- and both-dominated variance × accuracy 0.5 and 0.1 (24 designs). The
two-way interval covered 0.937–0.969 (one arm's accuracy) and 0.941–0.973 (a difference), type I error
0.033–0.055 (Monte Carlo sd 0.007 each); the seed-only one covered down to 0.754 and 0.868, type I
error up to 0.130, where problems dominate. At 2 seeds (not targeted): 0.949–0.988 and 0.937–0.972,
type I error 0.025–0.051.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

_NAN_KEYS = ("se", "df", "ci_low", "ci_high")


def two_way_mean(y: np.ndarray, ci: float = 0.95) -> dict:
    """One arm's accuracy with a seed×problem interval (logit scale; see the module docstring).

    ``y``: array (seeds, problems) of outcomes in [0, 1]. Returns ``mean``, ``se``, ``df``
    (Satterthwaite), ``ci_low``, ``ci_high`` (level ``ci``), ``n_seeds``, ``n_problems``, the variance
    components of one outcome ``var_seed``, ``var_problem``, ``var_residual``, the seed-only t-interval
    over per-seed means (``seed_only_ci_low``, ``seed_only_ci_high``, S−1 df) and ``note`` ("" when
    nothing is unusual). Raises ValueError on a bad ``y``.
    """
    y = _outcomes(y, "y")
    n_seeds, n_problems = y.shape
    mean = float(y.mean())
    out = {"mean": mean, "n_seeds": n_seeds, "n_problems": n_problems}
    parts = _two_way([y], [1.0])
    out.update(var_seed=parts["var_seed"][0], var_residual=parts["var_residual"][0])
    out["var_problem"] = parts["var_problem"]
    seed_only = _seed_only([y.mean(1)], [1.0], 1 - ci)
    out.update(
        seed_only_ci_low=seed_only["seed_only_ci_low"], seed_only_ci_high=seed_only["seed_only_ci_high"]
    )
    out.update(se=math.sqrt(parts["var"]), df=parts["df"], note=parts["note"])
    if not parts["estimable"]:
        return {**out, **dict.fromkeys(_NAN_KEYS, math.nan)}
    if mean in (0.0, 1.0):
        upper = 1 - ((1 - ci) / 2) ** (1 / y.size)  # Clopper-Pearson, 0 successes in S*P trials
        low, high = (0.0, upper) if mean == 0 else (1 - upper, 1.0)
        note = f"every outcome is {mean:g}: Clopper-Pearson interval for n = S*P independent trials"
        return {**out, "ci_low": low, "ci_high": high, "note": note}
    half = _t_quantile(1 - (1 - ci) / 2, out["df"]) * out["se"] / (mean * (1 - mean))
    centre = special.logit(mean)
    return {
        **out,
        "ci_low": float(special.expit(centre - half)),
        "ci_high": float(special.expit(centre + half)),
    }


def two_way_difference(ya: np.ndarray, yb: np.ndarray, alpha: float = 0.05) -> dict:
    """Accuracy of arm a minus arm b, problems paired, seeds independent; seed×problem inference.

    ``ya``: array (seeds_a, problems), ``yb``: array (seeds_b, problems), outcomes in [0, 1], column j
    of both the same problem. Returns ``delta``, ``se``, ``df`` (Satterthwaite), ``t``, ``p``
    (two-sided), ``ci_low``, ``ci_high`` (level 1 − ``alpha``, clipped to [−1, 1]), ``n_seeds_a``,
    ``n_seeds_b``, ``n_problems``, the components ``var_seed_a``, ``var_seed_b``, ``var_problem``
    (of the per-problem arm difference), ``var_residual_a``, ``var_residual_b``, the seed-only Welch
    test over per-seed means beside it (``seed_only_ci_low``, ``seed_only_ci_high``, ``seed_only_p``)
    and ``note`` ("" when nothing is unusual). With zero estimated variance, as :func:`analysis.stats.welch`:
    Δ ≠ 0 gives ``t`` = ±inf, ``p`` = 0; Δ = 0 gives ``t`` NaN, ``p`` = 1. Raises ValueError on bad input.
    """
    ya, yb = _outcomes(ya, "ya"), _outcomes(yb, "yb")
    if ya.shape[1] != yb.shape[1]:
        raise ValueError(
            f"ya and yb must hold the same problems (columns): ya has {ya.shape[1]}, yb {yb.shape[1]}"
        )
    delta = float(ya.mean() - yb.mean())
    parts = _two_way([ya, yb], [1.0, -1.0])
    out = {"delta": delta, "n_seeds_a": ya.shape[0], "n_seeds_b": yb.shape[0], "n_problems": ya.shape[1]}
    out.update(var_seed_a=parts["var_seed"][0], var_seed_b=parts["var_seed"][1])
    out.update(var_residual_a=parts["var_residual"][0], var_residual_b=parts["var_residual"][1])
    out.update(var_problem=parts["var_problem"], note=parts["note"])
    out.update(_seed_only([ya.mean(1), yb.mean(1)], [1.0, -1.0], alpha))
    if not parts["estimable"]:
        return {**out, **dict.fromkeys((*_NAN_KEYS, "t", "p"), math.nan)}
    return {**out, **_t_test(delta, parts["var"], parts["df"], alpha), "se": math.sqrt(parts["var"])}


def _outcomes(y: np.ndarray, name: str) -> np.ndarray:
    """``y`` as a float array (seeds, problems) of finite values in [0, 1], or a one-line ValueError."""
    try:
        a = np.asarray(y, dtype=float)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a 2-D numeric array (seeds, problems): {e}") from None
    if a.ndim != 2 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array (seeds, problems); got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} holds NaN or infinite outcomes; drop or score those problems first")
    if a.min() < 0 or a.max() > 1:
        raise ValueError(f"{name} must hold outcomes in [0, 1]; got values in [{a.min():g}, {a.max():g}]")
    return a


def _two_way(arms: list[np.ndarray], signs: list[float]) -> dict:
    """Variance and Satterthwaite df of sum_k sign_k * mean(arms[k]), each arm (seeds, problems).

    ``var`` = sum_k MS_seed,k / (S_k P) (the seed-only variance) + (s2 - sum_k MS_res,k / S_k)^+ / P
    (the problem term), s2 the variance over problems of the signed per-problem arm means. Returns
    ``var``, ``df``, per-arm lists ``var_seed`` and ``var_residual``, ``var_problem``, ``estimable``
    (False with 1 seed in an arm or 1 problem) and ``note``.
    """
    n_problems = arms[0].shape[1]
    combined = sum(sign * y.mean(0) for sign, y in zip(signs, arms))
    s2_prob = float(np.var(combined, ddof=1)) if n_problems > 1 else math.nan
    seeds, residuals = zip(*(_mean_squares(y) for y in arms))
    floor = sum(ms_res / y.shape[0] for ms_res, y in zip(residuals, arms))
    var_problem = max(s2_prob - floor, 0.0) if math.isfinite(floor) else s2_prob
    out = {"var_problem": var_problem, "var_residual": list(residuals), "var": math.nan, "df": math.nan}
    out["var_seed"] = [max(ms - res, 0.0) / n_problems for ms, res in zip(seeds, residuals)]
    if n_problems < 2 or min(y.shape[0] for y in arms) < 2:
        what = "1 problem" if n_problems < 2 else "1 seed in an arm"
        return {
            **out,
            "estimable": False,
            "note": f"{what}: a variance component is not estimable, no interval",
        }
    keep_prob = s2_prob > floor
    # (coefficient, mean square, its df, the mean square the df formula uses): E MS_seed >= E MS_res, so
    # the df uses max(MS_seed, MS_res); a seed spread that is small by chance cannot raise the df
    terms = [(float(keep_prob) / n_problems, s2_prob, n_problems - 1, s2_prob)]
    for ms_seed, ms_res, y in zip(seeds, residuals, arms):
        cell, nu = 1.0 / (y.shape[0] * n_problems), y.shape[0] - 1
        terms += [
            (cell, ms_seed, nu, max(ms_seed, ms_res)),
            (-keep_prob * cell, ms_res, nu * (n_problems - 1), ms_res),
        ]
    var = max(sum(c * m for c, m, _, _ in terms), 0.0)
    var_df = sum(c * m for c, _, _, m in terms)
    spread = sum((c * m) ** 2 / k for c, _, k, m in terms)
    note = (
        "" if var > 0 else "estimated variance 0 (seed means tie, problem term 0): degenerate, not evidence"
    )
    return {
        **out,
        "var": var,
        "df": var_df**2 / spread if spread > 0 else math.nan,
        "estimable": True,
        "note": note,
    }


def _mean_squares(y: np.ndarray) -> tuple[float, float]:
    """(MS_seed, MS_res) of one arm's (seeds, problems) array; NaN where a margin has 1 level."""
    n_seeds, n_problems = y.shape
    if n_seeds < 2:
        return math.nan, math.nan
    seed_means = y.mean(1)
    ms_seed = n_problems * float(np.var(seed_means, ddof=1))
    if n_problems < 2:
        return ms_seed, math.nan
    resid = y - seed_means[:, None] - y.mean(0)[None, :] + y.mean()
    return ms_seed, float((resid**2).sum()) / ((n_seeds - 1) * (n_problems - 1))


def _seed_only(seed_means: list[np.ndarray], signs: list[float], alpha: float) -> dict:
    """Seed-only inference: t (one arm, S−1 df) or Welch (two arms) over per-seed means."""
    if min(len(m) for m in seed_means) < 2:
        return {"seed_only_ci_low": math.nan, "seed_only_ci_high": math.nan, "seed_only_p": math.nan}
    est = sum(sign * float(m.mean()) for sign, m in zip(signs, seed_means))
    parts = [float(np.var(m, ddof=1)) / len(m) for m in seed_means]
    var = sum(parts)
    spread = sum(v**2 / (len(m) - 1) for v, m in zip(parts, seed_means))
    test = _t_test(est, var, var**2 / spread if spread > 0 else math.nan, alpha, clip=False)
    return {
        "seed_only_ci_low": test["ci_low"],
        "seed_only_ci_high": test["ci_high"],
        "seed_only_p": test["p"],
    }


def _t_test(est: float, var: float, df: float, alpha: float, clip: bool = True) -> dict:
    """t, two-sided p and the 1 − alpha interval (clipped to [−1, 1]) of an estimate with variance var."""
    if var == 0:
        t = math.copysign(math.inf, est) if est else math.nan
        return {"t": t, "df": math.nan, "p": 0.0 if est else 1.0, "ci_low": est, "ci_high": est}
    se = math.sqrt(var)
    half = _t_quantile(1 - alpha / 2, df) * se
    low, high = (max(est - half, -1.0), min(est + half, 1.0)) if clip else (est - half, est + half)
    p = float(2 * special.stdtr(df, -abs(est / se)))
    return {"t": est / se, "df": df, "p": p, "ci_low": low, "ci_high": high}


def _t_quantile(q: float, df: float) -> float:
    """Student's t quantile (``scipy.stats.t.ppf``); the normal one for infinite df."""
    return float(special.stdtrit(df, q)) if math.isfinite(df) else float(special.ndtri(q))
