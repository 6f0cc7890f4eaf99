"""The command line: plans, one-line errors with exit code 2, failures recorded and the grid going on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from oxbench_cli import app

runner = CliRunner()
TESTS = Path(__file__).parent


def write(tmp_path, name, obj) -> Path:
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else yaml.safe_dump(obj))
    return p


def micro_cell(model_dir: str) -> dict:
    return {
        "model": {"name": model_dir},
        "data": {"n_train": 8, "max_new_tokens": 8},
        "train": {"batch_size": 4, "max_steps": 1, "lr": 1e-3},
        "eval": {"n_test": 4, "n_ood": 4, "k": 0, "max_new_tokens": 8},
    }


def grid(model_dir, **over):
    g = {"name": "g", "base": micro_cell(model_dir), "axes": {"method": ["sft"], "seed": [0, 1]}}
    g.update(over)
    return g


def one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    err = result.output.strip()
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err


def test_plan_lists_every_cell(tmp_path, micro_model_dir):
    g = write(tmp_path, "g.yaml", grid(micro_model_dir, axes={"method": ["sft", "dpo"], "seed": [0, 1, 2]}))
    r = runner.invoke(app, ["run", "--grid", str(g), "--plan", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "6 cells" in r.output and "to run 6" in r.output
    assert not (tmp_path / "out").exists()


def test_unknown_method_did_you_mean(tmp_path, micro_model_dir):
    g = write(tmp_path, "g.yaml", grid(micro_model_dir, axes={"method": ["dpoo"]}))
    one_line_error(
        runner.invoke(app, ["run", "--grid", str(g), "--plan"]), "g.yaml", "dpoo", "did you mean 'dpo'"
    )


def test_unknown_key_did_you_mean(tmp_path, micro_model_dir):
    base = micro_cell(micro_model_dir)
    base["train"]["lerning_rate"] = 1.0
    g = write(tmp_path, "g.yaml", grid(micro_model_dir, base=base))
    one_line_error(
        runner.invoke(app, ["run", "--grid", str(g), "--plan"]), "train.lerning_rate", "unknown key"
    )


def test_unknown_axis_did_you_mean(tmp_path, micro_model_dir):
    g = write(tmp_path, "g.yaml", grid(micro_model_dir, axes={"methd": ["sft"]}))
    one_line_error(
        runner.invoke(app, ["run", "--grid", str(g), "--plan"]), "unknown axis 'methd'", "did you mean"
    )


def test_unknown_loss_hyperparameter(tmp_path, micro_model_dir):
    g = write(tmp_path, "g.yaml", grid(micro_model_dir, axes={"method": ["dpo"], "loss.betta": [0.1]}))
    one_line_error(runner.invoke(app, ["run", "--grid", str(g), "--plan"]), "betta", "did you mean 'beta'")


def test_malformed_yaml(tmp_path):
    g = write(tmp_path, "g.yaml", "name: g\naxes: [unclosed\n")
    one_line_error(runner.invoke(app, ["run", "--grid", str(g), "--plan"]), "g.yaml", "malformed YAML")


def test_malformed_run_config(tmp_path):
    """--config shares the grid loader's YAML reader: a syntax error names the file and line."""
    cfg = write(tmp_path, "c.yaml", "method: sft\nmodel: {name: tiny-xs\n")
    one_line_error(runner.invoke(app, ["run", "--config", str(cfg)]), "c.yaml", "malformed YAML", "line")


def test_run_config_that_is_not_a_mapping(tmp_path):
    cfg = write(tmp_path, "c.yaml", "- sft\n- dpo\n")
    one_line_error(runner.invoke(app, ["run", "--config", str(cfg)]), "c.yaml", "must be a non-empty mapping")


def test_missing_grid_file(tmp_path):
    one_line_error(
        runner.invoke(app, ["run", "--grid", str(tmp_path / "nope.yaml")]), "nope.yaml", "not found"
    )


def test_unknown_model(tmp_path):
    cfg = write(tmp_path, "c.yaml", {"method": "sft", "model": {"name": "tiny-xl"}})
    one_line_error(
        runner.invoke(app, ["run", "--config", str(cfg), "--out", str(tmp_path / "out")]),
        "c.yaml",
        "unknown model 'tiny-xl'",
        "did you mean 'tiny-",
    )
    assert not (tmp_path / "out").exists()


