"""The seed planner (issue 27.6): known sample sizes, the requested power over 1,000 simulated studies,
the sequential plan's error rate, and ``oxbench plan-seeds``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import seed_planner as sp


@pytest.mark.parametrize(("d", "n"), [(1.0, 17), (0.8, 26), (0.5, 64)])
def test_the_classic_table_of_two_sample_t_tests(d, n):
    """Cohen's table (α = 0.05 two-sided, power 0.8): equal SDs make Welch's ν Student's 2n − 2."""
    assert sp.required_seeds(d, 1.0, alpha=0.05, power=0.8) == n
    assert sp.welch_power(d, 1.0, 1.0, n - 1, n - 1, 0.05) < 0.8 <= sp.welch_power(d, 1.0, 1.0, n, n, 0.05)


def test_bonferroni_over_m_comparisons_is_alpha_over_m():
    assert sp.required_seeds(0.05, 0.04, m=8) == sp.required_seeds(0.05, 0.04, alpha=0.05 / 8) == 19
    assert sp.required_seeds(0.05, 0.04, m=8) > sp.required_seeds(0.05, 0.04, m=1)


@pytest.mark.parametrize(
    ("delta", "sd_a", "sd_b", "m"), [(0.05, 0.04, 0.04, 8), (0.05, 0.02, 0.06, 8), (0.10, 0.14, 0.05, 1)]
)
def test_the_recommendation_reaches_the_requested_power_over_1000_simulated_studies(delta, sd_a, sd_b, m):
    """The issue's target: at the recommended n, 1,000 simulated studies with a known effect reject at
    the corrected α in 80% ± 5 points of them (and within 5 points of the planner's own prediction)."""
    n = sp.required_seeds(delta, sd_a, sd_b, alpha=0.05, power=0.8, m=m)
    empirical = sp.simulate_power(n, delta, sd_a, sd_b, 0.05 / m, n_sims=1000, seed=n)
    assert abs(empirical - 0.8) <= 0.05, (n, empirical)
    assert abs(empirical - sp.welch_power(delta, sd_a, sd_b, n, n, 0.05 / m)) <= 0.05


def test_a_pilot_sd_upper_limit_plans_more_seeds():
    assert sp.sd_upper(0.04, 3, 0.8) > 0.04
    assert sp.required_seeds(0.05, sp.sd_upper(0.04, 3, 0.8), m=8) > sp.required_seeds(0.05, 0.04, m=8)


@pytest.mark.parametrize("spending", sp.SPENDING)
def test_the_sequential_plan_keeps_its_error_rate(spending):
    bounds = sp.sequential_boundaries([3, 5, 8, 12], 0.05, spending)
    assert bounds["alpha_spent"].iloc[-1] == pytest.approx(0.05)
    assert (np.diff(bounds["alpha_spent"]) > 0).all()
    null = sp.simulate_sequential(bounds, 0.0, 1.0, 1.0, n_sims=20_000)
    assert null["reject"] <= 0.05 + 0.005  # 20,000 studies: the Monte Carlo SE is 0.0015
    alt = sp.simulate_sequential(bounds, 1.5, 1.0, 1.0, n_sims=20_000)
    assert alt["reject"] > 0.8 and alt["expected_n"] < 12  # decided pairs stop getting seeds


def runs(effects: dict[str, float], seeds: int, sd: float = 0.02) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    rows = [{"scale": "s", "method": m, "seed": s, "accuracy": 0.5 + e + rng.normal(0, sd)}
            for m, e in effects.items() for s in range(seeds)]  # fmt: skip
    return pd.DataFrame(rows)


def test_sequential_decisions_add_seeds_only_to_pairs_not_yet_decided():
    effects = {"dpo": 0.0, "big": 0.2, "none": 0.0}
    early = sp.sequential_decisions(runs(effects, 5), "dpo", [3, 5, 8, 12]).set_index("method")
    assert early.loc["big", "decision"] == "differs" and early.loc["big", "look"] == 5
    assert early.loc["none", "decision"] == "add seeds" and early.loc["none", "next_n"] == 8
    late = sp.sequential_decisions(runs(effects, 12), "dpo", [3, 5, 8, 12]).set_index("method")
    assert late.loc["none", "decision"] == "no difference detected" and late.loc["big", "look"] == 5


def test_plan_from_pilot_seeds():
    table = sp.plan(runs({"dpo": 0.0, "a": 0.05, "b": 0.1}, 3), "dpo", 0.05)
    assert list(table["method"]) == ["a", "b"] and (table["m"] == 2).all()
    assert (table["n_for_delta"] >= 2).all() and (table["alpha_each"] == 0.025).all()


def test_the_cli_command():
    from typer.testing import CliRunner

    from oxbench_cli import app

    result = CliRunner().invoke(app, ["plan-seeds", "--sd", "4", "--comparisons", "8"])
    assert result.exit_code == 0, result.output
    assert "19 seeds per arm" in result.output and "unit of replication: seeds" in result.output
    bad = CliRunner().invoke(app, ["plan-seeds", "--sd", "4", "--spending", "wald"])
    assert bad.exit_code == 2


def _pilot_runs(rng, delta: float, sd_a: float, sd_b: float, pilots: int) -> pd.DataFrame:
    """``pilots`` pilots of three seeds per arm drawn from the truth, as load_runs gives them (each pilot
    its own ``scale``, so one :func:`plan` call plans them all)."""
    rows = []
    for k in range(pilots):
        for method, mean, sd in (("base", 0.0, sd_b), ("arm", delta, sd_a)):
            rows += [
                {"scale": k, "method": method, "seed": i, "accuracy": v}
                for i, v in enumerate(rng.normal(mean, sd, 3))
            ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("delta", "sd_a", "sd_b", "m"), [(0.05, 0.04, 0.04, 8), (0.05, 0.02, 0.06, 8), (0.10, 0.14, 0.05, 1)]
)
def test_plans_from_three_seed_pilots_reach_the_power_they_promise(delta, sd_a, sd_b, m):
    """Issue 40, item 7: the planner sees a pilot, not the truth. From 200 pilots of 3 seeds per arm drawn
    from the truth, each planned by :func:`plan` as it is called by default (the 70% upper limit of each
    pilot σ), the true power at the planned n averages at least 0.80 (at α/m). Planning on the pilots' own
    SDs falls short of it, so the test can fail."""
    df = _pilot_runs(np.random.default_rng(7), delta, sd_a, sd_b, 200)
    achieved = {}
    for name, kw in (("default", {}), ("point", {"sd_quantile": None})):
        planned = sp.plan(df, "base", delta, alpha=0.05 / m, **kw)["n_for_delta"]
        achieved[name] = np.mean([sp.welch_power(delta, sd_a, sd_b, n, n, 0.05 / m) for n in planned])
    assert achieved["default"] >= 0.80 > achieved["point"]
