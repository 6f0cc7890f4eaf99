"""Collapse detection (issue 15): by hand, and in the online loop, which stops and records the step."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import cfg_for, rows_for, train_online
from pydantic import ValidationError

import losses
from oxbench.config import CollapseConfig, RunConfig
from oxbench.engine import distributed as D
from oxbench.engine.collapse import CollapseDetector
from oxbench.models.loading import load_model


def test_reward_collapse_by_hand():
    """window 2, fraction 0.5: early level (0.6 + 0.4)/2 = 0.5; the last two rounds must average
    below 0.25. Rounds 0.6, 0.4, 0.3, 0.3 (0.3: no), then 0.2 ((0.3 + 0.2)/2 = 0.25: no, not below),
    then 0.1 (0.15: collapsed)."""
    d = CollapseDetector(reward_fraction=0.5, window=2)
    assert [d.observe_reward(r) for r in (0.6, 0.4, 0.3, 0.3, 0.2)] == [None] * 5
    assert "fell to 0.150" in d.observe_reward(0.1)


def test_no_early_reward_means_nothing_to_fall_from():
    d = CollapseDetector(reward_fraction=0.5, window=1)
    assert [d.observe_reward(r) for r in (0.0, 0.0, 0.0)] == [None] * 3


def test_verified_drop_by_hand():
    d = CollapseDetector(reward_fraction=0.5, window=1, verified_drop=0.2)
    assert [d.observe_verified(v) for v in (0.3, 0.6, 0.45, None)] == [None] * 4  # 0.45 >= 0.6 - 0.2
    assert "fell to 0.350 from 0.600" in d.observe_verified(0.35)


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"reward_fraction": 1.5}, "reward_fraction"),
        ({"window": 0}, "window"),
        ({"verified_drop": float("nan")}, "verified_drop"),
    ],  # fmt: skip
)
def test_collapse_bad_input(bad, match):
    with pytest.raises(ValidationError, match=match):
        RunConfig(method="sgrpo", online={"collapse": bad})


def online(model_dir, method, reward_fn, collapse):
    D.init_distributed()
    spec = losses.get(method)
    cfg = cfg_for(model_dir, method, max_steps=None)
    cfg = cfg.model_copy(update={"online": cfg.online.model_copy(update={"rounds": 6, "collapse": collapse})})
    model, tok = load_model(model_dir, cfg, init_seed=0)
    return train_online(
        cfg, spec, spec.resolve_hparams(), model, tok, rows_for("online", 8), run="c", reward_fn=reward_fn
    )[1]


@pytest.mark.slow
def test_a_collapsing_run_stops_and_records_the_step(micro_model_dir):
    """Reward 1 for every rollout of the first two rounds, then 0: with window 1 the run collapses on
    the third round's reward, after its third step, and stops there (3 of 6 steps)."""
    calls = {"n": 0}

    def reward(completion, answer):  # 8 rollouts a round (2 prompts x 4)
        calls["n"] += 1
        return float(calls["n"] <= 16) + float(len(completion) % 2) * 0.0

    res = online(micro_model_dir, "sgrpo", reward, CollapseConfig(window=1))
    assert res.collapse["step"] == 3 and "fell to 0.000" in res.collapse["reason"]
    assert res.optimizer_steps == 3 and len(res.history) == 3
    going_on = online(micro_model_dir, "sgrpo", lambda c, a: float(c == ""), CollapseConfig(window=1))
    assert going_on.collapse is None and going_on.optimizer_steps == 6


@pytest.mark.slow
def test_a_non_finite_loss_is_a_collapse_not_a_failure(micro_model_dir, monkeypatch):
    spec = losses.get("sgrpo")
    calls = {"n": 0}

    def nan_on_third(inputs, **hp):
        calls["n"] += 1
        out = spec.fn(inputs, **hp)
        return (
            dataclasses.replace(out, loss=out.loss * torch.tensor(float("nan"))) if calls["n"] == 3 else out
        )

    monkeypatch.setitem(losses.registry._REGISTRY, "sgrpo", dataclasses.replace(spec, fn=nan_on_third))
    res = online(micro_model_dir, "sgrpo", lambda c, a: float(len(c) % 2), CollapseConfig())
    assert (
        res.collapse == {"step": 2, "reason": "non-finite loss (nan) at step 2"} and res.optimizer_steps == 2
    )