def test_unknown_task(tmp_path):
    cfg = write(tmp_path, "c.yaml", {"method": "sft", "task": {"name": "gsm9k"}})
    one_line_error(runner.invoke(app, ["run", "--config", str(cfg)]), "c.yaml", "task.name")


def test_missing_gsm8k_file_names_the_path(tmp_path, micro_model_dir):
    task = {"name": "gsm8k", "path": str(tmp_path / "gone"), "test_path": str(tmp_path / "gone.jsonl")}
    cell = micro_cell(micro_model_dir) | {"method": "sft", "task": task}
    one_line_error(runner.invoke(app, ["run", "--config", str(write(tmp_path, "c.yaml", cell))]), "gone")


def test_row_without_answer_names_file_line_and_field(tmp_path, micro_model_dir):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.jsonl").write_text(
        json.dumps({"question": "q", "answer": "#### 1"}) + "\n" + json.dumps({"question": "q"}) + "\n"
    )
    (tmp_path / "d" / "test.jsonl").write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n")
    cell = micro_cell(micro_model_dir) | {
        "method": "sft",
        "task": {"name": "gsm8k", "path": str(tmp_path / "d")},
    }
    one_line_error(
        runner.invoke(app, ["run", "--config", str(write(tmp_path, "c.yaml", cell))]),
        "train.jsonl",
        "line 2",
        "answer",
    )


@pytest.mark.slow
def test_nan_loss_fails_its_run_and_the_grid_goes_on(tmp_path, micro_model_dir):
    """Two cells in their own processes: the NaN one is recorded as failed, the other finishes, exit 1."""
    g = write(tmp_path, "g.yaml", grid(micro_model_dir, axes={"method": ["nan_loss", "sft"]}))
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def oxbench(*extra: str) -> subprocess.CompletedProcess:
        argv = ["run", "--grid", str(g), "--out", str(tmp_path / "o"), "--plugin", "nan_plugin", *extra]
        return subprocess.run([sys.executable, "-m", "oxbench_cli", *argv], capture_output=True, text=True,
                              env=env, timeout=600)  # fmt: skip

    proc = oxbench()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    recs = {
        json.loads(p.read_text())["method"]: json.loads(p.read_text())
        for p in (tmp_path / "o").rglob("run.json")
    }
    assert recs["sft"]["status"] == "finished"
    assert recs["nan_loss"]["status"] == "failed"
    assert (
        "non-finite loss" in recs["nan_loss"]["error"]
        and recs["nan_loss"]["run_id"] in recs["nan_loss"]["error"]
    )
    assert "failed" in proc.stderr and recs["nan_loss"]["run_id"] in proc.stderr
    # re-running skips the finished cell and retries only the failed one
    proc2 = oxbench("--plan")
    assert "finished 1, to run 1" in proc2.stdout


WORKER_ONLY_BROKEN = """
import sys

from losses import LossSpec
from losses.sft import spec as sft

if getattr(sys.modules["__main__"].__spec__, "name", "") == "oxbench.grid.worker":
    raise ImportError("No module named 'secret_dependency'")  # installed where the grid runs, not its workers

spec = LossSpec(name="broken_sft", fn=sft.fn, paradigm="sft", data="sft", needs_reference=False,
                paper="none", description="sft whose module fails to import in a worker (tests only)")
"""


def test_a_plugin_that_fails_to_import_in_the_worker_says_why(tmp_path, micro_model_dir):
    (tmp_path / "worker_broken.py").write_text(WORKER_ONLY_BROKEN)
    g = write(tmp_path, "g.yaml", grid(micro_model_dir, axes={"method": ["broken_sft"], "seed": [0]}))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    argv = ["run", "--grid", str(g), "--out", str(tmp_path / "o"), "--plugin", "worker_broken"]
    proc = subprocess.run([sys.executable, "-m", "oxbench_cli", *argv], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (rec,) = [json.loads(p.read_text()) for p in (tmp_path / "o").rglob("run.json")]
    assert rec["status"] == "failed"
    for words in ("plugin 'worker_broken' failed to import", "secret_dependency", "in the worker"):
        assert words in rec["error"] and words in " ".join(proc.stderr.split()), (words, rec["error"])
