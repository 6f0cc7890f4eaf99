"""The loss registry as a plugin system: names, errors, the ``oxbench losses`` CLI, and a third-party
package (examples/oxbench-plugin-example) published through an entry point and used in a grid."""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from typer.testing import CliRunner

import losses
import losses.registry as registry
from losses._families import pairs_spec
from oxbench_cli import app

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "oxbench-plugin-example"
BUILTINS = sorted(
    """
    sft rft dpo ipo cdpo robust_dpo hinge exo nca bco sppo aot aot_unpaired apo_zero apo_down discopop
    ln_dpo dpop rdpo odpo betadpo caldpo fdpo wpo ld_dpo tdpo focalpo gpo dposhift drdpo chipo rpo sampo
    tr_dpo simpo cpo orpo alphapo rrhf kto bco_unpaired online_dpo spin sgrpo grpo dr_grpo dapo gspo cispo rloo
    reinforce_pp ppo
""".split()
)
METADATA_KEYS = {"name", "paradigm", "data", "needs_reference", "defaults", "paper", "version"}


def plugin_names() -> set[str]:
    """Installed third-party losses: entry points outside this repository's ``losses`` package."""
    eps = registry._entry_points()
    return {n for n, found in eps.items() if not any(ep.value.startswith("losses.") for ep in found)}


def fake_ep(name: str, value: str, dist: str, load) -> SimpleNamespace:
    """Quacks like importlib.metadata.EntryPoint as far as the registry looks."""
    return SimpleNamespace(name=name, value=value, dist=SimpleNamespace(name=dist), load=load)


def with_fake_entry_points(monkeypatch, extra: dict[str, list]) -> None:
    real = registry._entry_points
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real(), **extra})


# --------------------------------------------------------------------------- registry


def test_builtins_are_52_entry_points_of_this_repository():
    assert len(BUILTINS) == 52 and len(set(BUILTINS)) == 52
    eps = registry._entry_points()
    for name in BUILTINS:
        assert [ep.value for ep in eps[name]] == [f"losses.{name}:spec"], name
    assert set(losses.names()) == set(BUILTINS) | plugin_names() | set(registry._REGISTRY)
    assert losses.names() == sorted(losses.names())


def test_every_builtin_loads_under_its_own_name():
    specs = {n: losses.get(n) for n in BUILTINS}
    assert all(s.name == n and isinstance(s, losses.LossSpec) for n, s in specs.items())
    assert {s.paradigm for s in specs.values()} == set(losses.PARADIGMS)
    assert {s.data for s in specs.values()} == set(losses.DATA_KINDS)


def test_unknown_loss_suggests_the_closest_name():
    with pytest.raises(losses.LossError, match=r"unknown loss 'dpoo'; did you mean 'dpo'\?"):
        losses.get("dpoo")


def test_register_a_duplicate_name_names_both_origins():
    dpo = losses.get("dpo")
    clone = losses.LossSpec(name="dpo", fn=dpo.fn, paradigm="offline", data="pairs", needs_reference=True)
    with pytest.raises(losses.LossError) as err:
        losses.register(clone, origin="--plugin my_copy")
    assert "duplicate loss 'dpo'" in str(err.value)
    assert "distribution oxbench" in str(err.value) and "--plugin my_copy" in str(err.value)
    assert losses.get("dpo") is dpo


def test_register_twice_from_two_origins():
    first = losses.LossSpec(
        name="tmp_twice", fn=losses.get("dpo").fn, paradigm="offline", data="pairs", needs_reference=True
    )
    second = losses.LossSpec(
        name="tmp_twice",
        fn=losses.get("simpo").fn,
        paradigm="offline_ref_free",
        data="pairs",
        needs_reference=False,
    )
    losses.register(first, origin="notebook cell 1")
    try:
        assert losses.register(first, origin="notebook cell 1") is first  # the same object again is fine
        assert "tmp_twice" in losses.names() and losses.get("tmp_twice") is first
        with pytest.raises(
            losses.LossError, match="'tmp_twice': from notebook cell 1 and from notebook cell 2"
        ):
            losses.register(second, origin="notebook cell 2")
    finally:
        losses.unregister("tmp_twice")
    assert "tmp_twice" not in losses.names()


def test_register_collides_with_a_later_found_entry_point(monkeypatch):
    """A spec added with register() that an installed distribution also declares is an error on use."""
    spec = losses.LossSpec(
        name="tmp_clash", fn=losses.get("dpo").fn, paradigm="offline", data="pairs", needs_reference=True
    )
    losses.register(spec)
    try:
        with_fake_entry_points(
            monkeypatch, {"tmp_clash": [fake_ep("tmp_clash", "pkg.m:spec", "pkg-x", None)]}
        )
        with pytest.raises(
            losses.LossError, match="'tmp_clash': from register\\(\\) and from distribution pkg-x"
        ):
            losses.get("tmp_clash")
    finally:
        losses.unregister("tmp_clash")


