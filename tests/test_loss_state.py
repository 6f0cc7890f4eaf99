"""The trainer's side of the loss contract: carried state, training progress and reference updates.

A toy stateful loss (DPO plus a counter in its state) shows that the state a loss returns reaches the
next optimiser step, is averaged over a step's micro-batches, and ends up in the result; that
``progress`` is the share of steps done; and that TR-DPO's reference update goes through the spec's
``reference_update`` hook and the parity-tested ``mix_reference_``.
"""

from __future__ import annotations

import pytest
import torch
from helpers import cfg_for, rows_for, train_offline

import losses
from losses.dpo import dpo_loss
from oxbench.engine import distributed as D
from oxbench.engine import reference as ref_mod
from oxbench.models.loading import load_model

SEEN: list[tuple[float, float]] = []


def counting_dpo(inputs, *, beta: float = 0.1):
    """DPO whose state counts the optimiser steps it has seen (and records what it was given)."""
    calls = 0.0 if inputs.state is None else float(inputs.state["calls"])
    SEEN.append((calls, inputs.progress))
    out = dpo_loss(inputs, beta=beta)
    out.state = {"calls": torch.tensor(calls + 1.0)}
    return out


@pytest.fixture
def counting_spec():
    spec = losses.LossSpec(
        name="counting_dpo",
        fn=counting_dpo,
        paradigm="offline",
        data="pairs",
        needs_reference=True,
        defaults={"beta": 0.1},
        initial_state={"calls": 0.0},
    )
    losses.register(spec)
    SEEN.clear()
    yield spec
    losses.unregister("counting_dpo")


def train(spec, path, hparams=None, **train_kw):
    D.init_distributed()
    cfg = cfg_for(path, spec.name, **train_kw)
    model, tok = load_model(path, cfg, init_seed=0)
    return train_offline(
        cfg, spec, spec.resolve_hparams(hparams), model, tok, rows_for("pairs"), run=spec.name
    )


@pytest.mark.parametrize("accum", [1, 2])
def test_state_is_carried_across_steps_and_averaged_over_micro_batches(counting_spec, micro_model_dir, accum):
    """3 steps: each micro-batch of step k sees calls = k and proposes k + 1; the average is k + 1."""
    _, res = train(counting_spec, micro_model_dir, batch_size=2, grad_accum=accum, max_steps=3)
    assert [c for c, _ in SEEN] == [float(k) for k in range(3) for _ in range(accum)]
    assert [p for _, p in SEEN] == [k / 3 for k in range(3) for _ in range(accum)]
    assert res.loss_state == {"calls": 3.0}


def test_stateless_loss_has_no_state(micro_model_dir):
    _, res = train(losses.get("dpo"), micro_model_dir, max_steps=2)
    assert res.loss_state is None


def test_betadpo_state_ends_in_the_result(micro_model_dir):
    _, res = train(losses.get("betadpo"), micro_model_dir, max_steps=3)
    assert set(res.loss_state) == {"gap_mean", "gap_std"}
    assert res.loss_state["gap_mean"] == pytest.approx(res.history[-1]["betadpo/gap_mean"])
    assert res.loss_state["gap_std"] > 0


def test_tr_dpo_reference_update_uses_the_spec_hook_and_the_parity_tested_mix(monkeypatch, micro_model_dir):
    calls = []
    real = ref_mod.mix_reference_

    def spy(policy, ref, alpha):
        calls.append(alpha)
        return real(policy, ref, alpha)

    monkeypatch.setattr(ref_mod, "mix_reference_", spy)
    spec = losses.get("tr_dpo")
    _, res = train(
        spec, micro_model_dir, {"ref_model_sync_steps": 2, "ref_model_mixup_alpha": 0.25}, max_steps=None
    )
    assert res.optimizer_steps == 4 and calls == [0.25, 0.25]  # 16 pairs / batch 4: after steps 2 and 4
    assert spec.reference_update(4, **spec.resolve_hparams({"ref_model_sync_steps": 2})) == 0.6
    assert spec.reference_update(3, **spec.resolve_hparams({"ref_model_sync_steps": 2})) is None
