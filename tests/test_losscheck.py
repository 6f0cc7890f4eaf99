"""A contributor's loop (issue 17): ``oxbench losses new`` writes a loss package that passes
``oxbench losses check`` and its own hand-computed test; the checker passes every built-in and the
example plugin, and names the rule each deliberately broken spec breaks, one line each."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import losses
from oxbench.grid.executors import DIST_VARS
from oxbench.losscheck import RULES, check

ROOT = Path(__file__).resolve().parents[1]
BUILTINS = sorted(
    n for n, eps in losses.registry._entry_points().items() if eps[0].value.startswith("losses.")
)
FAST = [r for r in RULES if r != "trains"]


def clean_env() -> dict:
    """This environment without the launcher variables an in-process test's init_distributed left (its
    MASTER_PORT may still be held by this process)."""
    return {k: v for k, v in os.environ.items() if k not in DIST_VARS}


def oxbench(*args, cwd=None, pythonpath=None):
    env = clean_env()
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "oxbench_cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)  # fmt: skip


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_keeps_the_contract(name):
    assert check(losses.get(name), FAST) == []


@pytest.mark.slow
@pytest.mark.parametrize("target", ["dpo", "sgrpo"])
def test_the_full_check_trains_a_builtin(target):
    r = oxbench("losses", "check", target)
    assert r.returncode == 0 and "every rule holds" in r.stdout and "trains" in r.stdout, r.stderr[-2000:]


@pytest.mark.slow
def test_the_example_plugin_keeps_the_contract():
    r = oxbench(
        "losses",
        "check",
        "oxbench_plugin_example:spec",
        pythonpath=ROOT / "examples" / "oxbench-plugin-example",
    )
    assert r.returncode == 0, r.stderr[-2000:]


BROKEN = """
import torch
from losses import LossOutput, LossSpec
from losses.dpo import spec as dpo


def _pairs(fn, name, **kw):
    return LossSpec(name=name, fn=fn, paradigm="offline", data="pairs", needs_reference=kw.pop("ref", True),
                    defaults=kw.pop("defaults", {"beta": 0.1}), **kw)


def nan_metric(inputs, *, beta=0.1):
    out = dpo.fn(inputs, beta=beta)
    return LossOutput(out.loss, {"margin": inputs.chosen_logps.mean() / 0.0 * 0.0})


def nan_loss(inputs, *, beta=0.1):
    return LossOutput(dpo.fn(inputs, beta=beta).loss * float("nan"), {})


def noisy(inputs, *, beta=0.1):
    return LossOutput(dpo.fn(inputs, beta=beta).loss + torch.rand(()), {})


def no_ref(inputs, *, beta=0.1):
    return LossOutput(-(beta * (inputs.chosen_logps - inputs.rejected_logps)).sigmoid().log().mean(), {})


def positional(inputs, beta=0.1):
    return dpo.fn(inputs, beta=beta)


def frozen(inputs, *, beta=0.1):
    return LossOutput(inputs.chosen_logps.sum() * 0.0, {})


nan_metric_spec = _pairs(nan_metric, "nan_metric")
nan_spec = _pairs(nan_loss, "nan_loss")
noisy_spec = _pairs(noisy, "noisy")
unused_ref_spec = _pairs(no_ref, "no_ref")
positional_spec = _pairs(positional, "positional")
frozen_spec = _pairs(frozen, "frozen")
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "attr,rule,why",
    [
        ("nan_metric_spec", "metrics", "metric 'margin' is nan on random inputs"),
        ("nan_spec", "finite", "the loss is nan on random inputs"),
        ("noisy_spec", "deterministic", "two calls on the same inputs gave"),
        ("unused_ref_spec", "capabilities", "needs_reference is set but the loss reads no ref_* field"),
        ("positional_spec", "signature", "hyper-parameters must be keyword-only (after *): beta"),
        ("frozen_spec", "trains", "three trainer steps left every parameter unchanged"),
    ],
)
def test_a_broken_spec_is_one_line_naming_the_rule(tmp_path, attr, rule, why):
    (tmp_path / "broken_losses.py").write_text(BROKEN)
    fast = [] if rule == "trains" else ["--fast"]  # the engine's three steps only where they are the point
    r = oxbench("losses", "check", f"broken_losses:{attr}", *fast, pythonpath=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    lines = [line for line in r.stderr.splitlines() if line.startswith("broken")]
    assert any(f": {rule}: " in line and why in line for line in lines), r.stderr[-2000:]


def test_a_target_that_is_not_a_spec_is_a_one_line_error(tmp_path):
    r = oxbench("losses", "check", "os:path")
    assert (
        r.returncode == 2 and "not a losses.LossSpec" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    )


@pytest.mark.slow
def test_the_readme_walkthrough_scaffolds_checks_and_tests_a_new_loss(tmp_path):
    """losses/README.md's walkthrough, run as written (its lines up to the install): the new loss
    passes the whole contract and its own hand-computed test."""
    text = (ROOT / "losses" / "README.md").read_text()
    block = re.search(r"<!-- walkthrough -->\n```bash\n(.*?)```", text, re.S).group(1)
    lines = [
        line.split("  #")[0].strip()
        for line in block.splitlines()
        if line.strip() and not line.startswith("pip ")
    ]
    env = {**clean_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for line in lines:
        r = subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600
        )
        assert r.returncode == 0, f"{line}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}"
    assert (tmp_path / "plugins" / "oxbench-my-margin" / "pyproject.toml").read_text().count(
        "my_margin = "
    ) == 1
    r = oxbench("losses", "new", "dpo", "--dir", str(tmp_path))
    assert r.returncode == 2 and "taken by a registered loss" in r.stderr
    r = oxbench("losses", "new", "my_margin", "--dir", str(tmp_path / "plugins"))
    assert r.returncode == 2 and "already exists" in r.stderr
