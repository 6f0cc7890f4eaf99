"""analysis.domains: the method spread per task family, with intervals and a permutation null."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_report import Page, column, make_grid, record, row_of, write_run

from analysis.domains import family_spread
from analysis.report import write_report
from analysis.runs import domain_metrics


def runs(values: dict[str, list[float]], col: str = "accuracy", **extra) -> pd.DataFrame:
    return pd.DataFrame([{"scale": "s", "scale_params": 1, "method": m, "arm": m, "seed": i, col: v, **extra}
                         for m, vs in values.items() for i, v in enumerate(vs)])  # fmt: skip


def test_spread_and_its_permutation_null_by_hand():
    """a: {0.1, 0.3} (mean 0.2), b: {0.5, 0.7} (mean 0.6): spread = 100 (0.6 - 0.2) = 40 points.
    The 6 ways to label the 4 runs two a's and two b's give mean differences |.2 - .6| (twice: the
    true split and its mirror), |.3 - .5| = .2 (twice: {.1,.5} vs {.3,.7} and mirror) and |.4 - .4| = 0
    (twice): spreads 40, 40, 20, 20, 0, 0. p = (1 + #{null >= 40}) / (1 + n_perm) tends to 1/3 and the
    median null spread is 20. Bootstrap replicates lie in [0, 60] (b's mean in [.5, .7], a's in [.1, .3])."""
    out = family_spread(runs({"a": [0.1, 0.3], "b": [0.5, 0.7]}), n_boot=4000, n_perm=6000)
    r = out.iloc[0]
    assert (r["family"], r["n_methods"], r["n_runs"], r["best"], r["worst"]) == ("in_domain", 2, 4, "b", "a")
    assert r["spread"] == pytest.approx(40.0)
    assert r["null_spread"] == pytest.approx(20.0)
    assert r["p"] == pytest.approx(1 / 3, abs=0.02)
    assert 20.0 <= r["ci_low"] <= 40.0 <= r["ci_high"] <= 60.0


def test_methods_that_differ_are_told_apart_and_methods_that_do_not_are_not():
    rng = np.random.default_rng(0)
    same = runs({m: list(0.5 + rng.normal(0, 0.02, 5)) for m in "abcd"})
    apart = runs({m: list(0.3 + 0.1 * i + rng.normal(0, 0.02, 5)) for i, m in enumerate("abcd")})
    p_same = family_spread(same, n_perm=999).iloc[0]
    p_apart = family_spread(apart, n_perm=999).iloc[0]
    assert p_same["p"] > 0.05 and p_same["spread"] == pytest.approx(p_same["null_spread"], rel=0.6)
    assert p_apart["p"] < 0.01 and p_apart["spread"] > 25 and p_apart["null_spread"] < p_apart["spread"] / 2


def test_each_family_gets_a_row_with_base_and_chance_and_nan_runs_are_left_out():
    df = runs({"a": [0.1, 0.2], "b": [0.3, 0.4]}, chance=0.02)
    df["domain_general"] = [0.40, 0.42, 0.41, np.nan]
    df["base_domain_general"], df["domain_general_chance"] = 0.5, 0.25
    out = family_spread(df, n_boot=50, n_perm=50).set_index("family")
    assert list(out.index) == ["in_domain", "general"]
    assert out.loc["in_domain", "chance"] == pytest.approx(2.0) and np.isnan(out.loc["in_domain", "base"])
    g = out.loc["general"]
    assert (g["n_runs"], g["base"], g["chance"]) == (3, 50.0, 25.0)
    assert g["spread"] == pytest.approx(100 * (0.41 - 0.41), abs=1e-9)
    df["lmeval_t1"], df["lmeval_t1_chance"], df["lmeval_t1_n"] = [0.1, 0.2, 0.6, 0.7], 0.25, 200
    tasks = family_spread(df, n_boot=50, n_perm=50, per_task=True).set_index("family")
    assert list(tasks.index) == ["in_domain", "general", "t1"]
    assert tasks.loc["t1", "spread"] == pytest.approx(50.0) and tasks.loc["t1", "chance"] == 25.0


def test_domain_metrics_average_each_familys_tasks_from_the_config():
    rec = {"config": {"eval": {"lm_eval": {"tasks": {"t1": "general", "t2": "general", "h": "hard"}}}},
           "metrics": {"lmeval_t1": 0.2, "lmeval_t2": 0.4, "lmeval_h": 0.1, "base_lmeval_t1": 0.3,
                       "base_lmeval_t2": 0.5, "lmeval_t1_chance": 0.25, "lmeval_t2_chance": 0.0}}  # fmt: skip
    out = domain_metrics(rec)
    assert out["domain_general"] == pytest.approx(0.3) and out["base_domain_general"] == pytest.approx(0.4)
    assert out["domain_general_chance"] == pytest.approx(0.125)
    assert out["domain_hard"] == 0.1 and out["base_domain_hard"] is None and out["domain_hard_chance"] is None
    assert domain_metrics({"config": {}, "metrics": {}}) == {}


def test_the_report_shows_the_family_spread_and_saves_its_figure(tmp_path):
    root = tmp_path / "r"
    make_grid(root)
    tasks = {"oxbench_order": "general"}
    for i, method in enumerate(["dpo", "simpo"]):
        for seed in range(3):
            rec = record(method, "tiny", seed, grid="g2", run_id=f"f-{method}-{seed}",
                         config={"eval": {"lm_eval": {"tasks": tasks}}})  # fmt: skip
            rec["metrics"] |= {"lmeval_oxbench_order": 0.3 + 0.01 * seed + 0.2 * i,
                               "base_lmeval_oxbench_order": 0.35, "lmeval_oxbench_order_chance": 0.25,
                               "base_accuracy": 0.1, "chance": 0.02}  # fmt: skip
            write_run(root, rec)
    page = Page(write_report(root / "g2").read_text())
    table = page.tables["domain-spread"]
    assert table["head"][:4] == ["Scale", "Family", "Methods", "Spread (pp)"]
    general = next(r for r in table["rows"] if r[1][0] == "general")
    assert general[3][0] == "20.00" and general[9][0] == "35.0" and general[10][0] == "25.0"
    board = next(t for t in page.tables.values() if "general (%) [95% CI]" in t["head"])
    col = column(board, "general (%)")
    assert row_of(board, "base model")[col][0] == "35.0" and row_of(board, "chance")[col][0] == "25.0"
    assert row_of(board, "simpo")[col][0].startswith("51.0 ")  # 100 x mean(0.50, 0.51, 0.52)
    assert (root / "g2" / "figures" / "spread_by_task_family.svg").is_file()
    assert (root / "g2" / "figures" / "spread_by_task_family.pdf").is_file()
    assert "domain-spread" not in Page(write_report(root / "g1").read_text()).tables
