"""analysis.staleness on synthetic records whose answers are known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import staleness as st

LRS = [1e-5 * 2**i for i in range(10)]  # 1e-5 .. 5.12e-3, a doubling grid


def synthetic_runs(a=2e-3, b=1e-3, seeds=(0, 1, 2), ss=(0, 1, 2, 4, 8), correction="coupled"):
    """A run collapses exactly when lr > min(a/S, b): the law η_max(S) = min(a/S, b)."""
    rows = []
    for s in ss:
        limit = b if s == 0 else min(a / s, b)
        for lr in LRS:
            for seed in seeds:
                bad = lr > limit
                rows.append({"run_id": f"{correction}-S{s}-{lr:g}-{seed}", "S": s, "lr": lr, "correction": correction,
                             "seed": seed, "collapsed": bad, "collapse_step": 7.0 if bad else math.nan})  # fmt: skip
    return pd.DataFrame(rows)


def test_eta_max_interpolates_where_half_the_seeds_survive():
    """At one (S, correction): stable shares 1, 1, 2/3, 0 at η = 1, 2, 4, 8 (x 1e-4): p crosses 1/2
    between 4e-4 (2/3) and 8e-4 (0) at a third of the way in log η: 4e-4 · 2^(1/4)... precisely
    frac = (2/3 − 1/2)/(2/3 − 0) = 1/4, so η_max = 4e-4 · 2^(1/4)."""
    rows = []
    for lr, collapsed in ((1e-4, [0, 0, 0]), (2e-4, [0, 0, 0]), (4e-4, [0, 0, 1]), (8e-4, [1, 1, 1])):
        rows += [
            {"S": 1, "correction": "c", "lr": lr, "seed": i, "collapsed": bool(c)}
            for i, c in enumerate(collapsed)
        ]
    out = st.eta_max(pd.DataFrame(rows))
    assert out["eta_max"].iloc[0] == pytest.approx(4e-4 * 2**0.25) and out["censored"].iloc[0] == ""


def test_eta_max_censoring():
    rows = [{"S": 0, "correction": "c", "lr": lr, "seed": 0, "collapsed": False} for lr in (1e-4, 1e-3)]
    assert st.eta_max(pd.DataFrame(rows)).iloc[0][["eta_max", "censored"]].tolist() == [1e-3, "above"]
    rows = [{"S": 0, "correction": "c", "lr": lr, "seed": 0, "collapsed": True} for lr in (1e-4, 1e-3)]
    assert st.eta_max(pd.DataFrame(rows)).iloc[0][["eta_max", "censored"]].tolist() == [1e-4, "below"]


def test_two_constraint_fit_recovers_the_law():
    """η_max(S) = min(2e-3/S, 1e-3) on a doubling grid: the recovered a and b are within one grid step
    (a factor 2) of the truth, the knee a/b near S = 2, and the slope over S >= 2 near −1."""
    table = st.eta_max(synthetic_runs())
    fit = st.fit_eta_max(table)
    assert 1e-3 <= fit["a"] <= 4e-3 and 5e-4 <= fit["b"] <= 2e-3
    assert 1 <= fit["S_knee"] <= 4
    assert st.fit_eta_max(table[table["S"] != 1])["slope"] == pytest.approx(-1.0, abs=0.25)


def test_slope_is_flat_when_staleness_does_not_matter():
    table = st.eta_max(synthetic_runs(a=1.0, b=1e-3))  # a/S never binds on S <= 8
    fit = st.fit_eta_max(table)
    assert fit["slope"] == pytest.approx(0.0, abs=0.05) and fit["S_knee"] > 8


def test_bootstrap_intervals_cover_the_point_fit():
    runs = synthetic_runs()
    runs.loc[runs.sample(frac=0.05, random_state=0).index, "collapsed"] ^= True  # seed noise
    out = st.bootstrap_eta_max(runs, "coupled", n_boot=50)
    for k in ("a", "b"):
        lo, hi = out["ci"][k]
        assert lo <= out["fit"][k] * 1.0001 and out["fit"][k] <= hi * 1.0001


def test_ess_lead_time_hits_and_false_alarms():
    """Run A collapses at step 10, ESS below 0.5 from step 7: a hit 3 steps ahead. Run B collapses at 5
    with ESS never low: a miss. Run C never collapses and ESS dips at step 2: a false alarm. Run D
    never collapses, never dips."""
    runs = pd.DataFrame([{"run_id": "A", "collapsed": True, "collapse_step": 10.0},
                         {"run_id": "B", "collapsed": True, "collapse_step": 5.0},
                         {"run_id": "C", "collapsed": False, "collapse_step": math.nan},
                         {"run_id": "D", "collapsed": False, "collapse_step": math.nan}])  # fmt: skip
    hist = []
    for run, low_from in (("A", 7), ("B", 99), ("C", 2), ("D", 99)):
        hist += [
            {"run_id": run, "step": s, "ess": 0.3 if s >= low_from and (run != "C" or s == 2) else 0.9}
            for s in range(1, 12)
        ]
    out = st.ess_lead_time(runs, pd.DataFrame(hist))
    assert out["hit_rate"] == 0.5 and out["false_alarm_rate"] == 0.5 and out["median_lead"] == 3


def test_load_stability_reads_collapse_from_records(tmp_path):
    import json

    from oxbench.config import RunConfig
    from oxbench.grid.record import RunRecord

    for i, (s, collapse) in enumerate(((0, None), (4, {"step": 6, "reason": "reward fell"}))):
        cfg = RunConfig(method="sgrpo", train={"lr": 1e-4}, online={"source": "delayed", "staleness": s})
        d = tmp_path / "g" / f"r{i}"
        d.mkdir(parents=True)
        rec = RunRecord(run_id=f"r{i}", grid="g", status="finished", scale="tiny-m", scale_params=1, method="sgrpo",
                        paradigm="online", seed=0, lora=False, config=cfg.model_dump(), metrics={"accuracy": 0.5},
                        arm={"scale": "tiny-m", "method": "sgrpo", "lora": False, "online.staleness": s}, collapse=collapse)  # fmt: skip
        (d / "run.json").write_text(rec.model_dump_json())
        (d / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.25, "ess": 0.8}) + "\n")
    runs = st.load_stability(tmp_path).sort_values("S")
    assert runs["S"].tolist() == [0, 4] and runs["collapsed"].tolist() == [False, True]
    assert runs["collapse_step"].iloc[1] == 6 and runs["correction"].tolist() == ["method=sgrpo"] * 2
    assert np.allclose(runs["reward"], 0.25) and len(st.load_histories(tmp_path)) == 2


def test_report_draws_the_staleness_section(tmp_path, monkeypatch):
    """Synthetic records of a delayed S x lr grid with collapses: the report gets the section, the
    η_max tables and the four figures, each also saved as SVG and PDF."""
    import json

    from analysis import report
    from oxbench.config import RunConfig
    from oxbench.grid.record import RunRecord

    monkeypatch.setattr(report._staleness_section, "__defaults__", (10,))
    runs = synthetic_runs(seeds=(0, 1), ss=(0, 1, 4))
    for r in runs.itertuples():
        src = "async" if r.seed == 1 else "delayed"
        cfg = RunConfig(
            method="sgrpo", seed=r.seed, train={"lr": r.lr}, online={"source": src, "staleness": r.S}
        )
        d = tmp_path / "g" / r.run_id
        d.mkdir(parents=True)
        rec = RunRecord(run_id=r.run_id, grid="g", status="finished", scale="tiny-m", scale_params=1, method="sgrpo",
                        paradigm="online", seed=r.seed, lora=False, config=cfg.model_dump(), metrics={"accuracy": 0.5},
                        arm={"scale": "tiny-m", "method": "sgrpo", "lora": False, "online.staleness": r.S, "train.lr": r.lr},
                        collapse={"step": 7, "reason": "reward fell"} if r.collapsed else None)  # fmt: skip
        (d / "run.json").write_text(rec.model_dump_json())
        rows = [{"step": s, "reward_mean": 0.5, "ess": 0.3 if r.collapsed and s >= 5 else 0.95,
                 "rollouts_per_s": 10.0 + r.seed} for s in range(1, 8)]  # fmt: skip
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    html = report.render_report(tmp_path / "g", baseline="sgrpo")
    assert 'id="staleness"' in html and "η_max per lag and correction" in html and "hit rate 1.00" in html
    names = {p.name for p in (tmp_path / "g" / "figures").iterdir()}
    assert {"eta_max.svg", "eta_max.pdf", "ess_at_collapse.svg", "throughput.pdf"} <= names
    assert any(n.startswith("stability_") for n in names)
