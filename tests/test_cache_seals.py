"""Cached artefacts are checked on every use (issue 37): each one (a pre-trained base, a reference cache,
self-play data, difficulty bins, base evaluations) is sealed when made with each file's SHA-256 and
stamp; a later use trusts an unchanged stamp, hashes a changed one, and builds again whatever no longer
matches, naming it in one line. Altered cached weights never run under the key of the cached ones."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from test_cli import write
from test_gsm8k import GSM8K_DIR, needs_gsm8k
from typer.testing import CliRunner

from oxbench.config import RunConfig
from oxbench.grid.runs import run_dir
from oxbench.models.loading import pretrain_config
from oxbench.models.pretrain import pretrain_dir
from oxbench.utils import cache_hit, seal, unseal
from oxbench_cli import app


def test_a_seal_trusts_the_stamp_and_hashes_a_changed_one(tmp_path):
    f = tmp_path / "data.json"
    f.write_text('{"a": 1}')
    assert unseal(f) is not None and "not sealed" in unseal(f)
    seal(f)
    assert unseal(f) is None
    os.utime(f, ns=(1, 1))  # touched: the same bytes pass by their hash
    assert unseal(f) is None
    f.write_text('{"a": 2}')  # the same size, other bytes
    assert "changed since it was cached" in unseal(f)
    d = tmp_path / "base"
    d.mkdir()
    (d / "w.bin").write_bytes(b"\x00" * 64)
    seal(d)
    assert unseal(d) is None
    (d / "extra").write_text("x")
    assert "sealed" in unseal(d)
    (d / "extra").unlink()
    assert cache_hit(d)
    with open(d / "w.bin", "r+b") as fh:
        fh.write(b"\x01")
    assert not cache_hit(d) and not d.exists()  # removed, to be built again


def test_altered_cached_weights_are_rebuilt_not_trained_on(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("OXBENCH_CACHE", str(cache))
    quickstart = yaml.safe_load((Path(__file__).parent.parent / "recipes" / "quickstart.yaml").read_text())[
        "base"
    ]
    cell = {  # the quickstart's shipped base and task
        "method": "sft",
        "model": quickstart["model"],
        "task": quickstart["task"],
        "data": {"n_train": 8, "max_new_tokens": 8},
        "train": {"batch_size": 4, "max_steps": 1, "lr": 1e-4},
        "eval": {"n_test": 4, "n_ood": 0, "k": 0, "max_new_tokens": 8},
    }
    path = write(tmp_path, "c.yaml", cell)
    cfg = RunConfig(**yaml.safe_load(path.read_text()))
    args = ["run", "--config", str(path), "--out", str(tmp_path / "out")]
    runner = CliRunner()
    assert runner.invoke(app, args).exit_code == 0
    d = run_dir(tmp_path / "out", cfg.grid, cfg.run_id())
    first = json.loads((d / "run.json").read_text())
    weights = pretrain_dir(pretrain_config(cfg)) / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-64:] = bytes(64)  # altered in place, the same size
    weights.write_bytes(bytes(blob))
    again = runner.invoke(app, [*args, "--rerun"])
    assert again.exit_code == 0, again.output
    assert "model.safetensors changed since it was cached" in again.output and "OXBENCH_CACHE" in again.output
    second = json.loads((d / "run.json").read_text())
    assert second["metrics"]["final_loss"] == first["metrics"]["final_loss"]  # trained on the real base
    assert unseal(weights.parent) is None


@needs_gsm8k
def test_a_record_trained_on_other_bytes_is_stale_and_runs_again(tmp_path, micro_model_dir):
    """A data file edited in place: the records trained on it are marked stale by ``--plan`` and
    ``status``, and ``run`` trains them again (they were kept as finished before)."""
    data = tmp_path / "gsm8k"
    data.mkdir()
    for split, n in (("train", 8), ("test", 4)):
        lines = (GSM8K_DIR / f"{split}.jsonl").read_text().splitlines()[:n]
        (data / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    g = {
        "name": "g",
        "base": {
            "model": {"name": micro_model_dir},
            "task": {"name": "gsm8k", "path": str(data)},
            "data": {"n_train": 8, "max_new_tokens": 8},
            "train": {"batch_size": 4, "max_steps": 1, "lr": 1e-3},
            "eval": {"n_test": 4, "n_ood": 0, "k": 0, "max_new_tokens": 8},
        },
        "axes": {"method": ["sft"]},
    }
    path = write(tmp_path, "g.yaml", g)
    runner, out = CliRunner(), tmp_path / "out"
    args = ["run", "--grid", str(path), "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    (rec_path,) = (out / "g").glob("*/run.json")
    first = json.loads(rec_path.read_text())
    assert set(first["data_files"]) == {"train", "test"}
    train = (data / "train.jsonl").read_text().replace("####", "#### 1", 1)  # one answer edited in place
    (data / "train.jsonl").write_text(train)
    plan = runner.invoke(app, [*args, "--plan"])
    assert "to run 1" in plan.output and "stale, trained on data that has changed since: 1" in plan.output
    status = runner.invoke(app, ["status", str(out / "g")], env={"COLUMNS": "300"})
    assert "stale: its train data changed since it ran" in status.output, status.output
    assert runner.invoke(app, args).exit_code == 0
    second = json.loads(rec_path.read_text())
    assert second["data_files"]["train"] != first["data_files"]["train"]
    assert second["data_files"]["test"] == first["data_files"]["test"]
    assert "to run 0" in runner.invoke(app, [*args, "--plan"]).output
