"""The tuning protocol (issue 41, item 1; oxbench.grid.tune): the sweep, the tuning cells (validation
only), the pick rule, the grid file's checks, and a tuned grid run end to end and resumed."""

from __future__ import annotations

import json

import pytest
import yaml
from run_records import run_record
from test_executors import oxbench, records

from oxbench.config import RunConfig
from oxbench.grid import tune
from oxbench.grid.runs import run_dir, write_record
from oxbench.grid.spec import GridError, GridFile, expand, tuned_cells, tuning_cells


def spec(**sweep) -> tune.TuneSpec:
    return tune.TuneSpec(seeds=[100], sweep=sweep or {"all": {"train.lr": [0.5, 1.0, 2.0]}})


def test_a_sweep_scales_each_cell_s_own_values_and_skips_what_a_loss_lacks():
    s = spec(all={"train.lr": [0.5, 2.0]}, offline={"loss.beta": [0.5, 2.0]})
    dpo = RunConfig(method="dpo", train={"lr": 1e-5})
    assert tune.points(s, dpo) == [
        {"loss.beta": 0.05, "train.lr": 5e-6},
        {"loss.beta": 0.05, "train.lr": 2e-5},
        {"loss.beta": 0.2, "train.lr": 5e-6},
        {"loss.beta": 0.2, "train.lr": 2e-5},
    ]
    sft = RunConfig(method="sft", train={"lr": 1e-5})  # no beta: swept on the rate alone
    assert tune.points(s, sft) == [{"train.lr": 5e-6}, {"train.lr": 2e-5}]
    online = RunConfig(
        method="sgrpo", train={"lr_scaling": {"rule": "sqrt", "base_lr": 1e-5, "base_batch": 128}}
    )
    (low, _) = tune.points(spec(all={"train.lr": [0.5, 2.0]}), online)
    assert tune.point_values(online, low) == {"train.lr_scaling.base_lr": 5e-6}  # a rule sets the rate


def test_the_pick_is_the_best_mean_and_a_tie_goes_to_the_smaller_step():
    a, b, c = {"train.lr": 1e-5}, {"train.lr": 3e-5}, {"train.lr": 3e-6}
    rule = spec()
    assert tune.pick(rule, [(a, [0.5, 0.7]), (b, [0.6, 0.62]), (c, [])])["point"] == b
    assert tune.pick(rule.model_copy(update={"tie": 0.02}), [(a, [0.5, 0.7]), (b, [0.6, 0.62])])["point"] == a
    assert tune.pick(rule, [(a, []), (b, [])]) is None


def test_an_arm_is_picked_once_all_its_tuning_cells_have_ended(tmp_path):
    """Before any tuning record: every arm pending, its final cells waiting; once its cells have ended,
    picked from their records (the finished ones), and its cells at the pick."""
    grid = GridFile(
        name="w",
        base={"train": {"lr": 1e-5}, "eval": {"n_test": 4, "n_ood": 0}},
        axes={"method": ["sft"], "seed": [0, 1]},
        tune={"seeds": [100], "metric": "accuracy", "sweep": {"all": {"train.lr": [0.5, 2.0]}}},
    )
    ready, state, waiting = tuned_cells(grid, tmp_path)
    assert ready == [] and len(waiting) == 2 and [a["status"] for a in state.values()] == ["pending"]
    low, high = tuning_cells(grid)
    for cell, status in ((low, "failed"), (high, "finished")):
        rec = run_record("sft", "tiny-xs", 100, status, run_id=cell.run_id(), grid=cell.grid,
                         metrics={"accuracy": 0.25} if status == "finished" else {}, error="x" * (status == "failed"))  # fmt: skip
        write_record(run_dir(tmp_path, cell.grid, cell.run_id()), rec)
    ready, state, waiting = tuned_cells(grid, tmp_path)
    (arm,) = state.values()
    assert arm["status"] == "picked" and arm["point"] == {"train.lr": 2e-5} and waiting == []
    assert [c.train.lr for c in ready] == [2e-5, 2e-5] and {c.seed for c in ready} == {0, 1}