def _raise_import_error():
    raise ImportError("No module named 'broken_pkg'")


@pytest.mark.parametrize(
    ("load", "why"),
    [
        (_raise_import_error, "failed to import: ImportError: No module named 'broken_pkg'"),
        (lambda: 42, "is a int, not a losses.LossSpec"),
        (lambda: losses.get("dpo"), "declares a spec named 'dpo'"),
    ],
)
def test_a_broken_entry_point_names_the_plugin_and_breaks_nothing_else(monkeypatch, load, why):
    ep = fake_ep("broken_loss", "broken_pkg.mod:spec", "broken-dist", load)
    with_fake_entry_points(monkeypatch, {"broken_loss": [ep]})
    assert "broken_loss" in losses.names()  # listing imports nothing
    with pytest.raises(losses.LossError) as err:
        losses.get("broken_loss")
    msg = str(err.value)
    assert msg.startswith("plugin 'broken_loss' (broken_pkg.mod:spec, distribution broken-dist)"), msg
    assert why in msg and "\n" not in msg
    assert losses.get("dpo").name == "dpo" and losses.get("kto").data == "unpaired"
    assert "broken_loss" not in registry._REGISTRY
    with pytest.raises(losses.LossError, match="plugin 'broken_loss'"):
        losses.all_specs()


def _gamma_without_default(inputs, *, beta: float = 0.1, gamma: float):
    raise AssertionError("never called")


def _no_gamma(inputs, *, beta: float = 0.1):
    raise AssertionError("never called")


def _seed_not_in_defaults(inputs, *, beta: float = 0.1, gamma: float = 0.5, seed: int):
    raise AssertionError("never called")


def _no_inputs(*, beta: float = 0.1, gamma: float = 0.5):
    raise AssertionError("never called")


def mismatched_spec(fn) -> losses.LossSpec:
    return pairs_spec("tmp_mismatch", fn, defaults={"beta": 0.1, "gamma": 0.5})


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        (_gamma_without_default, "has parameters without a default value: gamma"),
        (_no_gamma, "has no keyword parameter with a default for defaults key(s) 'gamma'"),
        (_seed_not_in_defaults, "has parameters without a default value: seed"),
        (_no_inputs, "must take the LossInputs as its first positional parameter"),
    ],
)
def test_register_rejects_a_fn_whose_signature_does_not_match_its_defaults(fn, why):
    """Hyper-parameters override ``defaults``, so ``spec.fn(inputs, beta=0.1)`` must run: every default
    key is a keyword parameter of fn with a default value, and fn requires nothing else."""
    with pytest.raises(losses.LossError) as err:
        losses.register(mismatched_spec(fn), origin="--plugin my_plugin")
    msg = str(err.value)
    assert msg.startswith(f"loss 'tmp_mismatch' (--plugin my_plugin): fn {fn.__qualname__} "), msg
    assert why in msg and "\n" not in msg
    assert "tmp_mismatch" not in registry._REGISTRY


def test_a_plugin_entry_point_whose_signature_does_not_match_fails_on_use(monkeypatch):
    """An installed plugin with required hyper-parameters is rejected when loaded, naming it; the
    built-ins keep working."""

    def needs_everything(inputs, *, beta: float, gamma: float):
        raise AssertionError("never called")

    spec = mismatched_spec(needs_everything)
    ep = fake_ep("tmp_mismatch", "mm_pkg:spec", "mm-dist", lambda: spec)
    with_fake_entry_points(monkeypatch, {"tmp_mismatch": [ep]})
    assert "tmp_mismatch" in losses.names()
    with pytest.raises(losses.LossError) as err:
        losses.get("tmp_mismatch")
    assert str(err.value).startswith("loss 'tmp_mismatch' (distribution mm-dist): fn ")
    assert "without a default value: beta, gamma" in str(err.value)
    assert "tmp_mismatch" not in registry._REGISTRY
    assert losses.get("dpo").name == "dpo"


def test_every_builtin_passes_the_signature_check():
    for name in BUILTINS:
        registry.check_signature(losses.get(name))


