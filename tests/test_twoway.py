"""analysis.twoway: hand-computed crossed designs, the edges (means of 0 and 1, one seed, bad input) and
a small coverage simulation that fails if the seed x problem interval is wrong (issue 40, item 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermegauss
from scipy import special, stats

from analysis.twoway import two_way_difference, two_way_mean

# 2 seeds x 3 problems. Seed means 2/3, 1/3; problem means 1, 1/2, 0; grand mean 1/2.
Y = np.array([[1, 1, 0], [1, 0, 0]], dtype=float)
# Seed means 1/3, 0; problem means 0, 1/2, 0; grand mean 1/6.
YB = np.array([[0, 1, 0], [0, 0, 0]], dtype=float)


def test_mean_by_hand():
    """MS_seed = 3 var(2/3, 1/3) = 1/6. Residuals y - seed mean - problem mean + grand mean are
    (-1/6, 1/3, -1/6) and (1/6, -1/3, 1/6): SS = 1/3 over (2-1)(3-1) = 2 df, MS_res = 1/6.
    s2_prob = var(1, 1/2, 0) = 1/4, problem term (1/4 - MS_res/2)/3 = (1/6)/3 = 1/18.
    Var = MS_seed/(S P) + 1/18 = 1/36 + 2/36 = 1/12.

    Satterthwaite over (coefficient * mean square, df): (1/12, 2), (1/36, 1) and (-1/36, 2):
    spread = 1/288 + 1/1296 + 1/2592 = 1/216, df = (1/12)^2 / (1/216) = 1.5.
    Mean 1/2: logit 0, half-width t_{0.975, 1.5} sqrt(1/12) / (1/4) on the logit scale.
    Components: var_seed = (1/6 - 1/6)^+/3 = 0, var_problem = 1/6, var_residual = 1/6.
    Seed-only: 1/2 +- t_{0.975, 1} sd(2/3, 1/3)/sqrt(2) = 1/2 +- t/6.
    """
    r = two_way_mean(Y)
    assert r["mean"] == 0.5 and r["n_seeds"] == 2 and r["n_problems"] == 3 and r["note"] == ""
    assert r["se"] == pytest.approx(math.sqrt(1 / 12))
    assert r["df"] == pytest.approx(1.5)
    assert (r["var_seed"], r["var_problem"], r["var_residual"]) == pytest.approx((0, 1 / 6, 1 / 6))
    half = stats.t.ppf(0.975, 1.5) * math.sqrt(1 / 12) / 0.25
    assert r["ci_low"] == pytest.approx(special.expit(-half))
    assert r["ci_high"] == pytest.approx(special.expit(half))
    seed_half = stats.t.ppf(0.975, 1) / 6
    assert (r["seed_only_ci_low"], r["seed_only_ci_high"]) == pytest.approx(
        (0.5 - seed_half, 0.5 + seed_half)
    )


def test_difference_by_hand():
    """Arm b: MS_seed = 3 var(1/3, 0) = 1/6; residuals as arm a's, MS_res = 1/6.
    d_q = (1, 1/2, 0) - (0, 1/2, 0) = (1, 0, 0), s2_d = 1/3; problem term (1/3 - 1/12 - 1/12)/3 = 1/18.
    Var = 1/36 + 1/36 + 1/18 = 1/9, se = 1/3; delta = 1/2 - 1/6 = 1/3, t = 1.
    Satterthwaite: (1/9, 2), (1/36, 1) twice, (-1/36, 2) twice:
    spread = 1/162 + 2/1296 + 1/1296 = 11/1296, df = (1/81)/(11/1296) = 16/11.
    """
    r = two_way_difference(Y, YB)
    assert (
        r["delta"] == pytest.approx(1 / 3) and r["se"] == pytest.approx(1 / 3) and r["t"] == pytest.approx(1)
    )
    assert r["df"] == pytest.approx(16 / 11)
    assert r["p"] == pytest.approx(2 * stats.t.sf(1, 16 / 11))
    half = stats.t.ppf(0.975, 16 / 11) / 3
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((max(1 / 3 - half, -1), min(1 / 3 + half, 1)))
    assert (r["var_seed_a"], r["var_seed_b"], r["var_problem"]) == pytest.approx((0, 0, 1 / 6))
    assert (r["var_residual_a"], r["var_residual_b"]) == pytest.approx((1 / 6, 1 / 6))
    assert (r["n_seeds_a"], r["n_seeds_b"], r["n_problems"], r["note"]) == (2, 2, 3, "")


def test_seed_only_is_welch_over_seed_means():
    rng = np.random.default_rng(0)
    ya, yb = (rng.random((3, 50)) < 0.6).astype(float), (rng.random((4, 50)) < 0.5).astype(float)
    r = two_way_difference(ya, yb, alpha=0.1)
    welch = stats.ttest_ind(ya.mean(1), yb.mean(1), equal_var=False)
    ci = welch.confidence_interval(0.9)
    assert r["seed_only_p"] == pytest.approx(welch.pvalue)
    assert (r["seed_only_ci_low"], r["seed_only_ci_high"]) == pytest.approx((ci.low, ci.high))


def test_untruncated_variance_is_the_anova_estimate_and_order_free():
    """(MS_seed + S s2_prob - MS_res)/(S P) when the problem term is positive; rows and columns permute
    freely; fractional outcomes are fine."""
    rng = np.random.default_rng(1)
    y = np.clip(rng.random((4, 30)) * 0.5 + rng.random(30) * 0.5, 0, 1)
    s, p = y.shape
    ms_seed = p * np.var(y.mean(1), ddof=1)
    resid = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
    ms_res = (resid**2).sum() / ((s - 1) * (p - 1))
    r = two_way_mean(y)
    assert r["se"] ** 2 == pytest.approx((ms_seed + s * np.var(y.mean(0), ddof=1) - ms_res) / (s * p))
    shuffled = two_way_mean(y[rng.permutation(s)][:, rng.permutation(p)])
    assert {k: shuffled[k] for k in ("se", "df", "ci_low")} == pytest.approx(
        {k: r[k] for k in ("se", "df", "ci_low")}
    )
    assert two_way_mean(y, ci=0.5)["ci_high"] < r["ci_high"]


@pytest.mark.parametrize("ones", [1, 299])
def test_interval_stays_inside_0_1_near_the_edges(ones):
    y = np.zeros((3, 100))
    y.flat[:ones] = 1
    r = two_way_mean(y)
    assert 0 < r["ci_low"] < r["mean"] < r["ci_high"] < 1


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_all_wrong_or_all_right_gives_clopper_pearson(value):
    r = two_way_mean(np.full((3, 100), value))
    upper = 1 - 0.025 ** (1 / 300)
    expected = (0.0, upper) if value == 0 else (1 - upper, 1.0)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx(expected)
    assert "Clopper-Pearson" in r["note"]


def test_identical_arms_differ_by_nothing():
    rng = np.random.default_rng(2)
    y = (rng.random((3, 100)) < 0.4).astype(float)
    r = two_way_difference(y, y)
    assert r["delta"] == 0 and r["t"] == 0 and r["p"] == pytest.approx(1)
    assert r["ci_low"] == pytest.approx(-r["ci_high"]) and r["ci_high"] > 0


def test_one_seed_gives_no_interval_and_says_why():
    rng = np.random.default_rng(3)
    one, three = (rng.random((1, 100)) < 0.5).astype(float), (rng.random((3, 100)) < 0.5).astype(float)
    m = two_way_mean(one)
    assert math.isnan(m["ci_low"]) and math.isnan(m["se"]) and "1 seed" in m["note"]
    assert m["mean"] == one.mean() and m["var_problem"] > 0  # the problem spread is still there
    d = two_way_difference(one, three)
    assert all(math.isnan(d[k]) for k in ("se", "df", "t", "p", "ci_low", "ci_high", "seed_only_p"))
    assert "1 seed" in d["note"] and d["delta"] == pytest.approx(one.mean() - three.mean())


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: two_way_mean(np.ones(5)),
            r"^y must be a non-empty 2-D array \(seeds, problems\); got shape \(5,\)$",
        ),
        (lambda: two_way_mean(np.ones((2, 0))), "^y must be a non-empty 2-D array"),
        (lambda: two_way_mean([[0, 1], [1]]), "^y must be a 2-D numeric array"),
        (lambda: two_way_mean(np.array([[0, np.nan]])), "^y holds NaN"),
        (
            lambda: two_way_difference(np.ones((2, 3)), np.ones((2, 4))),
            "^ya and yb must hold the same problems",
        ),
        (
            lambda: two_way_difference(np.ones((2, 3)), np.full((2, 3), 2.0)),
            r"^yb must hold outcomes in \[0, 1\]",
        ),
        (
            lambda: two_way_difference(np.ones((2, 3, 1)), np.ones((2, 3))),
            "^ya must be a non-empty 2-D array",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


# --- a small simulation: logit p = mu + seed + problem (+ arm x problem) + residual, binary outcomes ---

NODES, WEIGHTS = hermegauss(81)
WEIGHTS = WEIGHTS / WEIGHTS.sum()


def simulate(rng, sims, seeds, problems, mu, sd, delta=0.0):
    """Arms A and B, (sims, seeds, problems) each; sd = (seed, problem, arm x problem, residual)."""
    shared = sd[1] * rng.standard_normal((sims, 1, problems))
    inter = sd[2] / 2 * rng.standard_normal((sims, 1, problems))
    arms = []
    for loc, sign in ((mu + delta, 1), (mu, -1)):
        eta = loc + sd[0] * rng.standard_normal((sims, seeds, 1)) + shared + sign * inter
        arms.append(
            rng.random((sims, seeds, problems)) < special.expit(eta + sd[3] * rng.standard_normal(eta.shape))
        )
    return arms


def truth(mu, sd):
    """E expit(mu + sqrt(sum of variances) Z) by Gauss-Hermite: the accuracy over seeds and problems."""
    total = math.sqrt(sd[0] ** 2 + sd[1] ** 2 + sd[2] ** 2 / 4 + sd[3] ** 2)
    return float(special.expit(mu + total * NODES) @ WEIGHTS)


def test_coverage_on_a_problem_dominated_design():
    """5 seeds x 100 problems where problems dominate (benchmarks/twoway_coverage.py: two-way 0.957,
    seed-only 0.758 over 1,000 simulations). 200 simulations: Monte Carlo sd of a 95% coverage is 0.015."""
    rng = np.random.default_rng(40)
    sd, mu, delta = (0.05, 2.0, 1.5, 0.5), -0.3, 0.4
    ya, yb = simulate(rng, 200, 5, 100, mu, sd, delta)
    theta_a, theta_b = truth(mu + delta, sd), truth(mu, sd)
    means = [two_way_mean(y) for y in yb]
    diffs = [two_way_difference(a, b) for a, b in zip(ya, yb)]
    covered = np.mean([m["ci_low"] <= theta_b <= m["ci_high"] for m in means])
    seed_only = np.mean([m["seed_only_ci_low"] <= theta_b <= m["seed_only_ci_high"] for m in means])
    diff_covered = np.mean([d["ci_low"] <= theta_a - theta_b <= d["ci_high"] for d in diffs])
    assert 0.90 <= covered <= 0.985 and 0.90 <= diff_covered <= 0.985, (covered, diff_covered)
    assert seed_only <= 0.86 and covered - seed_only >= 0.08, (covered, seed_only)


def test_type_one_error_when_the_arms_are_equal():
    """Delta = 0 makes the arms' accuracies equal exactly; 200 simulations, 3 seeds, both sources."""
    rng = np.random.default_rng(41)
    ya, yb = simulate(rng, 200, 3, 100, 0.0, (0.2, 1.5, 1.0, 0.5))
    rejected = np.mean([two_way_difference(a, b)["p"] < 0.05 for a, b in zip(ya, yb)])
    assert rejected <= 0.09, rejected
