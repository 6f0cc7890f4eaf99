"""Analysis that knows its units (issue 27.5): identical arms once, every test's unit named."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest

from analysis.leverage import eta_squared
from analysis.units import UNITS, drop_duplicate_arms, duplicate_arms, duplicate_note

ROOT = Path(__file__).resolve().parents[1]


def write_run(tmp: Path, run_id: str, completions: list[str]) -> str:
    d = tmp / run_id
    d.mkdir()
    lines = [
        json.dumps({"id": str(i), "split": "test", "correct": False, "completion": c})
        for i, c in enumerate(completions)
    ]
    (d / "eval.jsonl").write_text("\n".join(lines) + "\n")
    return str(d)


def table(
    tmp: Path, arms: dict[str, list[list[str]]], accuracy: dict[str, list[float]] | None = None
) -> pd.DataFrame:
    rows = []
    for arm, seeds in arms.items():
        for seed, comps in enumerate(seeds):
            run_id = f"{arm}-{seed}"
            path = write_run(tmp, run_id, comps) if comps else str(tmp / run_id)
            acc = accuracy[arm][seed] if accuracy else 0.5
            rows.append({"scale": "s", "method": arm, "arm": arm, "seed": seed, "run_id": run_id, "path": path,
                         "accuracy": acc})  # fmt: skip
    return pd.DataFrame(rows)


def texts(n: int, tag: str, differ: int = 0) -> list[str]:
    return [f"{tag}{i}" if i < differ else f"answer {i}" for i in range(n)]


def test_an_arm_that_repeats_another_seed_for_seed_is_found_and_dropped(tmp_path):
    same = [texts(200, "", 0), texts(200, "x", 10)]
    df = table(tmp_path, {"sgrpo": same, "cispo": same, "gspo": [texts(200, "g", 20), texts(200, "h", 30)]})
    dups = duplicate_arms(df)
    assert dups[["kept", "duplicate", "seeds", "identical"]].values.tolist() == [["sgrpo", "cispo", 2, True]]
    once = drop_duplicate_arms(df, dups)
    assert sorted(once["arm"].unique()) == ["gspo", "sgrpo"]
    assert "cispo repeats sgrpo" in duplicate_note(dups) and duplicate_note(dups.iloc[:0]) is None


def test_near_identical_counts_at_99_percent_and_not_below(tmp_path):
    base = [texts(200, "", 0)] * 2
    df = table(
        tmp_path, {"a": base, "b": [texts(200, "b", 1), texts(200, "b", 2)], "c": [texts(200, "c", 3)] * 2}
    )
    dups = duplicate_arms(df)
    assert dups["duplicate"].tolist() == ["b"] and dups["min_agreement"].iloc[0] == pytest.approx(0.99)
    assert not dups["identical"].iloc[0]


def test_two_arms_wrong_on_every_problem_are_not_the_same_run(tmp_path):
    """Correctness alone would call them identical (all False); their completions differ."""
    df = table(tmp_path, {"dpo": [texts(100, "d", 100)], "rft": [texts(100, "r", 100)]})
    assert duplicate_arms(df).empty


def test_without_completions_the_metric_decides_and_other_seeds_are_not_compared(tmp_path):
    df = table(tmp_path, {"a": [[], []], "b": [[], []]}, accuracy={"a": [0.3, 0.4], "b": [0.3, 0.4]})
    assert duplicate_arms(df)["duplicate"].tolist() == ["b"]
    (tmp_path / "x").mkdir()
    other = table(tmp_path / "x", {"a": [[]], "b": [[], []]}, accuracy={"a": [0.3], "b": [0.3, 0.4]})
    assert duplicate_arms(other).empty  # b ran a seed a did not


def test_eta_squared_counts_a_repeated_arm_once():
    """Two copies of one arm shift η²: the reason spreads and η² drop duplicates."""
    values = pd.Series([0.9, 0.92, 0.9, 0.92, 0.5, 0.52])
    groups = pd.Series(["sgrpo", "sgrpo", "cispo", "cispo", "dpo", "dpo"])
    twice, once = eta_squared(values, groups), eta_squared(values[[0, 1, 4, 5]], groups[[0, 1, 4, 5]])
    assert twice != pytest.approx(once)


def test_every_test_names_its_unit_of_replication():
    for name, unit in UNITS.items():
        assert unit.split(" ")[0] in {"seeds", "problems", "runs", "methods", "matched"}, name
    template = (ROOT / "analysis" / "templates" / "report.html").read_text()
    # the leaderboards state theirs (seeds × problems, or seeds where a cell has no per-problem outcomes)
    assert "Unit of replication: <strong>{{ unit }}</strong>" in template
    assert "Unit of replication: seeds" in template and "Unit of replication: problems" in template


@pytest.mark.parametrize(("grid", "expected"), [("oxrl_core", {("tiny-s", "cispo"), ("tiny-m", "cispo")}),
                                                ("testbed", set()), ("lora_factorial", set())])  # fmt: skip
def test_on_the_committed_records(grid, expected):
    if not (ROOT / "results" / grid).is_dir():
        pytest.skip("no committed records")
    import analysis

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = analysis.load_runs(ROOT / "results" / grid)
    dups = duplicate_arms(df)
    assert set(zip(dups["scale"], dups["duplicate"])) == expected
    assert dups["identical"].all() and (dups["kept"] == "sgrpo").all()


# ----------------------------------------------------------------- IsoCompute without the confound


def iso_points(
    rewards: dict[tuple[int, int], list[float]], subset: str = "easy", c: int = 4096
) -> pd.DataFrame:
    """(n, B_p) -> reward per seed, at compute ``c``; the learning rate follows √B."""
    rows = [{"run_id": f"{subset}-{n}-{b}-{s}", "subset": subset, "n": n, "B_p": b, "seed": s, "rollouts": c,
             "lr": 1e-4 * ((n * b) / 128) ** 0.5, "r": r} for (n, b), rs in rewards.items() for s, r in enumerate(rs)]  # fmt: skip
    return pd.DataFrame(rows)


def test_fixed_batch_pairs_hold_b_m_and_the_learning_rate():
    from analysis import isocompute_confound as ic

    pts = iso_points({(2, 16): [0.8, 0.7], (8, 4): [0.6, 0.75], (64, 4): [0.3, 0.3]})
    pairs = ic.fixed_batch_pairs(pts, "r")
    assert pairs[["B", "M", "n_small", "n_large", "winner"]].values.tolist() == [
        [32, 128.0, 2, 8, "B_p"],
        [32, 128.0, 2, 8, "n"],
    ]
    assert ic.sign_test(pairs)["B_p_wins"] == 1
    with pytest.raises(ValueError, match="learning rates differ"):
        ic.fixed_batch_pairs(pts.assign(lr=pts["lr"] * (1 + pts["B_p"] / 100)), "r")


def test_the_sign_test_of_15_wins_in_16():
    from analysis import isocompute_confound as ic

    pairs = pd.DataFrame({"winner": ["B_p"] * 15 + ["n"], "reward_B_p": [1.0] * 16, "reward_n": [0.0] * 16})
    assert ic.sign_test(pairs)["p"] == pytest.approx(34 / 2**16)


def test_variance_shares_state_the_imbalance_and_use_the_balanced_part():
    from analysis import isocompute_confound as ic

    pts = iso_points({(2, 4): [0.8, 0.82], (2, 16): [0.6, 0.62], (8, 4): [0.7, 0.72], (8, 16): [0.5, 0.52],
                      (32, 4): [0.2, 0.22]})  # fmt: skip
    v = ic.variance_shares(pts, "r")
    assert v["imbalance"].startswith("unbalanced") and "n = 32 × B_p = 16" in v["imbalance"]
    assert v["balanced"]["n_values"] == [2, 8] and v["balanced"]["B_p"] == pytest.approx(0.8 / 1.0, abs=0.01)
    b = pts["n"] * pts["B_p"]  # at one C, M = C / B: (2, 16) and (8, 4) make the same number of updates
    assert v["all"]["M"] == pytest.approx(eta_squared(pts["r"], b))


def test_matched_updates_find_the_largest_common_curve_point():
    from analysis import isocompute_confound as ic

    rows = []
    for n in (2, 8):
        for c in range(0, 4097, 256):
            rows.append({"run_id": f"r{n}", "n": n, "B_p": 4, "seed": 0, "rollouts": c, "samples_per_problem": 4,
                         "correct_counts": [min(4, n // 2)] * 10})  # fmt: skip
    curves = pd.DataFrame(rows)
    assert ic.common_updates(curves, 2, 8, 4) == 128.0  # n = 8 reaches M = 128 at C = 4,096; n = 2 at 1,024
    rows = ic.matched_updates(curves, 2, 8, 4, k=2)
    assert [(r["kind"], r["C_a"], r["C_b"]) for r in rows] == [
        ("best", 1024.0, 4096.0),
        ("worst", 1024.0, 4096.0),
    ]


def test_versus_base_compares_each_arm_with_its_own_base_point():
    """n = 8 ends with every problem 4/4 right from 1/4 at its base: worst@2 up on all 20 problems; n = 2
    stays at its base: no change, p = 1. Unit: problems."""
    from analysis import isocompute_confound as ic

    rows = [{"run_id": f"r{n}-{s}", "subset": "easy", "n": n, "B_p": 4, "seed": s, "rollouts": c,
             "samples_per_problem": 4, "correct_counts": [4 if (n == 8 and c) else 1] * 20}
            for n in (2, 8) for s in (0, 1) for c in (0, 4096)]  # fmt: skip
    out = {(r["n"], r["kind"]): r for r in ic.versus_base(pd.DataFrame(rows), 4096, k=2)}
    assert out[(8, "worst")]["delta"] == pytest.approx(1.0) and out[(8, "worst")]["up"] == 20
    assert out[(8, "worst")]["p"] < 1e-4 and out[(8, "worst")]["seeds"] == 2
    assert out[(2, "best")]["delta"] == 0 and out[(2, "best")]["p"] == 1.0


def test_versus_control_tests_each_arm_against_its_random_reward_twin():
    """Easy, n = 2: the real reward takes every problem from 1/4 to 3 or 4 of 4 right (worst@2 up by
    0.5-1.0) while the control moves it by 0 or 1 sample; hard, n = 2: both move alike. The easy
    worst@2 claim is decided (unit: seeds, Holm over the two claim tests: p 0.025); the hard best@2
    one is not (p 1).
    An arm the control did not run is left out."""
    from analysis import isocompute_confound as ic

    def curves(moves: dict) -> pd.DataFrame:
        return pd.DataFrame([
            {"run_id": f"{sub}{n}-{s}", "subset": sub, "n": n, "B_p": 4, "seed": s, "rollouts": c,
             "samples_per_problem": 4, "correct_counts": [1 + (moves[(sub, n)][s] if c else 0)] * 10}
            for (sub, n) in moves for s in range(4) for c in (0, 4096)])  # fmt: skip

    real = curves({("easy", 2): [3, 2, 3, 2], ("hard", 2): [1, 0, 1, 0], ("easy", 32): [1, 1, 1, 1]})
    control = curves({("easy", 2): [0, 1, 0, 0], ("hard", 2): [0, 1, 1, 0]})
    out = {(r["subset"], r["kind"]): r for r in ic.versus_control(real, control, 4096, k=2)}
    assert sorted(out) == [("easy", "best"), ("easy", "worst"), ("hard", "best"), ("hard", "worst")]
    easy, hard = out[("easy", "worst")], out[("hard", "best")]
    assert easy["claim"] and hard["claim"] and not out[("easy", "best")]["claim"]
    assert easy["delta"] == pytest.approx(0.75) and easy["control_delta"] == pytest.approx(1 / 24)
    assert easy["seeds"] == easy["control_seeds"] == 4
    assert easy["holm"] < 0.05 and hard["holm"] == pytest.approx(1.0)
    assert "holm" not in out[("easy", "best")]


def test_on_the_committed_isocompute_records():
    from analysis import isocompute as iso
    from analysis import isocompute_confound as ic

    root = ROOT / "results" / "isocompute_warmup10"
    if not root.is_dir():
        pytest.skip("no committed records")
    at = iso.at_compute(iso.load_curves(root), 4096)
    t = ic.sign_test(ic.fixed_batch_pairs(at, "avg_at_4"))
    assert (t["B_p_wins"], t["n_wins"]) == (15, 1) and t["p"] < 0.001
    assert ic.variance_shares(at[at["subset"] == "easy"], "avg_at_4")["all"]["M"] > 0.9
