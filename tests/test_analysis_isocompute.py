"""analysis.isocompute on synthetic curves whose true parameters are known."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis import isocompute as iso

# The synthetic world: reward of a run with n rollouts per problem at compute C is a sigmoid in log C
# whose ceiling rises with n and whose midpoint moves right with n (large n learns later but higher).
NS = [2, 4, 8, 16, 32, 64]


def true_curve(n: int, log_c):
    j = math.log2(n)
    return iso.sigmoid(log_c, 0.1, 0.5 + 0.07 * j, 5.0 + 0.6 * j, 2.0)


def synthetic_curves(seeds=(0, 1, 2), noise=0.0, B_ps=(4, 16)) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    cs = np.unique(np.round(np.geomspace(32, 65536, 30)))
    rows = []
    for n in NS:
        for b in B_ps:
            for s in seeds:
                run = f"n{n}-b{b}-s{s}"
                for c in [0.0, *cs]:
                    r = true_curve(n, math.log(c)) if c > 0 else 0.1
                    rows.append({"run_id": run, "seed": s, "n": n, "B_p": b, "subset": "easy",
                                 "rollouts": c, "avg_at_4": float(r + noise * rng.normal())})  # fmt: skip
    return pd.DataFrame(rows)


def test_sigmoid_fit_recovers_its_parameters():
    """y = 0.2 + (0.8 − 0.2) / (1 + exp(−1.5 (x − 6))) sampled on x in [2, 10] without noise: the fit
    returns lo 0.2, hi 0.8, mid 6, slope 1.5."""
    x = np.linspace(2, 10, 25)
    fit = iso.fit_sigmoid(x, iso.sigmoid(x, 0.2, 0.8, 6.0, 1.5), bounds=(0, 1))
    assert fit["lo"] == pytest.approx(0.2, abs=1e-4)
    assert fit["hi"] == pytest.approx(0.8, abs=1e-4)
    assert fit["mid"] == pytest.approx(6.0, abs=1e-3)
    assert fit["slope"] == pytest.approx(1.5, abs=1e-3)


def test_sigmoid_fit_is_monotone_on_a_falling_curve():
    """A falling curve cannot be fitted by a falling sigmoid: slope >= 0 and hi >= lo always."""
    x = np.linspace(0, 5, 10)
    fit = iso.fit_sigmoid(x, 1 - x / 5, bounds=(0, 1))
    assert fit["slope"] >= 0 and fit["hi"] >= fit["lo"]


def test_sigmoid_plateaus_stay_within_bounds():
    """A reward still rising steeply at the last point would extrapolate past 1: the fit's plateaus stay in
    [0, 1] however it is cut."""
    x = np.linspace(2, 6, 12)
    fit = iso.fit_sigmoid(x, iso.sigmoid(x, 0.1, 1.6, 6.5, 1.0), bounds=(0, 1))
    assert 0 <= fit["lo"] <= fit["hi"] <= 1


def test_sigmoid_fit_needs_four_points():
    with pytest.raises(ValueError, match="4 distinct"):
        iso.fit_sigmoid([1, 2, 3], [0, 1, 1])


def test_record_breaking_by_hand():
    """Rewards 0.10, 0.12, 0.115, 0.30, 0.305, 0.31 with bucket 0.05: buckets 2, 2, 2, 6, 6, 6, so the
    records are the first point (bucket 2) and the fourth (bucket 6). With bucket 0 every new best
    counts: points 1, 2, 4, 5, 6."""
    df = pd.DataFrame({"run_id": "r", "n": 2, "B_p": 4, "rollouts": [1, 2, 3, 4, 5, 6],
                       "m": [0.10, 0.12, 0.115, 0.30, 0.305, 0.31]})  # fmt: skip
    assert list(iso.record_breaking(df, "m", bucket=0.05)["rollouts"]) == [1, 4]
    assert list(iso.record_breaking(df, "m", bucket=0)["rollouts"]) == [1, 2, 4, 5, 6]


def test_frontier_from_records_equals_frontier_from_all_points():
    curves = synthetic_curves(noise=0.03)
    at = np.unique(curves["rollouts"])
    full = iso.frontier(curves, "avg_at_4", at=at)
    exact = iso.frontier(iso.record_breaking(curves, "avg_at_4", bucket=0), "avg_at_4", at=at)
    assert np.array_equal(full["avg_at_4"], exact["avg_at_4"])
    coarse = iso.frontier(iso.record_breaking(curves, "avg_at_4", bucket=0.01), "avg_at_4", at=at)
    assert np.all(full["avg_at_4"] - coarse["avg_at_4"] < 0.01)
    assert np.all(np.diff(full["avg_at_4"]) >= 0)  # a frontier never falls


def test_fits_by_n_recover_each_n_curve():
    fits = iso.fits_by_n(synthetic_curves(), "avg_at_4", use="all").set_index("n")
    for n in NS:
        j = math.log2(n)
        assert fits.loc[n, "hi"] == pytest.approx(0.5 + 0.07 * j, abs=0.01)
        assert fits.loc[n, "mid"] == pytest.approx(5.0 + 0.6 * j, abs=0.05)


def test_n_star_is_the_upper_envelope():
    """Against the true curves, evaluated on the same grid, the argmax n at each C."""
    grid = np.linspace(math.log(32), math.log(65536), 50)
    fits = iso.fits_by_n(synthetic_curves(), "avg_at_4", use="all")
    got = iso.n_star(fits, grid)["n_star"].to_numpy()
    want = np.array([NS[int(np.argmax([true_curve(n, lc) for n in NS]))] for lc in grid])
    assert np.mean(got == want) > 0.9  # the fits cross where the true curves do, to the grid's step
    assert np.all(np.diff(np.log2(got)) >= 0)  # here n* only rises with C


def test_fit_n_star_recovers_a_known_sigmoid():
    """n* = 2 ** (1 + (6 − 1) / (1 + exp(−1.2 (log C − 8)))), rounded to the nearest power of two as
    a grid would: the fit returns plateaus near n = 2 and 64 and the midpoint near log C = 8."""
    grid = np.linspace(3, 13, 60)
    exponent = iso.sigmoid(grid, 1.0, 6.0, 8.0, 1.2)
    fit = iso.fit_n_star(grid, 2.0 ** np.round(exponent))
    assert fit["n_lo"] == pytest.approx(2, rel=0.15)
    assert fit["n_hi"] == pytest.approx(64, rel=0.15)
    assert fit["mid"] == pytest.approx(8.0, abs=0.3)
    assert fit["slope"] == pytest.approx(1.2, rel=0.35)


def test_bootstrap_interval_covers_the_point_fit():
    out = iso.bootstrap_n_star(synthetic_curves(noise=0.01), "avg_at_4", n_boot=20)
    assert out["replicates"] + out["failed"] == 20 and out["replicates"] >= 15
    for key in ("lo", "hi", "mid"):
        lo, hi = out["ci"][key]
        assert lo <= out["fit"][key] + 1e-6 and out["fit"][key] - 1e-6 <= hi


def test_variance_share_when_only_n_matters():
    """Reward = f(n) exactly, B_p irrelevant: n explains all of it, B_p nothing, no residual."""
    pts = pd.DataFrame(
        [{"n": n, "B_p": b, "r": 0.1 * math.log2(n)} for n in NS for b in (4, 16) for _ in (0, 1)]
    )
    share = iso.variance_share(pts, "r")
    assert share["n"] == pytest.approx(1.0) and share["B_p"] == pytest.approx(0.0, abs=1e-12)
    assert share["residual"] == pytest.approx(0.0, abs=1e-12)


def test_per_problem_best_and_worst_by_hand():
    """8 samples, 2 right, k = 4: best@4 = 1 − C(6,4)/C(8,4) = 1 − 15/70; worst@4 = C(2,4)/C(8,4) = 0."""
    assert iso.per_problem([2], 8, 4, "best")[0] == pytest.approx(1 - 15 / 70)
    assert iso.per_problem([2], 8, 4, "worst")[0] == 0.0
    assert iso.per_problem([8], 8, 4, "worst")[0] == 1.0


def test_paired_by_problem_detects_sharpening():
    """n = 8 gets every problem 3/4 right where n = 2 gets 1/4: worst@2 rises on every problem."""
    rows = [{"run_id": f"n{n}", "n": n, "correct_counts": [c] * 30, "samples_per_problem": 4}
            for n, c in ((2, 1), (8, 3))]  # fmt: skip
    out = iso.paired_by_problem(pd.DataFrame(rows), 2, 8, k=2, kind="worst")
    assert out["delta"] == pytest.approx(0.5) and out["b_wins"] == 30 and out["p"] < 1e-5


def test_at_compute_takes_each_runs_last_point_within_budget():
    curves = synthetic_curves(seeds=(0,))
    pts = iso.at_compute(curves, 1000)
    assert len(pts) == len(NS) * 2 and (pts["rollouts"] <= 1000).all()
    assert pts["rollouts"].max() == curves.loc[curves["rollouts"] <= 1000, "rollouts"].max()


def test_load_curves_reads_finished_runs_and_names_a_bad_line(tmp_path):
    from oxbench.config import RunConfig
    from oxbench.grid.record import RunRecord

    cfg = RunConfig(
        method="sgrpo", online={"n": 4, "prompts_per_batch": 2, "rounds": 8}, data={"subset": "hard"}
    )
    d = tmp_path / "g" / "r1"
    d.mkdir(parents=True)
    rec = RunRecord(run_id="r1", grid="g", status="finished", scale="tiny-xs", scale_params=10, method="sgrpo",
                    paradigm="online", seed=0, lora=False, config=cfg.model_dump(), metrics={"accuracy": 0.5})  # fmt: skip
    (d / "run.json").write_text(rec.model_dump_json())
    rows = [
        {"step": s, "rollouts": 8 * s, "generated_tokens": 0, "trained_tokens": 0, "avg_at_4": 0.1 * s}
        for s in range(3)
    ]
    (d / "curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curves = iso.load_curves(tmp_path)
    assert list(curves["rollouts"]) == [0, 8, 16] and set(curves["subset"]) == {"hard"}
    assert curves["n"].iloc[0] == 4 and curves["B_p"].iloc[0] == 2 and curves["rollouts_max"].iloc[0] == 64
    (d / "curve.jsonl").write_text('{"step": 0}\n')
    with pytest.raises(ValueError, match=r"curve.jsonl:1: curve row without field 'rollouts'"):
        iso.load_curves(tmp_path)


def write_synthetic_runs(root, curves: pd.DataFrame) -> None:
    """One finished run record per synthetic run, with its curve.jsonl (and per-problem counts)."""
    from oxbench.config import RunConfig
    from oxbench.grid.record import RunRecord

    rng = np.random.default_rng(1)
    for run_id, run in curves.groupby("run_id"):
        r = run.iloc[0]
        cfg = RunConfig(method="sgrpo", seed=int(r.seed), data={"subset": r.subset},
                        online={"n": int(r.n), "prompts_per_batch": int(r.B_p), "rounds": 4})  # fmt: skip
        d = root / "iso" / run_id
        d.mkdir(parents=True)
        rec = RunRecord(run_id=run_id, grid="iso", status="finished", scale="tiny-m", scale_params=10, method="sgrpo",
                        paradigm="online", seed=int(r.seed), lora=False, config=cfg.model_dump(),
                        arm={"scale": "tiny-m", "method": "sgrpo", "lora": False, "online.n": int(r.n),
                             "online.prompts_per_batch": int(r.B_p)}, metrics={"accuracy": float(run["avg_at_4"].iloc[-1])})  # fmt: skip
        (d / "run.json").write_text(rec.model_dump_json())
        lines = []
        for row in run.itertuples():
            counts = rng.binomial(4, row.avg_at_4, 20).tolist()
            lines.append({"step": 0, "rollouts": row.rollouts, "generated_tokens": 40 * row.rollouts, "trained_tokens": 0,
                          "avg_at_4": row.avg_at_4, "best_at_4": min(1, 2 * row.avg_at_4), "worst_at_4": row.avg_at_4 ** 2,
                          "correct_counts": counts, "samples_per_problem": 4})  # fmt: skip
        (d / "curve.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_report_draws_the_isocompute_section(tmp_path, monkeypatch):
    from analysis import report
    from analysis.report import render_report

    monkeypatch.setattr(report._isocompute_section, "__defaults__", (10,))  # 10 bootstrap replicates

    curves = synthetic_curves(seeds=(0, 1), noise=0.01)
    curves = curves[curves["rollouts"].isin(np.unique(curves["rollouts"])[::3])]
    write_synthetic_runs(tmp_path, curves)
    html = render_report(tmp_path / "iso", baseline="sgrpo")
    assert 'id="isocompute"' in html and "n*(C) fit" in html
    assert html.count("<svg") >= 5  # frontier, n*, best/worst, curves (+ the report's own plots)
    figures = sorted(p.name for p in (tmp_path / "iso" / "figures").iterdir())
    assert {
        "frontier_easy.svg",
        "frontier_easy.pdf",
        "n_star_easy.svg",
        "best_worst.pdf",
        "curves_easy.svg",
    } <= set(figures)
