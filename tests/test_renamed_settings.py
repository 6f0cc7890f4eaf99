"""Renamed settings (``task.steps`` -> ``task.n_ops``, ``model.pretrain.steps`` -> ``updates``,
``online.steps`` -> ``rounds``, the record's ``steps`` -> ``optimizer_steps``): the new names are what
records show, the old spelling still reads, and every run_id and cache key is what it was before the
rename, so committed studies and caches stay valid."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from oxbench.config import RunConfig, format_validation_error
from oxbench.grid.record import RunRecord
from oxbench.grid.shared import shared_key
from oxbench.grid.spec import expand, load_grid
from oxbench.models.pretrain import PretrainConfig

ROOT = Path(__file__).resolve().parents[1]

# computed with the code just before the rename (88e7504), from the committed recipes
BEFORE = {
    ("quickstart", "sft", 0): ("tiny-s-sft-s0-e086ae4ce0", "87d9d7e0754f"),
    ("quickstart", "dpo", 0): ("tiny-s-dpo-s0-74b91fbf55", "c3e3e0940b2f"),
    ("quickstart", "sgrpo", 0): ("tiny-s-sgrpo-s0-c5e4740770", "87d9d7e0754f"),
}


def _old_paths(c: RunConfig) -> RunConfig:
    """A cell with the rollout and evaluation paths (and evaluation batch) the quickstart ran on before the
    fast defaults."""
    online = c.online.model_copy(update={"backend": "hf", "share_prompt": False})
    return c.model_copy(
        update={"online": online, "eval": c.eval.model_copy(update={"backend": "hf", "batch_size": 128})}
    )


def test_run_ids_and_shared_keys_are_unchanged_by_the_rename():
    cells = {(c.grid, c.method, c.seed): c for c in expand(load_grid(ROOT / "recipes/quickstart.yaml"))}
    for key, (run_id, shared) in BEFORE.items():
        assert _old_paths(cells[key]).run_id() == run_id and shared_key(cells[key]) == shared


def test_old_and_new_spellings_are_one_config():
    old = RunConfig(task={"steps": 3}, online={"steps": 5}, model={"pretrain": {"steps": 7}})
    new = RunConfig(task={"n_ops": 3}, online={"rounds": 5}, model={"pretrain": {"updates": 7}})
    assert old == new and old.run_id() == new.run_id()
    assert (new.task.n_ops, new.online.rounds, new.model.pretrain.updates) == (3, 5, 7)
    dumped, hashed = new.model_dump(), new.identity()
    assert dumped["online"]["rounds"] == 5 and "steps" not in dumped["online"]  # records: new names
    assert hashed["online"]["steps"] == 5 and hashed["task"]["steps"] == 3  # hashes: old names
    assert RunConfig.model_validate(dumped) == new  # a record's config reads back


def test_committed_records_recompute_their_own_run_id():
    """Records written before the rename carry the old names in their config."""
    for path in sorted((ROOT / "results" / "testbed").glob("*/run.json"))[:3]:
        rec = json.loads(path.read_text())
        assert "steps" in rec["config"]["online"]  # written before the rename
        cfg = RunConfig.model_validate(RunConfig.with_historic_defaults(rec["config"]))
        assert cfg.run_id() == rec["run_id"] == path.parent.name
        assert RunRecord.model_validate(rec).optimizer_steps == rec["steps"]


def test_both_spellings_at_once_is_an_error_naming_both():
    with pytest.raises(ValidationError) as exc:
        RunConfig(online={"steps": 3, "rounds": 4})
    line = format_validation_error(exc.value, "g.yaml")
    assert "'rounds' is given twice" in line and "'steps'" in line


def test_a_misspelt_new_name_suggests_it():
    with pytest.raises(ValidationError) as exc:
        RunConfig(online={"round": 4})
    assert "did you mean 'rounds'" in format_validation_error(exc.value, "g.yaml")


def test_an_axis_under_either_name_names_its_arm():
    for path in ("online.steps", "online.rounds"):
        cfg = RunConfig(online={"rounds": 6}, arm_keys=[path])
        assert cfg.arm()[path] == 6


def test_pretrain_cache_key_is_unchanged_by_the_rename():
    """8af21e12fd15: this config's key since before the answer-style knob (a8d5fd6)."""
    task = {"name": "arith", "n_ops": 2, "max_operand": 12}
    assert PretrainConfig(scale="tiny-m", task=task).key() == "8af21e12fd15"
    assert PretrainConfig(scale="tiny-m", task=task, updates=601).key() != "8af21e12fd15"


def test_the_diagnostics_cap_is_diagnostic_is_cap_and_keeps_its_hash():
    """``online.is_cap`` (the diagnostics' importance-weight cap) is ``online.diagnostic_is_cap``, so it is
    not mistaken for ``loss.is_cap`` (the corrections' cap). Added after runs were recorded, it enters
    hashes, under its old name, only away from its default."""
    old, new = RunConfig(online={"is_cap": 3.0}), RunConfig(online={"diagnostic_is_cap": 3.0})
    assert old == new and old.run_id() == new.run_id() and new.online.diagnostic_is_cap == 3.0
    assert new.identity()["online"]["is_cap"] == 3.0 and "diagnostic_is_cap" not in new.identity()["online"]
    assert (
        new.model_dump()["online"]["diagnostic_is_cap"] == 3.0 and "is_cap" not in new.model_dump()["online"]
    )
    default = RunConfig()
    assert "is_cap" not in default.identity()["online"] and default.online.diagnostic_is_cap == 2.0
    assert RunConfig(online={"is_cap": 2.0}).run_id() == default.run_id()
    with pytest.raises(ValidationError) as exc:
        RunConfig(online={"is_cap": 3.0, "diagnostic_is_cap": 3.0})
    assert "'diagnostic_is_cap' is given twice" in format_validation_error(exc.value, "g.yaml")
    for spelling in ("diagnostic_is_cap", "is_cap"):
        with pytest.raises(ValidationError) as exc:
            RunConfig(online={spelling: 0.0})
        line = format_validation_error(exc.value, "g.yaml")
        assert (
            f"online.{spelling}" in line
            and "diagnostic_is_cap" in line
            and "must be a finite number > 0" in line
        )


def test_committed_staleness_records_recompute_their_run_id_after_the_cap_rename():
    for path in sorted((ROOT / "results" / "staleness").glob("*/run.json"))[:3]:
        rec = json.loads(path.read_text())
        assert rec["config"]["online"]["is_cap"] == 2.0  # written before the rename
        cfg = RunConfig.model_validate(RunConfig.with_historic_defaults(rec["config"]))
        assert cfg.online.diagnostic_is_cap == 2.0
        assert cfg.run_id() == rec["run_id"] == path.parent.name


def test_every_committed_record_recomputes_its_run_id_with_historic_defaults():
    """Settings whose default became the fast path (online.backend, online.share_prompt, eval.backend)
    read back at their historic values from records that predate them: all 500-odd committed records
    recompute their own run_id, and a config written today keeps its new defaults."""
    records = sorted((ROOT / "results").rglob("run.json"))
    assert len(records) > 400
    for path in records:
        rec = json.loads(path.read_text())
        cfg = RunConfig.model_validate(RunConfig.with_historic_defaults(rec["config"]))
        assert cfg.run_id() == rec["run_id"], path
    now = RunConfig(method="sgrpo").model_dump()
    assert RunConfig.with_historic_defaults(now)["online"]["backend"] == "lean"