def test_two_entry_points_with_one_name_name_both_distributions(monkeypatch):
    twins = [
        fake_ep("twin", "a_pkg.losses:spec", "dist-a", None),
        fake_ep("twin", "b_pkg:spec", "dist-b", None),
    ]
    with_fake_entry_points(monkeypatch, {"twin": twins})
    with pytest.raises(losses.LossError) as err:
        losses.get("twin")
    assert (
        str(err.value)
        == "duplicate loss 'twin': declared by dist-a (a_pkg.losses:spec) and dist-b (b_pkg:spec)"
    )


# --------------------------------------------------------------------------- the example plugin's maths


@pytest.fixture()
def example(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    return importlib.import_module("oxbench_plugin_example"), importlib.import_module(
        "oxbench_plugin_example.unpublished"
    )


def test_example_sigmoid_margin_by_hand(example):
    """c = -1 - (-2) = 1, r = -3 - (-2.5) = -0.5, h = 1.5; β = 0.1, γ = 0.5:
    loss = -log σ(0.15 - 0.5) = log(1 + e^{0.35}); γ = 0 is DPO, -log σ(0.15) = log(1 + e^{-0.15})."""
    spec = example[0].spec
    pol = torch.tensor([-1.0, -3.0], requires_grad=True)
    inputs = losses.LossInputs(
        chosen_logps=pol[:1],
        rejected_logps=pol[1:],
        ref_chosen_logps=torch.tensor([-2.0]),
        ref_rejected_logps=torch.tensor([-2.5]),
    )
    out = spec(inputs)
    assert out.loss.item() == pytest.approx(math.log1p(math.exp(0.35)), rel=1e-6)
    assert out.metrics["rewards/margin"] == pytest.approx(0.15, rel=1e-6)
    assert spec(inputs, gamma=0.0).loss.item() == pytest.approx(
        losses.get("dpo")(inputs).loss.item(), rel=1e-6
    )
    out.loss.backward()
    assert pol.grad[0] < 0 < pol.grad[1]  # raising the chosen / lowering the rejected lowers the loss


def test_example_unpublished_by_hand(example):
    """Mean log-probs: chosen -2/2 = -1, rejected -6/3 = -2; β = 2 → margin 2; hinge max(0, γ - 2)."""
    spec = example[1].spec
    inputs = losses.LossInputs(
        chosen_logps=torch.tensor([-2.0]),
        rejected_logps=torch.tensor([-6.0]),
        chosen_mask=torch.tensor([[1.0, 1.0, 0.0]]),
        rejected_mask=torch.ones(1, 3),
    )
    assert spec(inputs).loss.item() == 0.0
    assert spec(inputs, gamma=3.0).loss.item() == pytest.approx(1.0)
    assert spec.needs_reference is False and spec.name == "example_unpublished"


# --------------------------------------------------------------------------- CLI


def table_names(output: str) -> list[str]:
    """The first cell of every body row of a rich table."""
    return re.findall(r"^│ ([A-Za-z_0-9]+) +│", output, re.M)


def test_cli_losses_table_lists_every_loss_with_its_columns():
    res = CliRunner().invoke(app, ["losses"])
    assert res.exit_code == 0, res.output
    header = next(line for line in res.output.splitlines() if "name" in line and "paradigm" in line)
    assert re.findall(r"[a-z]+", header)[:5] == ["name", "paradigm", "data", "reference", "paper"]
    assert set(table_names(res.output)) == set(BUILTINS) | plugin_names()
    dpo_row = next(line for line in res.output.splitlines() if line.startswith("│ dpo "))
    assert [c.strip() for c in dpo_row.strip("│").split("│")][:4] == ["dpo", "offline", "pairs", "yes"]


def test_cli_losses_json_is_every_spec_metadata():
    res = CliRunner().invoke(app, ["losses", "--json"])
    assert res.exit_code == 0, res.output
    listed = {m["name"]: m for m in json.loads(res.output)}
    assert set(listed) == set(BUILTINS) | plugin_names()
    assert all(METADATA_KEYS <= set(m) for m in listed.values())
    assert listed["dpo"]["defaults"] == {"beta": 0.1, "label_smoothing": 0.0}
    assert (listed["dpo"]["paradigm"], listed["dpo"]["data"], listed["dpo"]["needs_reference"]) == (
        "offline",
        "pairs",
        True,
    )
    assert listed["kto"]["data"] == "unpaired" and listed["simpo"]["needs_reference"] is False
    assert listed["dpo"]["paper"] == "arXiv:2305.18290 Eq. 7" and listed["dpo"]["fn"] == "losses.dpo:dpo_loss"
    assert all(isinstance(m["version"], int) and m["version"] >= 1 for m in listed.values())


# --------------------------------------------------------------------------- subprocesses


def oxbench(*args: str, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "oxbench_cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def subprocess_env(tmp_path: Path, pythonpath: Path) -> dict:
    """Wide rich tables (no truncated names), a private cache, and ``pythonpath`` first on the path."""
    path = os.pathsep.join(p for p in (str(pythonpath), os.environ.get("PYTHONPATH")) if p)
    env = {k: v for k, v in os.environ.items() if k != "OXBENCH_PLUGINS"}
    return {**env, "PYTHONPATH": path, "OXBENCH_CACHE": str(tmp_path / "cache"), "COLUMNS": "240"}


def write_grid(path: Path, method: str, base: dict | None = None) -> Path:
    grid = {"name": "plugin_roundtrip", "base": base or {}, "axes": {"method": [method], "seed": [0]}}
    path.write_text(yaml.safe_dump(grid))
    return path


def test_plugin_flag_registers_an_unpublished_module(tmp_path):
    """``--plugin MODULE`` registers the module's specs; without it the method is unknown."""
    env = subprocess_env(tmp_path, EXAMPLE)
    grid = write_grid(tmp_path / "grid.yaml", "example_unpublished")
    res = oxbench(
        "run",
        "--plugin",
        "oxbench_plugin_example.unpublished",
        "--grid",
        str(grid),
        "--out",
        str(tmp_path / "out"),
        "--plan",
        env=env,
    )
    assert res.returncode == 0, res.stderr
    row = next(line for line in res.stdout.splitlines() if "example_unpublished" in line)
    assert "todo" in row and "tiny-xs-example_unpublished-s0-" in row
    assert not (tmp_path / "out").exists()  # --plan runs nothing
    res = oxbench("run", "--grid", str(grid), "--out", str(tmp_path / "out"), "--plan", env=env)
    assert res.returncode == 2 and "unknown method 'example_unpublished'" in res.stderr


# Not degenerate: the base model must sometimes be right, or self-play gives no pairs. The quickstart's
# tiny-s base ships with oxbench (same pre-training config and task), so nothing is pre-trained here:
# pre-training a tiny-xs base made this test 60-274 s of CI's slowest minutes.
ROUND_TRIP = {
    "model": {
        "name": "tiny-s",
        "pretrain": {
            "updates": 800,
            "batch_size": 96,
            "lr": 3.0e-3,
            "n_examples": 20000,
            "answer_styles": {"gsm8k": 0.3, "sentence": 0.7},
        },
    },  # fmt: skip
    "task": {"name": "arith", "n_ops": 2, "max_operand": 40},
    "data": {"n_train": 32, "self_play_k": 8, "max_new_tokens": 40},
    "train": {"batch_size": 4, "max_steps": 2, "lr": 1.0e-4},
    "eval": {"n_test": 8, "n_ood": 8, "k": 0, "max_new_tokens": 40},
}


@pytest.mark.slow
def test_published_plugin_round_trip(tmp_path):
    """Build and install the example package, find its entry point, run one grid cell with it.

    The package is installed into a private ``--target`` directory put on ``PYTHONPATH``, not into
    the running interpreter: other processes sharing the virtualenv never see a half-installed
    plugin, and nothing is left behind if the test is killed.
    """
    src, site = tmp_path / "src", tmp_path / "site"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--target",
            str(site),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stderr
    env = subprocess_env(tmp_path, site)

    listing = oxbench("losses", "--json", env=env)
    assert listing.returncode == 0, listing.stderr
    specs = {m["name"]: m for m in json.loads(listing.stdout)}
    plugin = specs["example_sigmoid_margin"]
    assert plugin["fn"] == "oxbench_plugin_example:sigmoid_margin_loss"
    assert (plugin["data"], plugin["needs_reference"], plugin["defaults"]) == (
        "pairs",
        True,
        {"beta": 0.1, "gamma": 0.5},
    )
    assert set(BUILTINS) <= set(specs) and "example_unpublished" not in specs

    grid = write_grid(tmp_path / "grid.yaml", "example_sigmoid_margin", ROUND_TRIP)
    res = oxbench("run", "--grid", str(grid), "--out", str(tmp_path / "out"), env=env, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (record_path,) = (tmp_path / "out" / "plugin_roundtrip").glob("*/run.json")
    record = json.loads(record_path.read_text())
    assert record["status"] == "finished", record.get("error")
    assert record["method"] == "example_sigmoid_margin" and record["paradigm"] == "offline"
    assert record["loss_version"] == plugin["version"] == 1
    assert record["loss_hparams"] == {"beta": 0.1, "gamma": 0.5} and record["optimizer_steps"] == 2
    assert record["data"]["pairs"] > 0
