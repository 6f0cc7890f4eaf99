"""Off-policy corrections (issue 15): TIS (token, sequence) and decoupled PPO, by hand and in the loop."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import cfg_for, length_parity_reward, rows_for, train_online

import losses
from losses._online import corrected_ratio
from losses.types import LossInputs
from oxbench.engine import distributed as D
from oxbench.models.loading import load_model

L = math.log


def inputs():
    """Two rollouts of one group (rewards 1, 0), two tokens each. Behaviour μ = [[1/4, 1/2], [1/2, 1/2]],
    the learner's (proximal, first pass) π = 1/2 everywhere: behaviour weights π/μ = [[2, 1], [1, 1]]."""
    prox = torch.full((2, 2), L(0.5))
    return LossInputs(token_logps=prox.clone().requires_grad_(), mask=torch.ones(2, 2),
                      old_token_logps=torch.tensor([[L(0.25), L(0.5)], [L(0.5), L(0.5)]]),
                      rewards=torch.tensor([1.0, 0.0]), group_ids=torch.tensor([0, 0]))  # fmt: skip


@pytest.mark.parametrize(
    "correction,cap,want",
    [
        ("tis_token", 1.5, [[1.5, 1.0], [1.0, 1.0]]),  # min(w_t, 1.5)
        ("tis_sequence", 1.5, [[1.5, 1.5], [1.0, 1.0]]),  # min(2 x 1, 1.5) on both tokens
        ("decoupled", 1.5, [[0.0, 1.0], [1.0, 1.0]]),  # w_t = 2 > 1.5: masked out
        ("decoupled", 5.0, [[2.0, 1.0], [1.0, 1.0]]),  # under the cap: the weight itself
    ],
)
def test_weights_by_hand(correction, cap, want):
    ratio, weight = corrected_ratio(inputs(), correction, cap, "sgrpo")
    assert torch.allclose(weight, torch.tensor(want)) and torch.allclose(ratio, torch.ones(2, 2))
    assert ratio.requires_grad and not weight.requires_grad


def test_sgrpo_with_tis_by_hand():
    """Advantages ±1/√2 (group z-score, unbiased std √0.5). On the first pass r = 1, so each token's
    loss is −A·w; the token mean over 4 tokens with tis_token cap 1.5 is
    −(1/√2)(1.5 + 1 − 1 − 1)/4 = −0.125/√2. Without correction (coupled clip, r = π/μ = [[2, 1], [1, 1]]
    clipped at 1.2 for the positive advantage): −(1/√2)(1.2 + 1 − 1 − 1)/4 = −0.05/√2."""
    sgrpo = losses.get("sgrpo")
    tis = sgrpo(inputs(), is_correction="tis_token", is_cap=1.5).loss
    assert float(tis) == pytest.approx(-0.125 / math.sqrt(2), abs=1e-6)
    assert float(sgrpo(inputs()).loss) == pytest.approx(-0.05 / math.sqrt(2), abs=1e-6)


def test_a_second_pass_clips_against_the_proximal_policy():
    """On a later pass the ratio is π_θ/π_prox: here π_θ = π_prox · e^0.5 on the first token."""
    x = inputs()
    x.prox_token_logps = x.token_logps.detach().clone()
    x.token_logps = (x.token_logps.detach() + torch.tensor([[0.5, 0.0], [0.0, 0.0]])).requires_grad_()
    ratio, _ = corrected_ratio(x, "decoupled", 5.0, "sgrpo")
    assert float(ratio[0, 0]) == pytest.approx(math.exp(0.5))


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "dapo", "sgrpo"])
def test_the_decoupled_cap_defaults_to_tis_cap_by_choice(name):
    """Issue 27.7: every correction shares one ``is_cap`` default, 2.0 (TIS's). AReaL's decoupled loss
    had none (then 5.0); 2.0 is kept as a documented choice, so committed run ids stand, and a grid sets
    ``loss.is_cap`` (the staleness studies' decoupled arm: 5.0)."""
    assert losses.get(name).defaults["is_cap"] == 2.0
    assert "behav_imp_weight_cap=None" in corrected_ratio.__doc__ and "loss.is_cap" in corrected_ratio.__doc__


def test_decoupled_masks_above_the_cap_and_still_counts_the_token():
    """sgrpo, first pass (r = 1), advantages ±1/√2, behaviour weights π_prox/μ = [[2, 1], [1, 1]].
    Cap 1.5: the first token (w = 2 > 1.5) gets weight 0 and no gradient but stays in the token mean's
    denominator: −(1/√2)(0 + 1 − 1 − 1)/4 = 0.25/√2 (not /3). A cap above every weight masks nothing,
    AReaL's uncapped decoupled loss: −(1/√2)(2 + 1 − 1 − 1)/4 = −0.25/√2."""
    sgrpo = losses.get("sgrpo")
    x = inputs()
    capped = sgrpo(x, is_correction="decoupled", is_cap=1.5).loss
    assert float(capped) == pytest.approx(0.25 / math.sqrt(2), abs=1e-6)
    (grad,) = torch.autograd.grad(capped, x.token_logps)
    assert grad[0, 0] == 0 and (grad[0, 1:] != 0).all() and (grad[1] != 0).all()
    uncapped = sgrpo(inputs(), is_correction="decoupled", is_cap=1e9).loss
    assert float(uncapped) == pytest.approx(-0.25 / math.sqrt(2), abs=1e-6)
    _, weight = corrected_ratio(inputs(), "decoupled", 1e9, "sgrpo")
    assert torch.allclose(weight, torch.tensor([[2.0, 1.0], [1.0, 1.0]]))