def test_tuning_cells_read_the_validation_split_only_and_fresh_seeds():
    grid = GridFile(
        name="b",  # the builder: the grid's own cells, so a method's block and the axes hold
        base={"train": {"lr": 1e-5}, "eval": {"n_test": 4, "n_ood": 4}},
        axes={"method": ["sft", "dpo"], "seed": [0, 1]},
        tune={"seeds": [100, 101], "sweep": {"all": {"train.lr": [0.5, 2.0]}}},
    )
    cells = expand(grid)
    made = tuning_cells(grid)
    assert len(made) == 2 * 2 * 2  # arms x points x tuning seeds
    assert {c.grid for c in made} == {"b_tune"} and {c.seed for c in made} == {100, 101}
    assert all(tune.tuning_leak({"config": c.model_dump(mode="json")}) is None for c in made)
    assert "not 'validation'" in tune.tuning_leak({"config": cells[0].model_dump(mode="json")})
    with pytest.raises(GridError, match=r"tune.seeds: \[1\] are seeds of the grid too"):
        expand(grid.model_copy(update={"tune": tune.TuneSpec(seeds=[1], sweep={"all": {"train.lr": [1.0]}})}))
    with pytest.raises(GridError, match="tune.sweep.kto: not 'all', a paradigm"):
        expand(grid.model_copy(update={"tune": tune.TuneSpec(seeds=[9], sweep={"kto": {"train.lr": [1.0]}})}))
    with pytest.raises(ValueError, match="only train.lr and loss"):
        tune.TuneSpec(seeds=[9], sweep={"all": {"train.batch_size": [1.0]}})


@pytest.mark.slow
def test_a_tuned_grid_picks_on_validation_and_runs_the_pick_on_test(tmp_path, micro_model_dir):
    """One method × two rates × one tuning seed, then the method at its pick on the grid's seed; the
    tuning records hold validation rows only; a second look finds nothing to do (the pending-then-picked
    states from records: test_an_arm_is_picked_once_all_its_tuning_cells_have_ended)."""
    grid = {
        "name": "tb",
        "base": {"model": {"name": micro_model_dir}, "data": {"n_train": 8, "max_new_tokens": 8},
                 "train": {"batch_size": 4, "max_steps": 1, "lr": 1e-3},
                 "eval": {"n_test": 4, "n_ood": 4, "k": 0, "max_new_tokens": 8}},
        "axes": {"method": ["sft"], "seed": [0]},
        "tune": {"seeds": [7], "metric": "accuracy", "sweep": {"all": {"train.lr": [0.5, 2.0]}}},
    }  # fmt: skip
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(grid))
    out = tmp_path / "out"
    ran = oxbench("run", "--grid", str(path), "--out", str(out))
    assert ran.returncode == 0, ran.stderr[-3000:]
    tuned, final = records(out / "tb_tune"), records(out / "tb")
    assert len(tuned) == 2 and len(final) == 1
    for run_id, rec in tuned.items():
        assert rec["status"] == "finished" and tune.tuning_leak(rec) is None
        ids = [
            json.loads(x)["id"] for x in (out / "tb_tune" / run_id / "eval.jsonl").read_text().splitlines()
        ]
        assert ids and all("-validation-" in i for i in ids), ids
    picks = json.loads((out / "tb_tune" / "picks.json").read_text())
    for rec in final.values():
        (arm,) = [p for p in picks.values() if p["method"] == rec["method"]]
        assert arm["status"] == "picked" and rec["config"]["train"]["lr"] == arm["point"]["train.lr"]
    again = oxbench("run", "--grid", str(path), "--out", str(out), "--plan")
    assert "tuning: 2 cells" in again.stdout and "finished 1, to run 0" in again.stdout, again.stdout[-2000:]
