"""The online losses: hand-computed values and properties.

Notation in the docstrings: ``a = 0.5 / (sqrt(0.5) + eps)`` is the z-scored advantage of a
two-rollout group with rewards (1, 0): mean 0.5, unbiased std sqrt(0.5²+0.5²) = sqrt(0.5),
so ``A = (±0.5)/(std + eps) = ±a``. ``eps`` = 1e-8 for sgrpo (oxRL), 1e-4 elsewhere (TRL).
On-policy (``old_token_logps=None``) every ratio is 1 and ``min(r·A, clip(r)·A) = A``.
"""

from __future__ import annotations

import math

import pytest
import torch

import losses
from losses import LossInputs
from losses.ppo import gae
from losses.rloo import leave_one_out_advantages

A8 = 0.5 / (math.sqrt(0.5) + 1e-8)
A4 = 0.5 / (math.sqrt(0.5) + 1e-4)
GROUP_LOSSES = ["sgrpo", "grpo", "dr_grpo", "dapo", "gspo", "cispo", "rloo"]
ONLINE = GROUP_LOSSES + ["reinforce_pp", "ppo"]
TOKEN_CLIPPED = ["sgrpo", "grpo", "dr_grpo", "dapo", "reinforce_pp", "ppo"]
NO_KL = {"grpo": {"beta": 0.0}, "rloo": {"beta": 0.0}, "reinforce_pp": {"beta": 0.0}}


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def rollouts(logps, rewards, group_ids=None, *, mask=None, log_ratio=None, ref=None, **extra) -> LossInputs:
    """Inputs whose ``token_logps`` is a grad leaf; ``log_ratio`` gives ``old = logps − log_ratio``.

    ``max_completion_length`` (dr_grpo's L_max, filled by the trainer) defaults to the width T here.
    """
    logps = t(logps)
    extra.setdefault("max_completion_length", logps.shape[1])
    mask = (logps != 0).float() if mask is None else t(mask)
    old = None if log_ratio is None else (logps - t(log_ratio)) * mask
    if "values" in extra and extra["values"] is not None and not torch.is_tensor(extra["values"]):
        extra["values"] = t(extra["values"]).requires_grad_(True)
    return LossInputs(
        token_logps=logps.requires_grad_(True),
        old_token_logps=old,
        ref_token_logps=None if ref is None else t(ref),
        mask=mask,
        rewards=t(rewards),
        group_ids=torch.tensor(group_ids if group_ids is not None else [0] * len(rewards)),
        **extra,
    )


def grad(out, inputs: LossInputs) -> torch.Tensor:
    (g,) = torch.autograd.grad(out.loss, inputs.token_logps)
    return g


def run(name: str, inputs: LossInputs, **hparams):
    if name == "ppo" and inputs.values is None:
        inputs.values = torch.zeros_like(inputs.token_logps).requires_grad_(True)
    return losses.get(name)(inputs, **{**NO_KL.get(name, {}), **hparams})


def two_rollouts(**kw) -> LossInputs:
    """One group, rewards (1, 0); rollout 0 has 2 tokens, rollout 1 has 1 token."""
    return rollouts([[-1.0, -2.0], [-1.5, 0.0]], [1.0, 0.0], [0, 0], **kw)


# --- hand-computed values ----------------------------------------------------------------------


