"""The pre-registered staleness model (docs/staleness_model.md, analysis/staleness_model.py): its record
rule, its estimate of each lag's effect at matched η, and the verdict its bootstrap gives."""

from __future__ import annotations

import json

import numpy as np
from run_records import run_record, write_run

from analysis import staleness_model as M

PROBLEMS = 50
COMMON = {"paradigm": "online", "scale_params": 1, "metrics": {"accuracy": 0.0}}


def study(root, lift: dict[int, float], *, seeds: int = 4) -> None:
    """Coupled-clip runs at two η x S in {0, 1, 2, 4, 8}: problem q is solved when its difficulty is below
    0.5 + lift[S] (+ 0.1 at the higher η), one problem flipped per run (seed noise); one run of another
    correction that the rule must leave out."""
    rng = np.random.default_rng(0)
    hard = rng.random(PROBLEMS)
    for lr, bump in ((2e-4, 0.0), (4e-4, 0.1)):
        for s in (0, 1, 2, 4, 8):
            for seed in range(seeds):
                solved = hard < 0.5 + lift.get(s, 0.0) + bump
                solved[rng.integers(PROBLEMS)] ^= True
                cfg = {
                    "model": {"name": "tiny-m"},
                    "train": {"lr": lr},
                    "online": {"source": "delayed", "staleness": s, "rounds": 40},
                    "loss": {},
                }
                rec = run_record("sgrpo", "tiny-m", seed, run_id=f"r-{lr}-{s}-{seed}", config=cfg, **COMMON)
                outs = [
                    {"id": f"q{q}", "split": "test", "correct": False, "correct_flexible": bool(v)}
                    for q, v in enumerate(solved)
                ]
                path = write_run(root, rec, outcomes=outs)
                (path / "metrics.jsonl").write_text(
                    json.dumps({"clip_frac": 0.1 * s, "kl_behaviour": 0.01}) + "\n"
                )
    other = run_record(
        "sgrpo",
        "tiny-m",
        0,
        run_id="decoupled",
        **COMMON,
        config={
            "model": {"name": "tiny-m"},
            "train": {"lr": 2e-4},
            "loss": {"is_correction": "decoupled"},
            "online": {"source": "delayed", "staleness": 1, "rounds": 40},
        },
    )
    write_run(
        root, other, outcomes=[{"id": "q0", "split": "test", "correct": True, "correct_flexible": True}]
    )


def test_the_rule_and_the_estimate(tmp_path):
    study(tmp_path, {1: 0.2, 2: 0.2})
    runs, y = M.load(tmp_path)
    assert len(runs) == 40 and "decoupled" not in set(runs["run_id"]) and y.shape == (40, PROBLEMS)
    gamma = dict(zip(M.LAGS, M.fit(runs, y)))
    assert gamma[1] > 0.1 and gamma[2] > 0.1 and abs(gamma[8]) < 0.05  # the lift, at matched η
    table = M.verdicts(runs, y, n_boot=300).set_index("S")
    assert table.loc[1, "verdict"] == "keeps more skill than on-policy" and table.loc[1, "ci_low"] > 0
    assert table.loc[8, "verdict"] == "not distinguishable from on-policy at these budgets"
    assert (table["unit"] == "seeds × problems").all()
    mech = M.mechanism(runs).set_index(["S", "lr"])
    assert mech.loc[(4, 2e-4), "clip_frac"] == 0.4


def test_a_gain_on_few_problems_is_not_shown(tmp_path):
    """A lift that moves 2 problems of 50 in every seed alike: seed noise alone would call it certain,
    the problems do not carry it."""
    study(tmp_path, {1: 0.04})
    runs, y = M.load(tmp_path)
    table = M.verdicts(runs, y, n_boot=300).set_index("S")
    assert table.loc[1, "verdict"] == "not distinguishable from on-policy at these budgets"
