"""Unit tests for the reference-based pairwise losses of group dpo_a (and for dpo itself).

Each loss gets (1) a value computed by hand on tiny tensors, the algebra in the docstring and the
number from ``math``, never from the code under test; (2) properties: which way the loss moves
when the chosen / rejected log-probs move, gradients only through the policy, limits that reduce
to DPO or to a closed form, and regression tests for the reference study's (oxRL's) bugs.

Shared notation: ``c = log π(y_w) − log π_ref(y_w)``, ``r = log π(y_l) − log π_ref(y_l)``,
``h = c − r``, ``sp(x) = log(1 + e^x)`` (so ``−log σ(x) = sp(−x)``), ``σ`` the logistic function.
"""

from __future__ import annotations

import math

import pytest
import torch

import losses
from losses import LossInputs

NAMES = [
    "dpo",
    "ipo",
    "cdpo",
    "robust_dpo",
    "hinge",
    "exo",
    "nca",
    "bco",
    "sppo",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "ln_dpo",
    "dpop",
    "rdpo",
]
DTYPE = torch.float64


def sp(x: float) -> float:
    return math.log1p(math.exp(x))


def sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _tokens(totals, lens, grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) token log-probs that sum to ``totals`` over ``lens`` tokens, and their mask."""
    width = max(max(lens), 2)
    lens_t = torch.tensor(lens, dtype=DTYPE)
    mask = (torch.arange(width)[None, :] < lens_t[:, None]).to(DTYPE)
    tok = (torch.tensor(totals, dtype=DTYPE) / lens_t)[:, None] * mask
    return tok.detach().requires_grad_(grad), mask


def make(pc, pr, rc, rr, lc=None, lr=None):
    """LossInputs from summed policy/reference log-probs of chosen (pc, rc) and rejected (pr, rr).

    Returns ``(inputs, chosen_token_leaf, rejected_token_leaf, ref_leaves)``: the policy token
    log-probs are leaves with grad, the summed log-probs are computed from them; the reference
    tensors have no grad, as the trainer provides them.
    """
    lc = lc or [1] * len(pc)
    lr = lr or [1] * len(pr)
    ct, cm = _tokens(pc, lc, grad=True)
    rt, rm = _tokens(pr, lr, grad=True)
    rct, _ = _tokens(rc, lc, grad=False)
    rrt, _ = _tokens(rr, lr, grad=False)
    inputs = LossInputs(
        chosen_logps=(ct * cm).sum(-1),
        rejected_logps=(rt * rm).sum(-1),
        chosen_token_logps=ct * cm,
        rejected_token_logps=rt * rm,
        chosen_mask=cm,
        rejected_mask=rm,
        ref_chosen_logps=(rct * cm).sum(-1),
        ref_rejected_logps=(rrt * rm).sum(-1),
        ref_chosen_token_logps=rct * cm,
        ref_rejected_token_logps=rrt * rm,
    )
    return inputs, ct, rt, (rct, rrt)


def value(name: str, inputs: LossInputs, **hparams) -> float:
    return float(losses.get(name)(inputs, **hparams).loss.detach())


def random_inputs(seed: int = 0, batch: int = 3):
    g = torch.Generator().manual_seed(seed)
    pc, pr, rc, rr = ((-(torch.rand(batch, generator=g) * 4 + 1)).tolist() for _ in range(4))
    lc = torch.randint(1, 5, (batch,), generator=g).tolist()
    lr = torch.randint(1, 5, (batch,), generator=g).tolist()
    return make(pc, pr, rc, rr, lc, lr)


# The running example: c = -3 - (-4) = 1, r = -5 - (-4) = -1, h = 2; |y_w| = 2, |y_l| = 4 tokens.
def example():
    return make([-3.0], [-5.0], [-4.0], [-4.0], [2], [4])[0]


# --------------------------------------------------------------------------------------------
# (1) hand-computed values
# --------------------------------------------------------------------------------------------


def test_dpo_value():
    """β = 0.5, h = 2: L = −log σ(βh) = sp(−1) = 0.31326..."""
    assert value("dpo", example(), beta=0.5) == pytest.approx(sp(-1.0), rel=1e-12)


def test_dpo_label_smoothing_value():
    """β = 0.5, ε = 0.25: L = 0.75·sp(−1) + 0.25·sp(1)."""
    expected = 0.75 * sp(-1.0) + 0.25 * sp(1.0)
    assert value("dpo", example(), beta=0.5, label_smoothing=0.25) == pytest.approx(expected, rel=1e-12)


def test_cdpo_value():
    """cDPO = DPO with ε: β = 0.5, ε = 0.25 gives 0.75·sp(−1) + 0.25·sp(1) = 0.56826..."""
    expected = 0.75 * sp(-1.0) + 0.25 * sp(1.0)
    assert value("cdpo", example(), beta=0.5, label_smoothing=0.25) == pytest.approx(expected, rel=1e-12)


def test_robust_dpo_value():
    """β = 0.5, ε = 0.25, βh = 1: L = [0.75·sp(−1) − 0.25·sp(1)] / (1 − 0.5) = −0.18674...

    (The de-biased loss may be negative; oxRL's flipped sign would give +1.12652.)
    """
    expected = (0.75 * sp(-1.0) - 0.25 * sp(1.0)) / 0.5
    assert value("robust_dpo", example(), beta=0.5, label_smoothing=0.25) == pytest.approx(
        expected, rel=1e-12
    )


def test_ipo_value_is_per_token():
    """β = 0.5, target 1/(2β) = 1. Per token: c/|y_w| = 1/2, r/|y_l| = −1/4, h̄ = 0.75:
    L = (0.75 − 1)² = 0.0625. oxRL's summed form would give (2 − 1)² = 1.
    """
    assert value("ipo", example(), beta=0.5) == pytest.approx(0.0625, rel=1e-12)


def test_hinge_value():
    """β = 0.25: max(0, 1 − 0.25·2) = 0.5; β = 1: max(0, 1 − 2) = 0."""
    assert value("hinge", example(), beta=0.25) == pytest.approx(0.5, rel=1e-12)
    assert value("hinge", example(), beta=1.0) == 0.0


def test_exo_value():
    """β = 0.5, ε = 0.1, z = βh = 1: q_w = σ(1), q_l = σ(−1),
    L = q_w·(log q_w − log 0.9) + q_l·(log q_l − log 0.1).
    """
    qw, ql = sig(1.0), sig(-1.0)
    expected = qw * (math.log(qw) - math.log(0.9)) + ql * (math.log(ql) - math.log(0.1))
    assert value("exo", example(), beta=0.5, label_smoothing=0.1) == pytest.approx(expected, rel=1e-12)


def test_nca_value():
    """β = 0.5: r_w = 0.5, r_l = −0.5. L = sp(−0.5) + ½·sp(0.5) + ½·sp(−0.5)."""
    expected = sp(-0.5) + 0.5 * sp(0.5) + 0.5 * sp(-0.5)
    assert value("nca", example(), beta=0.5) == pytest.approx(expected, rel=1e-12)


def test_bco_value_without_shift():
    """β = 0.5, δ = 0: L = −log σ(0.5) − log σ(0.5) = 2·sp(−0.5)."""
    assert value("bco", example(), beta=0.5, reward_shift="none") == pytest.approx(2 * sp(-0.5), rel=1e-12)


def test_bco_value_with_batch_shift():
    """Two pairs, β = 0.5. Pair 1: c = 1, r = −1; pair 2: c = 3, r = 1.
    Rewards r_w = (0.5, 1.5), r_l = (−0.5, 0.5); δ = mean of all four = 0.5.
    Pair 1: sp(−(0.5 − 0.5)) + sp(−0.5 − 0.5) = ln 2 + sp(−1);
    pair 2: sp(−(1.5 − 0.5)) + sp(0.5 − 0.5) = sp(−1) + ln 2. Mean: ln 2 + sp(−1).
    """
    inputs = make([-3.0, -1.0], [-5.0, -3.0], [-4.0, -4.0], [-4.0, -4.0])[0]
    out = losses.get("bco")(inputs, beta=0.5, reward_shift="batch")
    assert out.loss.item() == pytest.approx(math.log(2) + sp(-1.0), rel=1e-12)
    assert out.metrics["bco/delta"] == pytest.approx(0.5, rel=1e-12)


def test_sppo_value():
    """β = 0.25, target 1/(2β) = 2: L = (c − 2)² + (r + 2)² = (−1)² + 1² = 2."""
    assert value("sppo", example(), beta=0.25) == pytest.approx(2.0, rel=1e-12)


def test_sppo_default_is_the_authors_beta():
    """β = 1e-3 (η = 1000, uclaml/SPPO scripts/pipeline.sh); targets ±500:
    L = (1 − 500)² + (−1 + 500)² = 2·499² = 498002. (Version 1, β = 0.1: (1 − 5)² + (−1 + 5)² = 32.)"""
    assert losses.get("sppo").defaults == {"beta": 0.001} and losses.get("sppo").version == 2
    assert value("sppo", example()) == pytest.approx(2 * 499.0**2, rel=1e-12)


def aot_batch():
    """Pair 1: policy (−3, −5), ref (−6, −4); pair 2: policy (−5, −4), ref (−4, −5)."""
    return make([-3.0, -5.0], [-5.0, -4.0], [-6.0, -4.0], [-4.0, -5.0])[0]


def test_aot_value():
    """Policy margins u = (2, −1), reference margins v = (−2, 1): their orders disagree.
    Sorted: u = (−1, 2), v = (−2, 1), Δ = (1, 1). β = 1: L = sp(−1).
    (Per-pair DPO would be [sp(−4) + sp(2)] / 2 = 1.0725...)
    """
    assert value("aot", aot_batch(), beta=1.0, label_smoothing=0.0) == pytest.approx(sp(-1.0), rel=1e-12)


def test_aot_value_smoothed():
    """Same batch, ε = 0.2: each quantile gives 0.8·sp(−1) + 0.2·sp(1)."""
    expected = 0.8 * sp(-1.0) + 0.2 * sp(1.0)
    assert value("aot", aot_batch(), beta=1.0, label_smoothing=0.2) == pytest.approx(expected, rel=1e-12)


def test_aot_unpaired_value():
    """Same batch. c = (−3+6, −5+4) = (3, −1), r = (−5+4, −4+5) = (−1, 1).
    Sorted: c = (−1, 3), r = (−1, 1), Δ = (0, 2). β = 1: L = [ln 2 + sp(−2)] / 2.
    """
    expected = (math.log(2) + sp(-2.0)) / 2
    assert value("aot_unpaired", aot_batch(), beta=1.0, label_smoothing=0.0) == pytest.approx(
        expected, rel=1e-12
    )


def test_apo_zero_value():
    """β = 0.5: (1 − σ(0.5)) + σ(−0.5) = 2·σ(−0.5)."""
    assert value("apo_zero", example(), beta=0.5) == pytest.approx(2 * sig(-0.5), rel=1e-12)


def test_apo_down_value():
    """β = 0.5: σ(r_w) + 1 − σ(r_w − r_l) = σ(0.5) + 1 − σ(1)."""
    assert value("apo_down", example(), beta=0.5) == pytest.approx(sig(0.5) + 1 - sig(1.0), rel=1e-12)


def test_discopop_value():
    """β = 0.5, τ = 0.05: ρ = 1, m = σ(20); L = (1 − m)·sp(−1) + m·e^{−1}."""
    m = sig(20.0)
    expected = (1 - m) * sp(-1.0) + m * math.exp(-1.0)
    assert value("discopop", example(), beta=0.5, discopop_tau=0.05) == pytest.approx(expected, rel=1e-12)


def test_ln_dpo_value():
    """β = 2: per token c/2 = 0.5, r/4 = −0.25, margin 0.75, z = 1.5: L = sp(−1.5)."""
    assert value("ln_dpo", example(), beta=2.0) == pytest.approx(sp(-1.5), rel=1e-12)


def test_dpop_value():
    """Chosen falls below the reference: policy (−5, −7), ref (−4, −4): c = −1, r = −3, h = 2.
    Penalty max(0, −c) = 1; β = 0.5, λ = 2: z = 0.5·(2 − 2·1) = 0, L = ln 2 (DPO: sp(−1)).
    """
    inputs = make([-5.0], [-7.0], [-4.0], [-4.0])[0]
    out = losses.get("dpop")(inputs, beta=0.5, dpop_lambda=2.0)
    assert out.loss.item() == pytest.approx(math.log(2), rel=1e-12)
    assert out.metrics["dpop/penalty"] == pytest.approx(1.0)


def test_rdpo_value():
    """β = 0.5, α = 0.1, |y_w| − |y_l| = 2 − 4 = −2: z = 0.5·2 + 0.1·(−2) = 0.8, L = sp(−0.8).
    (oxRL's inverted term would give z = 1.2.)
    """
    out = losses.get("rdpo")(example(), beta=0.5, alpha=0.1)
    assert out.loss.item() == pytest.approx(sp(-0.8), rel=1e-12)
    assert out.metrics["rdpo/length_diff"] == -2.0


# --------------------------------------------------------------------------------------------
# (2) properties shared by every loss
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_spec_contract(name):
    spec = losses.get(name)
    assert (spec.name, spec.paradigm, spec.data, spec.needs_reference) == (name, "offline", "pairs", True)
    assert spec.paper and spec.description and spec.version >= 1
    assert "beta" in spec.defaults
    assert spec.metadata()["fn"].startswith(f"losses.{name}:")


@pytest.mark.parametrize("name", NAMES)
def test_gradient_flows_only_through_policy(name):
    """Loss is a finite scalar; policy token log-probs get finite, non-zero gradients on response
    tokens and zero on padding; the reference tensors (no grad) get none; metrics are plain floats.
    """
    inputs, ct, rt, refs = random_inputs(seed=1)
    out = losses.get(name)(inputs)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss) and out.loss.requires_grad
    out.loss.backward()
    for leaf, mask in ((ct, inputs.chosen_mask), (rt, inputs.rejected_mask)):
        assert torch.isfinite(leaf.grad).all()
        assert (leaf.grad[mask == 0] == 0).all()
        assert (leaf.grad[mask == 1] != 0).any()
    assert all(ref.grad is None and not ref.requires_grad for ref in refs)
    assert all(isinstance(v, float) and math.isfinite(v) for v in out.metrics.values())


@pytest.mark.parametrize("name", NAMES)
def test_reward_metrics_are_beta_log_ratios(name):
    """rewards/chosen = β·mean(c), rewards/rejected = β·mean(r), margin and accuracy from them."""
    inputs = make([-3.0, -2.0], [-5.0, -1.0], [-4.0, -4.0], [-4.0, -4.0], [2, 1], [3, 2])[0]
    beta = losses.get(name).defaults["beta"]
    metrics = losses.get(name)(inputs).metrics
    # c = (1, 2), r = (−1, 3)
    assert metrics["rewards/chosen"] == pytest.approx(beta * 1.5)
    assert metrics["rewards/rejected"] == pytest.approx(beta * 1.0)
    assert metrics["rewards/margin"] == pytest.approx(beta * 0.5)
    assert metrics["rewards/accuracy"] == pytest.approx(0.5)


def wrong_pair():
    """A mis-ranked pair: c = −10, r = +10 (summed), one token each."""
    return make([-14.0], [-6.0], [-4.0], [-16.0])


@pytest.mark.parametrize("name", NAMES)
def test_lowering_rejected_lowers_loss(name):
    """∂L/∂log π(y_l) > 0 on a mis-ranked pair, for every loss of the family."""
    inputs, _, rt, _ = wrong_pair()
    losses.get(name)(inputs).loss.backward()
    assert rt.grad[0, 0] > 0


@pytest.mark.parametrize("name", [n for n in NAMES if n != "apo_down"])
def test_raising_chosen_lowers_loss(name):
    """∂L/∂log π(y_w) < 0 on a mis-ranked pair (every loss but APO-down, which lowers y_w on purpose)."""
    inputs, ct, _, _ = wrong_pair()
    losses.get(name)(inputs).loss.backward()
    assert ct.grad[0, 0] < 0


def test_apo_down_pushes_chosen_down():
    """APO-down, β = 0.1, c = −10, r = 10: ∂L/∂c = β[σ'(βc) − σ'(β(c − r))] = 0.1[σ'(−1) − σ'(−2)] > 0."""
    inputs, ct, _, _ = wrong_pair()
    losses.get("apo_down")(inputs).loss.backward()
    dsig = lambda x: sig(x) * (1 - sig(x))  # noqa: E731
    assert float(ct.grad[0, 0]) == pytest.approx(0.1 * (dsig(-1.0) - dsig(-2.0)), rel=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_missing_field_names_the_loss(name):
    with pytest.raises(ValueError, match=f"loss '{name}' needs LossInputs"):
        losses.get(name)(LossInputs())


# --------------------------------------------------------------------------------------------
# (3) limits and per-loss properties
# --------------------------------------------------------------------------------------------


def dpo_value(inputs, beta, label_smoothing=0.0):
    return value("dpo", inputs, beta=beta, label_smoothing=label_smoothing)


def test_dpo_beta_to_zero_is_log2():
    """β → 0: −log σ(0) = ln 2 for any margin."""
    assert value("dpo", random_inputs()[0], beta=1e-9) == pytest.approx(math.log(2), rel=1e-6)


def test_dpo_label_smoothing_swaps_with_labels():
    """Smoothing ε on (y_w, y_l) equals smoothing 1 − ε on the swapped pair (y_l, y_w)."""
    a = make([-3.0], [-5.0], [-4.0], [-4.0])[0]
    b = make([-5.0], [-3.0], [-4.0], [-4.0])[0]
    assert dpo_value(a, 0.5, 0.2) == pytest.approx(dpo_value(b, 0.5, 0.8), rel=1e-12)


@pytest.mark.parametrize("name", ["cdpo", "robust_dpo"])
def test_zero_noise_is_dpo(name):
    inputs = random_inputs(seed=2)[0]
    assert value(name, inputs, beta=0.3, label_smoothing=0.0) == pytest.approx(
        dpo_value(inputs, 0.3), rel=1e-12
    )


def test_robust_dpo_is_unbiased_under_label_flips():
    """Chowdhury et al.: if the label is flipped with probability ε,
    (1 − ε)·L(y_w, y_l) + ε·L(y_l, y_w) = clean DPO loss. oxRL's flipped ε sign breaks this.
    """
    pc, pr, rc, rr = [-3.0, -2.0], [-5.0, -6.0], [-4.0, -3.0], [-4.5, -4.0]
    fwd, rev = make(pc, pr, rc, rr)[0], make(pr, pc, rr, rc)[0]
    eps, beta = 0.3, 0.7
    mixed = (1 - eps) * value("robust_dpo", fwd, beta=beta, label_smoothing=eps) + eps * value(
        "robust_dpo", rev, beta=beta, label_smoothing=eps
    )
    assert mixed == pytest.approx(dpo_value(fwd, beta), rel=1e-12)


@pytest.mark.parametrize(("name", "eps"), [("robust_dpo", 0.5), ("exo", 0.0), ("cdpo", 0.6)])
def test_label_smoothing_out_of_range_raises(name, eps):
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.get(name)(example(), label_smoothing=eps)


def test_ipo_zero_at_target_and_length_normalised():
    """IPO is 0 when the per-token margin equals 1/(2β); scaling both lengths (same summed
    log-ratios) changes it, which the summed form of oxRL would not.
    """
    # per token: c/|y_w| − r/|y_l| = 1/(2·0.5) = 1 with c = 1, r = −1, |y_w| = |y_l| = 2
    at_target = make([-3.0], [-5.0], [-4.0], [-4.0], [2], [2])[0]
    assert value("ipo", at_target, beta=0.5) == pytest.approx(0.0, abs=1e-12)
    longer = make([-3.0], [-5.0], [-4.0], [-4.0], [4], [4])[0]  # per-token margin 0.5
    assert value("ipo", longer, beta=0.5) == pytest.approx(0.25, rel=1e-12)


def test_hinge_zero_beyond_margin():
    """Once βh ≥ 1 the hinge loss and its gradient vanish."""
    inputs, ct, rt, _ = make([-3.0], [-5.0], [-4.0], [-4.0])  # h = 2
    out = losses.get("hinge")(inputs, beta=1.0)
    out.loss.backward()
    assert out.loss.item() == 0.0 and ct.grad.abs().sum() == 0 and rt.grad.abs().sum() == 0


def test_exo_minimum_at_smoothed_optimum():
    """KL(q‖p) ≥ 0 with equality, and zero gradient, at βh* = log((1 − ε)/ε)."""
    eps, beta = 0.1, 0.5
    h_star = math.log((1 - eps) / eps) / beta
    inputs, ct, _, _ = make([-4.0 + h_star], [-4.0], [-4.0], [-4.0])
    out = losses.get("exo")(inputs, beta=beta, label_smoothing=eps)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(0.0, abs=1e-12)
    assert float(ct.grad[0, 0]) == pytest.approx(0.0, abs=1e-12)
    assert value("exo", random_inputs()[0], beta=beta, label_smoothing=eps) > 0


def test_nca_beta_to_zero():
    """β → 0: −log σ(0) − ½ log σ(0) − ½ log σ(0) = 2 ln 2."""
    assert value("nca", random_inputs()[0], beta=1e-9) == pytest.approx(2 * math.log(2), rel=1e-6)


def test_bco_batch_shift_absorbs_a_common_offset():
    """With reward_shift="batch", adding the same k to every log-ratio leaves the loss unchanged
    (δ moves by βk); with δ = 0 it does not. When the batch's rewards average 0 the two agree.
    """
    base = make([-3.0, -2.0], [-5.0, -6.0], [-4.0, -3.0], [-4.5, -4.0])[0]
    shifted = make([-1.0, 0.0], [-3.0, -4.0], [-4.0, -3.0], [-4.5, -4.0])[0]  # k = 2
    assert value("bco", base, reward_shift="batch") == pytest.approx(
        value("bco", shifted, reward_shift="batch")
    )
    assert value("bco", base, reward_shift="none") != pytest.approx(
        value("bco", shifted, reward_shift="none")
    )
    centred = example()  # r_w = β, r_l = −β: mean 0
    assert value("bco", centred, reward_shift="batch") == pytest.approx(
        value("bco", centred, reward_shift="none")
    )


def test_bco_rejects_unknown_shift():
    with pytest.raises(ValueError, match="reward_shift"):
        losses.get("bco")(example(), reward_shift="moving")


def test_bco_running_mean_is_carried_as_state():
    """reward_shift="running" (version 2): δ is the cumulative mean of every reward seen so far.

    Batch 1: r_w = β·c, r_l = β·r with β = 0.1, c = (−3+4, −2+3) = (1, 1), r = (−5+4.5, −6+4) =
    (−0.5, −2): rewards (0.1, 0.1, −0.05, −0.2), mean −0.0125, count 4. With no state the first step
    equals the "batch" shift. Batch 2 = the same pairs again: its mean is −0.0125 too, so the running
    mean stays −0.0125 with count 8; a batch with rewards (0.1, 0.1, 0.1, 0.1) would move it to
    (4·(−0.0125) + 4·0.1)/8 = 0.04375.
    """
    base = make([-3.0, -2.0], [-5.0, -6.0], [-4.0, -3.0], [-4.5, -4.0])[0]
    spec = losses.get("bco")
    assert spec.initial_state == {"reward_mean": 0.0, "count": 0.0} and spec.version == 2
    first = spec(base)
    assert first.state["reward_mean"].item() == pytest.approx(-0.0125)
    assert first.state["count"].item() == 4
    assert first.loss.item() == pytest.approx(value("bco", base, reward_shift="batch"))
    up = make([-3.0, -3.0], [-5.0, -5.0], [-4.0, -4.0], [-6.0, -6.0])[0]  # c = r = 1: rewards all 0.1
    base.state = first.state
    up.state = first.state
    assert spec(base).state["reward_mean"].item() == pytest.approx(-0.0125)
    second = spec(up)
    assert second.state["reward_mean"].item() == pytest.approx(0.04375)
    assert second.metrics["bco/delta"] == pytest.approx(0.04375)


def test_sppo_zero_at_targets():
    """c = 1/(2β), r = −1/(2β) gives 0; β = 0.25: c = 2, r = −2."""
    inputs = make([-2.0], [-6.0], [-4.0], [-4.0])[0]
    assert value("sppo", inputs, beta=0.25) == 0.0


@pytest.mark.parametrize("name", ["aot", "aot_unpaired"])
def test_aot_single_pair_is_dpo(name):
    """With B = 1 sorting is the identity: AOT is DPO (ε = 0) and cDPO (ε > 0)."""
    inputs = make([-3.0], [-4.5], [-3.5], [-4.0])[0]
    assert value(name, inputs, beta=0.4, label_smoothing=0.0) == pytest.approx(
        dpo_value(inputs, 0.4), rel=1e-12
    )
    assert value(name, inputs, beta=0.4, label_smoothing=0.2) == pytest.approx(
        dpo_value(inputs, 0.4, 0.2), rel=1e-12
    )


def test_aot_is_dpo_when_orders_agree():
    """If policy and reference margins are ordered alike, the sorted coupling is the identity."""
    inputs = make([-3.0, -1.0], [-5.0, -4.0], [-4.0, -2.0], [-4.0, -4.5])[0]  # u = (2, 3), v = (0, 2.5)
    assert value("aot", inputs, beta=0.5) == pytest.approx(dpo_value(inputs, 0.5), rel=1e-12)


def test_apo_losses_are_bounded():
    """Both APO losses are sums of two terms in (0, 1)."""
    for seed in range(3):
        inputs = random_inputs(seed)[0]
        for name in ("apo_zero", "apo_down"):
            assert 0.0 < value(name, inputs, beta=2.0) < 2.0


def test_discopop_tau_limits():
    """τ → 0: hard switch, logistic for ρ < 0 and exponential for ρ > 0. τ → ∞: an even mix."""
    neg, pos = make([-5.0], [-4.0], [-4.0], [-4.0])[0], example()  # h = −1 and h = 2
    assert value("discopop", neg, beta=0.5, discopop_tau=1e-6) == pytest.approx(sp(0.5), rel=1e-9)
    assert value("discopop", pos, beta=0.5, discopop_tau=1e-6) == pytest.approx(math.exp(-1.0), rel=1e-9)
    expected = 0.5 * sp(-1.0) + 0.5 * math.exp(-1.0)
    assert value("discopop", pos, beta=0.5, discopop_tau=1e9) == pytest.approx(expected, rel=1e-6)


def test_ln_dpo_single_tokens_is_dpo():
    inputs = random_inputs(seed=3)[0]
    single = make(
        inputs.chosen_logps.tolist(),
        inputs.rejected_logps.tolist(),
        inputs.ref_chosen_logps.tolist(),
        inputs.ref_rejected_logps.tolist(),
    )[0]
    assert value("ln_dpo", single, beta=0.7) == pytest.approx(dpo_value(single, 0.7), rel=1e-12)


def test_dpop_reduces_to_dpo():
    """λ = 0 is DPO; so is any λ when π_θ(y_w) ≥ π_ref(y_w) (penalty inactive)."""
    inputs = random_inputs(seed=4)[0]
    assert value("dpop", inputs, beta=0.3, dpop_lambda=0.0) == pytest.approx(
        dpo_value(inputs, 0.3), rel=1e-12
    )
    above = make([-3.0, -2.0], [-5.0, -1.0], [-4.0, -2.0], [-4.0, -4.0])[0]  # c = (1, 0)
    assert value("dpop", above, beta=0.3, dpop_lambda=50.0) == pytest.approx(dpo_value(above, 0.3), rel=1e-12)
    below = make([-5.0], [-7.0], [-4.0], [-4.0])[0]
    assert value("dpop", below, beta=0.3, dpop_lambda=5.0) > dpo_value(below, 0.3)


def test_rdpo_reduces_to_dpo():
    inputs = random_inputs(seed=5)[0]
    assert value("rdpo", inputs, beta=0.3, alpha=0.0) == pytest.approx(dpo_value(inputs, 0.3), rel=1e-12)
    same_length = make([-3.0], [-5.0], [-4.0], [-4.0], [3], [3])[0]
    assert value("rdpo", same_length, beta=0.3, alpha=0.5) == pytest.approx(dpo_value(same_length, 0.3))


def test_rdpo_down_weights_pairs_with_a_longer_chosen():
    """The paper's sign: a longer chosen answer raises the logit, so the loss and the size of the
    gradient fall below DPO's (oxRL's inverted term raised them); a shorter one does the opposite.
    """
    pc, pr, rc, rr = [-3.0], [-5.0], [-4.0], [-4.0]

    def loss_and_grad(name, lc, lr, **hp):
        inputs, ct, _, _ = make(pc, pr, rc, rr, [lc], [lr])
        out = losses.get(name)(inputs, **hp)
        out.loss.backward()
        return out.loss.item(), float(ct.grad[0, 0].abs())

    dpo = loss_and_grad("dpo", 6, 2, beta=0.5)
    longer = loss_and_grad("rdpo", 6, 2, beta=0.5, alpha=0.1)
    shorter = loss_and_grad("rdpo", 2, 6, beta=0.5, alpha=0.1)
    assert longer[0] < dpo[0] and longer[1] < dpo[1]
    assert shorter[0] > dpo[0]