def test_unknown_correction_names_the_choices():
    with pytest.raises(
        ValueError, match="is_correction must be one of none, tis_token, tis_sequence, decoupled"
    ):
        losses.get("dapo")(inputs(), is_correction="tis")


@pytest.mark.slow
@pytest.mark.parametrize("correction", ["tis_token", "decoupled"])
def test_inner_epochs_use_the_first_pass_as_proximal(micro_model_dir, correction):
    """Two passes per batch: the first sees ratio 1 exactly (π_θ is π_prox), the second a ratio that has
    moved with the first step."""
    D.init_distributed()
    spec = losses.get("sgrpo")
    cfg = cfg_for(micro_model_dir, "sgrpo", max_steps=None)
    cfg = cfg.model_copy(update={"online": cfg.online.model_copy(update={"rounds": 2, "inner_epochs": 2})})
    model, tok = load_model(micro_model_dir, cfg, init_seed=0)
    hp = spec.resolve_hparams({"is_correction": correction, "is_cap": 5.0})
    _, res = train_online(
        cfg, spec, hp, model, tok, rows_for("online", 8), run="c", reward_fn=length_parity_reward
    )
    first, second = res.history[0], res.history[1]
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and abs(second["ratio_mean"] - 1.0) > 1e-5


@pytest.mark.slow
def test_ess_scaled_lr_scales_each_step_and_leaves_the_schedule(micro_model_dir, monkeypatch):
    """VCPO's rule at S = 2: each step's effective LR is the scheduled LR times sqrt(min(1, ESS)); the
    schedule itself (the logged lr) is the unscaled run's, step for step."""
    from test_sources import run

    _, _, _, plain = run(micro_model_dir, monkeypatch, source="delayed", staleness=2)
    _, _, _, scaled = run(micro_model_dir, monkeypatch, source="delayed", staleness=2, ess_lr="sqrt")
    assert [h["lr"] for h in plain.history] == [h["lr"] for h in scaled.history]
    lrs = [1e-2] + [
        h["lr"] for h in plain.history[:-1]
    ]  # the LR each step ran at (cfg_for: lr 1e-2, no warm-up)
    for h, lr in zip(scaled.history, lrs):
        assert h["lr_effective"] == pytest.approx(lr * math.sqrt(min(1.0, h["ess"])), rel=1e-9)
    assert any(h["ess"] < 0.999 for h in scaled.history)


def test_ess_lr_bad_input():
    from pydantic import ValidationError

    from oxbench.config import RunConfig

    with pytest.raises(ValidationError, match="ess_lr_base must be a finite number > 0"):
        RunConfig(method="sgrpo", online={"ess_lr": "sqrt", "ess_lr_base": 0})
    with pytest.raises(ValidationError, match="ess_lr"):
        RunConfig(method="sgrpo", online={"ess_lr": "cubic"})


@pytest.mark.slow
def test_later_passes_report_the_first_pass_weights(micro_model_dir):
    """VCPO's ESS is π_old/μ: with two passes per batch, the second pass reports the weights of the first
    (the learner's drift within the batch is not behaviour mismatch), while its loss sees a moved ratio."""
    D.init_distributed()
    spec = losses.get("sgrpo")
    cfg = cfg_for(micro_model_dir, "sgrpo", max_steps=None)
    cfg = cfg.model_copy(update={"online": cfg.online.model_copy(
        update={"rounds": 3, "inner_epochs": 2, "source": "delayed", "staleness": 1})})  # fmt: skip
    model, tok = load_model(micro_model_dir, cfg, init_seed=0)
    _, res = train_online(cfg, spec, spec.resolve_hparams(), model, tok, rows_for("online", 8), run="p",
                          reward_fn=length_parity_reward)  # fmt: skip
    keys = ("ess", "ess_token", "is_max", "is_max_token", "kl_behaviour")
    by_round = [[h for h in res.history if h["round"] == r] for r in range(3)]
    assert all(len(rows) == 2 for rows in by_round)
    for first, second in by_round:
        assert [first[k] for k in keys] == [second[k] for k in keys]
    assert any(rows[0]["ess"] < 0.999999 for rows in by_round)  # stale rounds: the weights are not all 1
    assert any(abs(rows[1]["ratio_mean"] - rows[0]["ratio_mean"]) > 1e-6 for rows in by_round)
