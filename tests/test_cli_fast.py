"""The command answers without torch when it trains nothing (issue 26, item 4): ``--help``, ``losses``,
a grid's ``--plan`` and every one-line error of bad input import no torch, transformers, DeepSpeed,
datasets or lm-eval (their imports are most of a second each; ``benchmarks/cli_latency.py`` times the
cases). Each case runs the real command in a fresh process and reads ``sys.modules`` after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "deepspeed", "datasets", "lm_eval")
# runs ``oxbench ARGS`` in this process, then prints the exit code and the heavy modules it imported
PROBE = f"""
import json, sys
from oxbench_cli import main
sys.argv = ["oxbench", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print("PROBE " + json.dumps([code, [m for m in {HEAVY!r} if m in sys.modules]]), file=sys.stderr)
"""
BASE = "{train: {batch_size: 4, max_steps: 1}, eval: {n_test: 4, n_ood: 4, k: 0}}"


def probe(*args: str) -> tuple[int, list[str], str]:
    """(exit code, heavy modules imported, the command's stderr without the probe's line)."""
    from losses import registry

    assert registry._index(), "losses/index.json is stale (the CLI falls back to torch): run python -m losses"
    env = {**{k: v for k, v in os.environ.items() if k != "OXBENCH_PLUGINS"}, "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    *err, last = proc.stderr.strip().splitlines() or [""]
    assert last.startswith("PROBE "), proc.stderr
    code, heavy = json.loads(last.removeprefix("PROBE "))
    return code, heavy, "\n".join(err)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["losses"],
        ["losses", "--json"],
        ["run", "--grid", "recipes/quickstart.yaml", "--plan"],
        ["run", "--grid", "recipes/oxrl_core.yaml", "--out", "results", "--plan"],  # lm-eval tasks, bundled
    ],
)
def test_answers_without_torch(args):
    code, heavy, err = probe(*args)
    assert (code, heavy) == (0, []), err


GRIDS = {
    "unknown loss": (f"name: g\nbase: {BASE}\naxes: {{method: [dpoo]}}\n", "did you mean 'dpo'"),
    "unknown hyper-parameter": (
        f"name: g\nbase: {BASE}\naxes: {{method: [dpo], loss.betta: [0.1]}}\n",
        "betta",
    ),
    "hyper-parameter type": (
        f"name: g\nbase: {BASE}\naxes: {{method: [dpo]}}\nmethods: {{dpo: {{loss: {{beta: high}}}}}}\n",
        "hyper-parameter 'beta' must be a finite number",
    ),
    "out of range": (
        "name: g\nbase: {train: {lr: -1.0e-3}}\naxes: {method: [sft]}\n",
        "'train.lr': must be > 0",
    ),
    "NaN": ("name: g\nbase: {train: {lr: .nan}}\naxes: {method: [sft]}\n", "finite number"),
    "unknown key": ("name: g\nbase: {train: {lerning_rate: 1.0}}\naxes: {method: [sft]}\n", "unknown key"),
    "malformed YAML": ("name: g\naxes: [unclosed\n", "malformed YAML"),
    "micro-batches": (
        "name: g\nbase: {train: {batch_size: 3}, online: {prompts_per_batch: 4}}\naxes: {method: [sgrpo]}\n",
        "train.batch_size",
    ),
}


@pytest.mark.parametrize("case", sorted(GRIDS))
def test_a_bad_grid_is_one_line_without_torch(tmp_path, case):
    text, needle = GRIDS[case]
    (tmp_path / "g.yaml").write_text(text)
    code, heavy, err = probe("run", "--grid", str(tmp_path / "g.yaml"), "--plan")
    assert (code, heavy) == (2, []), err
    assert len(err.splitlines()) == 1 and "g.yaml" in err and needle in err, err


@pytest.mark.parametrize(
    "args,needle",
    [
        (["run", "--grid", "{tmp}/nope.yaml", "--plan"], "not found"),
        (["run", "--config", "{tmp}/c.yaml"], "unknown model 'tiny-xl'"),
        (["run", "--grid", "recipes/quickstart.yaml", "--plan", "--workers", "0"], "--workers: must be >= 1"),
    ],
)
def test_other_bad_input_is_one_line_without_torch(tmp_path, args, needle):
    (tmp_path / "c.yaml").write_text("method: sft\nmodel: {name: tiny-xl}\n")
    code, heavy, err = probe(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert (code, heavy) == (2, []), err
    assert len(err.splitlines()) == 1 and needle in err, err


def test_the_probe_sees_torch_when_the_command_imports_it():
    """The check can fail: ``losses check`` loads a loss (and torch) to run its contract."""
    code, heavy, err = probe("losses", "check", "sft", "--fast")
    assert code == 0 and "torch" in heavy, err


def test_a_rank_imports_deepspeed_without_mlflow_and_mlflow_still_imports():
    """Every cell and rank imports DeepSpeed, whose autotuner imports mlflow at import time (about 1 s,
    when the ``track`` extra is installed) to log autotuning runs oxbench never makes.
    ``import_deepspeed`` skips that import; live tracking can still import mlflow afterwards."""
    code = (
        "import sys; from oxbench.engine.distributed import import_deepspeed; import_deepspeed(); "
        "print('mlflow' in sys.modules); import deepspeed.autotuning.autotuner as a; print(a.has_mlflow); "
        "import importlib.util; print(importlib.util.find_spec('mlflow') is None or bool(__import__('mlflow')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.stdout.split()[-3:] == ["False", "False", "True"], out.stdout[-2000:] + out.stderr[-2000:]


def test_a_cell_s_line_gives_flexible_and_verified_beside_strict_and_names_a_split_that_is_not_test():
    from oxbench_cli.app import scores

    m = {"accuracy": 0.0, "accuracy_flexible": 0.593, "accuracy_verified_flexible": 0.5833}
    tuned = {"metrics": m, "config": {"eval": {"split": "validation"}}}
    assert scores(tuned) == "accuracy 0.0%, flexible 59.3%, verified-flexible 58.3% (validation)"
    assert scores({"metrics": {"accuracy": 0.5}, "config": {}}) == "accuracy 50.0%"
