"""Shipped bases (issue 26): a pre-trained tiny base found by its key, checked by SHA-256 before use,
installed into the cache instead of pre-training; ``oxbench pretrain SCALE [--check]``."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from oxbench.models import pretrain, shipped
from oxbench.models.pretrain import PretrainConfig, ensure_pretrained
from oxbench.models.tiny import ModelError
from oxbench_cli import app

TINY = {"updates": 2, "batch_size": 4, "n_examples": 40, "lr": 1e-3}


@pytest.fixture
def bases(tmp_path, monkeypatch):
    monkeypatch.setattr(shipped, "BASES", tmp_path / "bases")
    return tmp_path / "bases"


def _cfg() -> PretrainConfig:
    return PretrainConfig(scale="tiny-xs", **TINY)


def test_a_shipped_base_is_installed_instead_of_pre_training(bases, tmp_path, monkeypatch):
    built = ensure_pretrained(_cfg(), verbose=False)
    shipped.ship(built, _cfg().key())
    monkeypatch.setenv("OXBENCH_CACHE", str(tmp_path / "fresh-cache"))
    monkeypatch.setattr(pretrain, "_pretrain", lambda *a, **k: pytest.fail("pre-trained a shipped base"))
    assert not (bases / _cfg().key() / ".seal.json").exists()  # the cache's seal, not part of the base
    got = ensure_pretrained(_cfg(), verbose=False)
    assert got != built and shipped.same_weights(got, built) == (True, 0.0)
    assert (got / "pretrain.json").read_text() == (built / "pretrain.json").read_text()


def test_a_shipped_file_that_does_not_match_its_digest_is_one_line(bases, tmp_path, monkeypatch):
    built = ensure_pretrained(_cfg(), verbose=False)
    d = shipped.ship(built, _cfg().key())
    weights = d / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    monkeypatch.setenv("OXBENCH_CACHE", str(tmp_path / "fresh-cache"))
    with pytest.raises(ModelError, match=r"model.safetensors has SHA-256 .*, expected") as exc:
        ensure_pretrained(_cfg(), verbose=False)
    assert len(str(exc.value).splitlines()) == 1


def test_keys_that_do_not_ship_are_pre_trained(bases):
    assert shipped.shipped(_cfg().key()) is None
    assert (ensure_pretrained(_cfg(), verbose=False) / "pretrain.json").exists()


def test_the_pretrain_command_ships_then_checks_bit_for_bit(bases, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "r", "base": {"model": {"name": "tiny-xs", "pretrain": TINY}},
                                      "axes": {"method": ["sft"]}}))  # fmt: skip
    runner = CliRunner()
    shipped_run = runner.invoke(app, ["pretrain", "tiny-xs", "--recipe", str(recipe)])
    assert shipped_run.exit_code == 0, shipped_run.output
    assert len(list(bases.iterdir())) == 1
    check = runner.invoke(app, ["pretrain", "tiny-xs", "--recipe", str(recipe), "--check"])
    assert check.exit_code == 0 and "equals the shipped base bit for bit" in check.output, check.output
    missing = runner.invoke(app, ["pretrain", "tiny-s", "--recipe", str(recipe), "--check"])
    assert missing.exit_code == 2 and "no cell at scale 'tiny-s'" in missing.output
