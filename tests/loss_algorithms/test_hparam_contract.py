"""The hyper-parameter contract of every built-in loss: hyper-parameters override ``defaults``.

So ``losses.get(name).fn(inputs, beta=0.1)``, every other hyper-parameter omitted, must run: each
``fn`` declares every key of its spec's ``defaults`` as a keyword-only parameter whose default value
is the spec's, and nothing else without a default. (Before this test, 37 of the 51 built-ins,
``fdpo`` among them, raised ``TypeError: missing required keyword-only argument`` there.) The registry
enforces the shape of the signature for plugins too (``tests/test_plugins.py``); this file checks
the values and runs every built-in on small random inputs of its ``data`` kind.
"""

from __future__ import annotations

import importlib
import inspect
import math

import pytest
import torch

import losses

# the random inputs of each data kind are the contract checker's (oxbench losses check)
from oxbench.losscheck import DTYPE, completion_inputs, inputs_for, pair_inputs, sft_inputs  # noqa: F401

BUILTINS = sorted(
    n for n, eps in losses.registry._entry_points().items() if eps[0].value.startswith("losses.")
)


def test_there_are_52_builtins():
    assert len(BUILTINS) == 52


@pytest.mark.parametrize("name", BUILTINS)
def test_fn_signature_defaults_are_the_spec_defaults(name):
    """Every hyper-parameter is keyword-only with the spec's default: ``fn(inputs)`` = ``spec(inputs)``."""
    spec = losses.get(name)
    params = list(inspect.signature(spec.fn).parameters.values())[1:]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), name
    assert {p.name: p.default for p in params} == spec.defaults


@pytest.mark.parametrize("name", BUILTINS)
def test_fn_runs_with_only_beta(name):
    """``spec.fn(inputs, beta=0.1)`` (``spec.fn(inputs)`` for a loss without β) on small random inputs:
    a finite scalar with a finite gradient, and the same value as the registry call with the same β."""
    spec = losses.get(name)
    hp = {"beta": 0.1} if "beta" in spec.defaults else {}
    inputs = inputs_for(spec)
    out = spec.fn(inputs, **hp)
    assert out.loss.ndim == 0 and math.isfinite(out.loss.item()) and out.loss.requires_grad
    assert all(isinstance(v, float) and math.isfinite(v) for v in out.metrics.values())
    via_registry = spec(inputs_for(spec), **hp)
    torch.testing.assert_close(out.loss, via_registry.loss, rtol=1e-12, atol=0.0)


def test_fdpo_with_only_beta_is_reverse_kl_fdpo():
    """The audit's case: fdpo's other hyper-parameters fall back to reverse KL (= DPO) and α = 0.5."""
    fdpo, dpo = losses.get("fdpo"), losses.get("dpo")
    torch.testing.assert_close(fdpo.fn(pair_inputs(), beta=0.3).loss, dpo.fn(pair_inputs(), beta=0.3).loss)


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_writes_its_name_and_defaults_once(name):
    """A built-in's name is its module's (``NAME = loss_name(__name__)``), its defaults are its ``fn``'s
    signature (the spec, a ``losses._families`` factory or a ``LossSpec``, leaves ``defaults`` out),
    and its hooks declare no defaults of their own: the trainer passes them every resolved
    hyper-parameter. A built-in whose maths is another's registers that one's function (``rft`` is
    ``sft``'s with the self-play answers), never a copy of it."""
    spec = losses.get(name)
    module = importlib.import_module(f"losses.{name}")
    assert module.NAME == name == spec.name
    home = inspect.getmodule(spec.fn)
    assert home is module or spec.fn is losses.get(home.NAME).fn, spec.fn
    assert spec.defaults == losses.registry.signature_defaults(spec.fn)
    assert "defaults=" not in inspect.getsource(module).split("\nspec = ", 1)[1]
    for hook in (spec.batch_stats, spec.reference_update):
        if hook is not None:
            params = list(inspect.signature(hook).parameters.values())[1:]
            assert all(p.default is p.empty for p in params if p.name in spec.defaults), hook


def test_a_spec_without_defaults_reads_them_from_its_signature():
    def fn(inputs, *, beta: float = 0.2, mode: str = "a"):
        raise AssertionError("never called")

    spec = losses.LossSpec(name="tmp_sig", fn=fn, paradigm="offline", data="pairs", needs_reference=True)
    assert list(spec.defaults.items()) == [("beta", 0.2), ("mode", "a")]
    assert spec.resolve_hparams({"beta": 0.3}) == {"beta": 0.3, "mode": "a"}
    with pytest.raises(losses.LossError, match="unknown hyper-parameter 'gama'"):
        spec.resolve_hparams({"gama": 1.0})
    given = losses.LossSpec(
        name="tmp_sig", fn=fn, paradigm="offline", data="pairs", needs_reference=True, defaults={"beta": 0.2}
    )
    assert given.defaults == {"beta": 0.2}  # written out, a spec's defaults are what it says