def test_sgrpo_hand_value_and_clip_fraction():
    """Ratios: rollout 0 (A = +a): 1.5, 0.5; rollout 1 (A = −a): 1.1. ε = 0.2.

    1.5·a vs 1.2·a → min 1.2a (clipped, zero grad); 0.5·a vs 0.8·a → 0.5a; 1.1·(−a) both → −1.1a.
    loss = −(1.2a + 0.5a − 1.1a)/3 tokens = −0.2a = −0.1414214. One of 3 tokens clipped.
    """
    inputs = two_rollouts(log_ratio=[[math.log(1.5), math.log(0.5)], [math.log(1.1), 0.0]])
    out = run("sgrpo", inputs)
    assert out.loss.item() == pytest.approx(-0.2 * A8, rel=1e-5)
    assert out.metrics["clip_frac"] == pytest.approx(1 / 3)
    assert out.metrics["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1) / 3, rel=1e-5)
    assert out.metrics["adv_mean"] == pytest.approx(0.0, abs=1e-6)
    assert out.metrics["adv_std"] == pytest.approx(A8, rel=1e-5)
    assert grad(out, inputs)[0, 0].item() == 0.0


def test_sgrpo_without_broadcast_puts_advantage_on_last_token_only():
    """oxRL's ``reward.broadcast: False``: A sits on the last response token.

    On-policy, per-token loss = −A_t/3: rollout 0 → (0, −a/3), rollout 1 → (+a/3). Loss = 0.
    """
    inputs = two_rollouts()
    out = run("sgrpo", inputs, reward_broadcast=False)
    assert out.loss.item() == pytest.approx(0.0, abs=1e-7)
    expected = t([[0.0, -A8 / 3], [A8 / 3, 0.0]])
    torch.testing.assert_close(grad(out, inputs), expected)


def test_grpo_hand_value_is_mean_of_response_means():
    """Same ratios as the sgrpo test, eps 1e-4: rollout means (−1.2a − 0.5a)/2 = −0.85a and +1.1a.

    loss = (−0.85a + 1.1a)/2 = 0.125a = 0.0883758 (sgrpo's token mean gives −0.2a: the
    one-token rollout weighs 1/2 here, 1/3 there).
    """
    inputs = two_rollouts(log_ratio=[[math.log(1.5), math.log(0.5)], [math.log(1.1), 0.0]])
    out = run("grpo", inputs)
    assert out.loss.item() == pytest.approx(0.125 * A4, rel=1e-5)


def test_grpo_k3_kl_hand_value():
    """A lone rollout has A = 0, so the loss is β·mean_t k3 with k3(d) = e^d − d − 1, d = ref − logp.

    d = (−0.5, +0.5): k3 = 0.1065307, 0.1487213; loss = 0.04 · 0.1276260 = 0.0051050.
    """
    inputs = rollouts([[-1.0, -2.0]], [1.0], ref=[[-1.5, -1.5]])
    out = losses.get("grpo")(inputs)
    k3 = (math.exp(-0.5) + 0.5 - 1) + (math.exp(0.5) - 0.5 - 1)
    assert out.loss.item() == pytest.approx(0.04 * k3 / 2, rel=1e-5)
    assert out.metrics["kl"] == pytest.approx(k3 / 2, rel=1e-5)


def test_dr_grpo_hand_value_sums_tokens_over_a_constant():
    """No std: A = ±0.5. On-policy token terms: −0.5, −0.5 (rollout 0), +0.5 (rollout 1).

    Sum −0.5 over G·L = 2·4 = 8 → −0.0625 (hyper-parameter L = 4); with the hyper-parameter None,
    L = LossInputs.max_completion_length = 2 → −0.125; the hyper-parameter wins over the field.
    (GRPO's per-response mean gives (−0.5 + 0.5)/2 = 0: the length bias Dr. GRPO removes.)
    """
    assert run("dr_grpo", two_rollouts(), max_completion_length=4).loss.item() == pytest.approx(-0.0625)
    assert run("dr_grpo", two_rollouts()).loss.item() == pytest.approx(-0.125)
    assert run("dr_grpo", two_rollouts(max_completion_length=4)).loss.item() == pytest.approx(-0.0625)
    assert run("dr_grpo", two_rollouts(max_completion_length=8), max_completion_length=4).loss.item() == (
        pytest.approx(-0.0625)
    )
    assert run("grpo", two_rollouts()).loss.item() == pytest.approx(0.0, abs=1e-7)


def behind_prompt(completions: list[list[float]], prompt_len: int, limit: int | None) -> LossInputs:
    """Trainer-shaped rollouts: (B, prompt_len + C) token log-probs and mask, zero on the prompt."""
    width = prompt_len + max(len(c) for c in completions)
    logps = [[0.0] * prompt_len + c + [0.0] * (width - prompt_len - len(c)) for c in completions]
    mask = [[0.0] * prompt_len + [1.0] * len(c) + [0.0] * (width - prompt_len - len(c)) for c in completions]
    return rollouts(logps, [1.0, 0.0, 0.5], [0, 0, 0], mask=mask, max_completion_length=limit)


def test_dr_grpo_constant_does_not_move_with_the_prompt_length():
    """The same three completions (3, 1, 2 tokens; rewards 1, 0, 0.5 → A = +0.5, −0.5, 0) behind a
    5-token and a 20-token prompt, the trainer's mask (0 on the prompt), L_max = 8:
    loss = −(0.5·3 − 0.5·1 + 0)/(G·L_max) = −1/(3·8) = −0.0416667 for both, and so is the gradient.

    Version 1 divided by the mask width when the hyper-parameter was None: 3·(5+3) = 24 →
    −0.0416667 and 3·(20+3) = 69 → −0.0144928, a factor 2.9 from the prompt alone.
    """
    completions = [[-1.0, -2.0, -0.5], [-1.5], [-0.3, -0.7]]
    short, long = behind_prompt(completions, 5, 8), behind_prompt(completions, 20, 8)
    out_short, out_long = run("dr_grpo", short), run("dr_grpo", long)
    assert out_short.loss.item() == pytest.approx(-1 / 24, rel=1e-6)
    assert out_long.loss.item() == pytest.approx(-1 / 24, rel=1e-6)
    torch.testing.assert_close(grad(out_short, short)[:, 5:], grad(out_long, long)[:, 20:])


def test_dr_grpo_without_a_generation_limit_is_an_error_not_the_mask_width():
    inputs = behind_prompt([[-1.0, -2.0], [-1.5], [-0.3]], 5, None)
    with pytest.raises(ValueError, match="needs the generation limit L_max") as err:
        run("dr_grpo", inputs)
    assert "\n" not in str(err.value) and "max_completion_length" in str(err.value)
    with pytest.raises(ValueError, match="positive"):
        run("dr_grpo", inputs, max_completion_length=0)


def test_dapo_drops_flat_groups_from_the_token_mean():
    """Group 0: rewards (1, 0), 2 + 1 tokens, A = ±a. Group 1: rewards (1, 1), 3 + 3 tokens, A = 0.

    loss = (−a − a + a)/3 kept tokens = −a/3 = −0.2356 (not −a/9); half the groups kept.
    """
    inputs = rollouts(
        [[-1.0, -2.0, 0.0], [-1.5, 0.0, 0.0], [-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]],
        [1.0, 0.0, 1.0, 1.0],
        [0, 0, 1, 1],
    )
    out = run("dapo", inputs)
    assert out.loss.item() == pytest.approx(-A4 / 3, rel=1e-5)
    assert out.metrics["groups_kept_frac"] == 0.5
    assert grad(out, inputs)[2:].abs().sum().item() == 0.0


def test_dapo_clip_higher_keeps_gradient_that_grpo_clips():
    """Ratio 1.25 with A > 0: inside DAPO's 1 + 0.28, outside GRPO's 1 + 0.2."""
    ratio = [[math.log(1.25), 0.0], [0.0, 0.0]]
    dapo_in, grpo_in = two_rollouts(log_ratio=ratio), two_rollouts(log_ratio=ratio)
    assert grad(run("dapo", dapo_in), dapo_in)[0, 0].item() < 0.0
    assert grad(run("grpo", grpo_in), grpo_in)[0, 0].item() == 0.0


def test_gspo_hand_value_clips_whole_sequences():
    """Mean token log-ratios: rollout 0 (A = +a): 1e-3 → s = e^1e-3 > 1 + 4e-4, clipped to 1.0004;
    rollout 1 (A = −a): (2e-4 + 4e-4)/2 = 3e-4 → s = e^3e-4, inside the band.

    loss = (−1.0004a + e^3e-4·a)/2 = −3.5334e-5; rollout 0's tokens get zero gradient.
    """
    inputs = rollouts(
        [[-1.0, -2.0], [-1.5, -0.5]], [1.0, 0.0], [0, 0], log_ratio=[[1e-3, 1e-3], [2e-4, 4e-4]]
    )
    out = run("gspo", inputs)
    assert out.loss.item() == pytest.approx((-1.0004 * A4 + math.exp(3e-4) * A4) / 2, abs=1e-7)
    assert out.metrics["clip_frac"] == 0.5
    g = grad(out, inputs)
    assert g[0].abs().sum().item() == 0.0
    # s_1 = exp(mean_t log r): ∂/∂logp_{1,t} of s_1·(−A)·(−1)/2 = s_1·a/(2·2) per token
    torch.testing.assert_close(g[1], torch.full((2,), math.exp(3e-4) * A4 / 4), rtol=1e-4, atol=0)


def test_cispo_hand_gradient_keeps_clipped_tokens():
    """Ratios 6 and 1 (A = +a), 0.5 (A = −a); ε_max = 5: weights sg(5), sg(1), sg(0.5).

    loss = −(5·a·(−1) + 1·a·(−2) + 0.5·(−a)·(−1.5))/3 = (5a + 2a − 0.75a)/3.
    ∂loss/∂logp = −w·A/3: (−5a/3, −a/3, +0.5a/3): the clipped token still learns (PPO: 0).
    """
    inputs = two_rollouts(log_ratio=[[math.log(6.0), 0.0], [math.log(0.5), 0.0]])
    out = run("cispo", inputs)
    assert out.loss.item() == pytest.approx((5 * A4 + 2 * A4 - 0.75 * A4) / 3, rel=1e-5)
    torch.testing.assert_close(grad(out, inputs), t([[-5 * A4 / 3, -A4 / 3], [0.5 * A4 / 3, 0.0]]))
    assert out.metrics["clip_frac"] == pytest.approx(1 / 3)


def test_rloo_baseline_excludes_self():
    """Rewards (3, 1, 2): baselines (1+2)/2 = 1.5, (3+2)/2 = 2.5, (3+1)/2 = 2 → A = (1.5, −1.5, 0).

    The group mean 2 would give (1, −1, 0); LOO is k/(k−1) times that. On-policy the loss is
    −mean(ρ·A) = 0 and ∂/∂logp of every token of rollout i is −A_i/3.
    """
    adv = leave_one_out_advantages(t([3.0, 1.0, 2.0]), torch.tensor([0, 0, 0]))
    torch.testing.assert_close(adv, t([1.5, -1.5, 0.0]))
    inputs = rollouts([[-1.0, -1.0], [-2.0, 0.0], [-0.5, -0.5]], [3.0, 1.0, 2.0], [0, 0, 0])
    out = run("rloo", inputs)
    assert out.loss.item() == pytest.approx(0.0, abs=1e-7)
    torch.testing.assert_close(grad(out, inputs), t([[-0.5, -0.5], [0.5, 0.0], [0.0, 0.0]]))


def test_rloo_kl_penalty_enters_the_reward():
    """β = 0.5, Σ_t(old − ref) = (1, 0): penalised rewards (1 − 0.5, 0) → A = (0.5, −0.5); KL metric 1/3."""
    inputs = rollouts([[-1.0, -1.0], [-2.0, 0.0]], [1.0, 0.0], [0, 0], ref=[[-1.5, -1.5], [-2.0, 0.0]])
    out = losses.get("rloo")(inputs, beta=0.5)
    torch.testing.assert_close(grad(out, inputs), t([[-0.25, -0.25], [0.25, 0.0]]))
    assert out.metrics["kl"] == pytest.approx(1 / 3)


def test_rloo_singleton_group_has_zero_advantage():
    assert leave_one_out_advantages(t([5.0, 1.0, 2.0]), torch.tensor([0, 1, 1])).tolist() == [0.0, -1.0, 1.0]


def test_reinforce_pp_hand_advantages():
    """β = 0.5, k1 KL (old − ref) = (0.2, 0.1) and (0.3); rewards (1, 0).

    A = r − β·Σ_{s≥t} KL: (1 − 0.15, 1 − 0.05) = (0.85, 0.95) and −0.15. Batch mean 0.55,
    population std sqrt(0.74/3) = 0.496655 → A_norm = (0.604040, 0.805387, −1.409428).
    On-policy ∂loss/∂logp_t = −A_norm_t/3.
    """
    inputs = rollouts([[-1.0, -1.0], [-2.0, 0.0]], [1.0, 0.0], ref=[[-1.2, -1.1], [-2.3, 0.0]])
    out = losses.get("reinforce_pp")(inputs, beta=0.5)
    a = [0.85, 0.95, -0.15]
    mean, std = sum(a) / 3, math.sqrt(sum((x - 0.55) ** 2 for x in a) / 3)
    norm = [(x - mean) / (std + 1e-8) for x in a]
    torch.testing.assert_close(grad(out, inputs), t([[-norm[0] / 3, -norm[1] / 3], [-norm[2] / 3, 0.0]]))
    assert out.metrics["adv_mean"] == pytest.approx(mean, rel=1e-5)
    assert out.metrics["kl"] == pytest.approx(0.2, rel=1e-5)


def test_ppo_gae_hand_example():
    """V = (0.5, 0.4, 0.3), reward 1 on the last token, γ = 1, λ = 0.95.

    δ = (0.4 − 0.5, 0.3 − 0.4, 1 − 0.3) = (−0.1, −0.1, 0.7).
    A_2 = 0.7; A_1 = −0.1 + 0.95·0.7 = 0.565; A_0 = −0.1 + 0.95·0.565 = 0.43675. R̂ = A + V.
    A second, padded rollout (V = (0.2, 0.1), reward 0): δ = (−0.1, −0.1); A = (−0.195, −0.1).
    """
    rewards = t([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    values = t([[0.5, 0.4, 0.3], [0.2, 0.1, 9.0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    adv, returns = gae(rewards, values, mask, gamma=1.0, lam=0.95)
    torch.testing.assert_close(adv, t([[0.43675, 0.565, 0.7], [-0.195, -0.1, 0.0]]))
    torch.testing.assert_close(returns, t([[0.93675, 0.965, 1.0], [0.005, 0.0, 0.0]]))


def test_ppo_hand_total_loss():
    """Same first rollout, on-policy, values = old values, no whitening.

    pg = −mean(A) = −(0.43675 + 0.565 + 0.7)/3 = −0.56725.
    vf = ½·mean((V − R̂)²) = ½·mean(A²) = ½·(0.190751 + 0.319225 + 0.49)/3 = 0.166663.
    loss = pg + 0.1·vf = −0.550584.
    """
    inputs = rollouts([[-1.0, -1.0, -1.0]], [1.0], values=[[0.5, 0.4, 0.3]])
    out = losses.get("ppo")(inputs, whiten_advantages=False)
    adv = [0.43675, 0.565, 0.7]
    vf = 0.5 * sum(a * a for a in adv) / 3
    assert out.metrics["pg_loss"] == pytest.approx(-sum(adv) / 3, rel=1e-5)
    assert out.metrics["vf_loss"] == pytest.approx(vf, rel=1e-5)
    assert out.loss.item() == pytest.approx(-sum(adv) / 3 + 0.1 * vf, rel=1e-5)


def test_ppo_value_clip_stops_gradient_of_overshooting_values():
    """V_old = 0, R̂ = 1 (reward 1, one token). V moved 0.5 toward R̂: the clipped V = 0.2 is worse,
    (0.2 − 1)² > (0.5 − 1)², so the max picks the clipped branch: zero value gradient.
    Moved 0.5 away (V = −0.5): the unclipped branch is worse and keeps its gradient 0.1·(V − R̂).
    """
    for moved, expect_zero in [(0.5, True), (-0.5, False)]:
        inputs = rollouts([[-1.0]], [1.0], values=[[moved]], old_values=t([[0.0]]))
        out = losses.get("ppo")(inputs, whiten_advantages=False)
        (g,) = torch.autograd.grad(out.loss, inputs.values)
        assert out.metrics["vf_clip_frac"] == (1.0 if expect_zero else 0.0)
        assert g.item() == pytest.approx(0.0 if expect_zero else 0.1 * (moved - 1.0))


@pytest.mark.parametrize("name", ["online_dpo", "spin"])
def test_pair_losses_hand_value(name):
    """Log-ratios +0.5 (chosen) and −0.5 (rejected): h = 1, loss = −log σ(0.1) = log(1 + e^−0.1)."""
    pairs = LossInputs(
        chosen_logps=t([-1.0]).requires_grad_(True),
        rejected_logps=t([-2.0]).requires_grad_(True),
        ref_chosen_logps=t([-1.5]),
        ref_rejected_logps=t([-1.5]),
    )
    out = losses.get(name)(pairs)
    assert out.loss.item() == pytest.approx(math.log(1 + math.exp(-0.1)), rel=1e-6)
    assert out.metrics["rewards/margin"] == pytest.approx(0.1, rel=1e-5)
    (g,) = torch.autograd.grad(out.loss, pairs.chosen_logps)
    assert g.item() < 0.0  # preferring the chosen lowers the loss


def test_pair_losses_beta_to_zero_gives_log2():
    pairs = LossInputs(
        chosen_logps=t([-1.0]),
        rejected_logps=t([-9.0]),
        ref_chosen_logps=t([-5.0]),
        ref_rejected_logps=t([-1.0]),
    )
    assert losses.get("spin")(pairs, beta=1e-9).loss.item() == pytest.approx(math.log(2), rel=1e-6)


def test_online_dpo_reports_grader_score_margin():
    pairs = LossInputs(
        chosen_logps=t([-1.0, -2.0]),
        rejected_logps=t([-2.0, -2.0]),
        ref_chosen_logps=t([-1.0, -2.0]),
        ref_rejected_logps=t([-2.0, -2.0]),
        chosen_rewards=t([1.0, 0.5]),
        rejected_rewards=t([0.0, 0.5]),
    )
    assert losses.get("online_dpo")(pairs).metrics["scores/margin"] == pytest.approx(0.5)


# --- properties ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ONLINE)
def test_positive_advantage_pushes_log_prob_up(name):
    """Gradient descent raises the log-probs of the better rollout and lowers the worse one's."""
    inputs = two_rollouts(log_ratio=[[0.05, -0.05], [0.02, 0.0]])
    g = grad(run(name, inputs), inputs)
    assert (g[0] < 0).all(), g
    assert g[1, 0] > 0, g


@pytest.mark.parametrize("name", GROUP_LOSSES)
def test_identical_group_rewards_give_zero_advantage_and_gradient(name):
    inputs = rollouts(
        [[-1.0, -2.0], [-1.5, -0.3], [-0.7, 0.0]], [0.1, 0.1, 0.1], [4, 4, 4], log_ratio=[[0.1, -0.1]] * 3
    )
    out = run(name, inputs)
    assert out.metrics["adv_mean"] == 0.0 and out.metrics["adv_std"] == 0.0
    assert grad(out, inputs).abs().max().item() == 0.0


@pytest.mark.parametrize("name", TOKEN_CLIPPED)
def test_clipping_zeroes_gradient_outside_trust_region(name):
    """A > 0 and r = 1.5, or A < 0 and r = 0.5: clipped, zero gradient; A < 0 with r = 1.5 is not clipped."""
    inputs = two_rollouts(log_ratio=[[math.log(1.5), 0.0], [math.log(0.5), 0.0]])
    g = grad(run(name, inputs), inputs)
    assert g[0, 0].item() == 0.0 and g[1, 0].item() == 0.0
    assert g[0, 1].item() != 0.0
    unclipped = two_rollouts(log_ratio=[[0.0, 0.0], [math.log(1.5), 0.0]])
    assert grad(run(name, unclipped), unclipped)[1, 0].item() > 0.0


@pytest.mark.parametrize("name", ONLINE)
def test_old_logps_none_is_on_policy_ratio_one_with_gradient(name):
    on = two_rollouts()
    logps = on.token_logps.detach()
    off = rollouts(logps.tolist(), [1.0, 0.0], [0, 0], log_ratio=[[0.0, 0.0], [0.0, 0.0]])
    out_on, out_off = run(name, on), run(name, off)
    assert out_on.metrics["ratio_mean"] == 1.0
    assert out_on.loss.item() == pytest.approx(out_off.loss.item(), abs=1e-7)
    g_on = grad(out_on, on)
    torch.testing.assert_close(g_on, grad(out_off, off))
    assert g_on.abs().sum() > 0


@pytest.mark.parametrize("name", ONLINE)
def test_metrics_are_floats_and_gradient_flows_only_through_policy(name):
    inputs = two_rollouts(log_ratio=[[0.1, -0.2], [0.3, 0.0]], ref=[[-1.2, -1.8], [-1.0, 0.0]])
    out = run(name, inputs, beta=0.1)
    for key in ["clip_frac", "ratio_mean", "adv_mean", "adv_std", "reward_mean", "kl"]:
        assert isinstance(out.metrics[key], float), key
    g = grad(out, inputs)
    assert torch.isfinite(g).all() and g.abs().sum() > 0
    assert inputs.ref_token_logps.grad is None and not inputs.ref_token_logps.requires_grad


@pytest.mark.parametrize("name", ONLINE)
def test_values_off_the_mask_do_not_matter(name):
    """Behaviour/reference log-probs of padding (here 80) change neither loss nor gradient."""
    clean = two_rollouts(log_ratio=[[0.1, -0.2], [0.3, 0.0]], ref=[[-1.2, -1.8], [-1.0, 0.0]])
    dirty = two_rollouts(log_ratio=[[0.1, -0.2], [0.3, 0.0]], ref=[[-1.2, -1.8], [-1.0, 80.0]])
    dirty.old_token_logps = dirty.old_token_logps + t([[0.0, 0.0], [0.0, 80.0]])
    out_clean, out_dirty = run(name, clean, beta=0.1), run(name, dirty, beta=0.1)
    assert out_dirty.loss.item() == pytest.approx(out_clean.loss.item(), rel=1e-6)
    torch.testing.assert_close(grad(out_dirty, dirty), grad(out_clean, clean))


@pytest.mark.parametrize("name", ONLINE)
def test_staleness_metric(name):
    inputs = rollouts(
        [[-1.0], [-2.0], [-1.0], [-0.5]],
        [1.0, 0.0, 1.0, 0.0],
        [0, 0, 1, 1],
        policy_versions=torch.tensor([3, 4, 5, 5]),
        current_version=5,
    )
    out = run(name, inputs)
    assert out.metrics["staleness"] == pytest.approx(0.75)
    assert out.metrics["staleness_max"] == 2.0
    inputs.current_version = None
    with pytest.raises(ValueError, match="current_version"):
        run(name, inputs)


@pytest.mark.parametrize("name", ONLINE + ["online_dpo", "spin"])
def test_missing_inputs_raise_one_line_error_naming_the_loss(name):
    with pytest.raises(ValueError, match=f"loss '{name}' needs LossInputs") as err:
        losses.get(name)(LossInputs(mask=t([[1.0]])))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["sgrpo", "dr_grpo", "dapo", "gspo", "cispo", "ppo"])
def test_kl_coefficient_requires_reference(name):
    with pytest.raises(ValueError, match="ref_token_logps"):
        run(name, two_rollouts(), beta=0.1)


# --- limits ---------------------------------------------------------------------------------


def test_gspo_on_one_token_responses_is_grpo():
    """With |o_i| = 1 the sequence ratio is the token ratio."""
    kw = {"log_ratio": [[0.3], [-0.4], [0.1]]}
    a = rollouts([[-1.0], [-2.0], [-0.5]], [1.0, 0.0, 0.5], **kw)
    b = rollouts([[-1.0], [-2.0], [-0.5]], [1.0, 0.0, 0.5], **kw)
    out_gspo, out_grpo = run("gspo", a, epsilon=0.2, epsilon_high=0.2), run("grpo", b)
    assert out_gspo.loss.item() == pytest.approx(out_grpo.loss.item(), rel=1e-6)
    torch.testing.assert_close(grad(out_gspo, a), grad(out_grpo, b))


def test_dapo_with_symmetric_clip_and_equal_lengths_is_grpo():
    logps = [[-1.0, -2.0], [-1.5, -0.3], [-0.7, -0.2], [-0.1, -0.9]]
    kw = {"log_ratio": [[0.3, -0.3], [0.1, 0.2], [-0.4, 0.0], [0.05, 0.5]]}
    a, b = (
        rollouts(logps, [1.0, 0.0, 2.0, 1.0], [0, 0, 1, 1], **kw),
        rollouts(logps, [1.0, 0.0, 2.0, 1.0], [0, 0, 1, 1], **kw),
    )
    out_dapo, out_grpo = run("dapo", a, epsilon_high=0.2), run("grpo", b)
    assert out_dapo.loss.item() == pytest.approx(out_grpo.loss.item(), rel=1e-6)


def test_cispo_on_policy_gradient_is_reinforce():
    """r = 1 ≤ ε_max: ∂loss/∂logp = −A/N (N = 3 tokens), A = (+a, −a)."""
    inputs = two_rollouts()
    torch.testing.assert_close(grad(run("cispo", inputs), inputs), t([[-A4 / 3, -A4 / 3], [A4 / 3, 0.0]]))


def test_rloo_with_two_rollouts_uses_the_other_reward():
    assert leave_one_out_advantages(t([1.0, 0.25]), torch.tensor([0, 0])).tolist() == [0.75, -0.75]


def test_reinforce_pp_without_kl_is_global_z_score_of_rewards():
    """β = 0, one token each: A = rewards; z-scored over the batch (population std)."""
    inputs = rollouts([[-1.0], [-1.0], [-1.0], [-1.0]], [1.0, 0.0, 0.0, 3.0], [0, 1, 2, 3])
    rewards = t([1.0, 0.0, 0.0, 3.0])
    z = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-8)
    torch.testing.assert_close(grad(run("reinforce_pp", inputs), inputs)[:, 0], -z / 4)


@pytest.mark.parametrize(("lam", "expected"), [(1.0, [0.5, 0.6, 0.7]), (0.0, [-0.1, -0.1, 0.7])])
def test_gae_limits_monte_carlo_and_td(lam, expected):
    """λ = 1: A_t = R − V_t (Monte Carlo); λ = 0: A_t = δ_t (one-step TD)."""
    adv, _ = gae(t([[0.0, 0.0, 1.0]]), t([[0.5, 0.4, 0.3]]), t([[1, 1, 1]]), gamma=1.0, lam=lam)
    torch.testing.assert_close(adv, t([expected]))


# --- specs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ONLINE + ["online_dpo", "spin"])
def test_spec_capabilities(name):
    spec = losses.get(name)
    meta = spec.metadata()
    assert meta["paradigm"] == "online" and meta["paper"].startswith("arXiv:")
    pairs = name in ("online_dpo", "spin")
    assert meta["data"] == ("pairs" if pairs else "online")
    assert meta["generates_own_pairs"] is pairs
    assert meta["needs_value_model"] is (name == "ppo")
    assert meta["updates_reference"] is (name == "spin")
    if pairs:
        assert meta["chosen_source"] == ("gold" if name == "spin" else "self_play")
        assert meta["needs_reference"]
    kwonly = set(spec.fn.__code__.co_varnames[1 : 1 + spec.fn.__code__.co_kwonlyargcount])
    assert kwonly == set(spec.defaults)


def test_on_policy_sgrpo_and_cispo_have_the_same_gradient():
    """With one update per batch of rollouts (``inner_epochs=1, sync_every=1``) every ratio is 1:
    sgrpo's ``-min(r·A, clip(r)·A)`` has gradient ``-A·∇log π`` per token, and CISPO's
    ``-sg(min(r, ε_max))·A·log π`` has gradient ``-1·A·∇log π``; both take the token mean over
    the batch. So the two differ only in the std epsilon of ``A`` (1e-8 vs 1e-4), although their
    loss *values* differ. This is why the oxrl_core study (fully on-policy) gives SGRPO and CISPO
    identical accuracies; they come apart only off-policy (tested below with a log-ratio).
    """
    logps = [[-0.5, -1.0, -0.2], [-0.3, -0.7, 0.0], [-1.2, -0.1, -0.4], [-0.6, 0.0, 0.0]]
    rewards = [1.0, 0.0, 1.0, 1.0]
    gids = [0, 0, 1, 1]
    a, b = rollouts(logps, rewards, gids), rollouts(logps, rewards, gids)
    out_s, out_c = run("sgrpo", a), run("cispo", b)
    assert not torch.isclose(out_s.loss, out_c.loss)
    torch.testing.assert_close(grad(out_s, a), grad(out_c, b), rtol=1e-3, atol=1e-6)
    # off-policy (ratios far from 1) sgrpo clips tokens CISPO keeps: the gradients differ
    lr = [[0.6, -0.6, 0.5], [0.4, -0.5, 0.0], [-0.7, 0.6, 0.3], [0.5, 0.0, 0.0]]
    a, b = rollouts(logps, rewards, gids, log_ratio=lr), rollouts(logps, rewards, gids, log_ratio=lr)
    assert not torch.allclose(grad(run("sgrpo", a), a), grad(run("cispo", b), b), rtol=1e-2)
