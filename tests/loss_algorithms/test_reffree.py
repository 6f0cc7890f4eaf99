"""Reference-free, unpaired and SFT losses: simpo, cpo, orpo, alphapo, rrhf, kto, sft, rft.

Each loss gets a value computed by hand (the algebra is in the test's docstring, the number
is evaluated with ``math``), and property tests: the direction of the gradient, which inputs
carry gradient, and the limits in which a loss reduces to another.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from loss_fixtures import pair_from_tokens

import losses
from losses.dpo import dpo_loss
from losses.orpo import log1mexp
from losses.types import LossInputs

NAMES = ["simpo", "cpo", "orpo", "alphapo", "rrhf", "kto", "sft", "rft"]
LOG2 = math.log(2.0)


def softplus(z: float) -> float:
    """-log σ(-z) = log(1 + e^z)."""
    return math.log1p(math.exp(z))


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def mask_of(lens: list[int], width: int = 3) -> torch.Tensor:
    return torch.tensor([[1.0] * n + [0.0] * (width - n) for n in lens])


def pairs(chosen, rejected, chosen_lens, rejected_lens, grad: bool = False) -> LossInputs:
    """Pairwise inputs from summed log-probs and response lengths (token log-probs spread evenly)."""
    cm, rm = mask_of(chosen_lens), mask_of(rejected_lens)
    c = torch.tensor(chosen, dtype=torch.float64, requires_grad=grad)
    r = torch.tensor(rejected, dtype=torch.float64, requires_grad=grad)
    return LossInputs(
        chosen_logps=c,
        rejected_logps=r,
        chosen_token_logps=(c / cm.sum(-1)).unsqueeze(-1) * cm,
        rejected_token_logps=(r / rm.sum(-1)).unsqueeze(-1) * rm,
        chosen_mask=cm,
        rejected_mask=rm,
    )


# Shared example: chosen sums (-4, -6) over (2, 3) tokens -> means (-2, -2);
# rejected sums (-9, -2) over (3, 1) tokens -> means (-3, -2).
EXAMPLE = ([-4.0, -6.0], [-9.0, -2.0], [2, 3], [3, 1])


# --------------------------------------------------------------------------- specs


@pytest.mark.parametrize(
    "name, paradigm, data, ref, source",
    [
        ("simpo", "offline_ref_free", "pairs", False, "gold"),
        ("cpo", "offline_ref_free", "pairs", False, "gold"),
        ("orpo", "offline_ref_free", "pairs", False, "gold"),
        ("alphapo", "offline_ref_free", "pairs", False, "gold"),
        ("rrhf", "offline_ref_free", "pairs", False, "gold"),
        ("kto", "unpaired", "unpaired", True, "gold"),
        ("sft", "sft", "sft", False, "gold"),
        ("rft", "sft", "sft", False, "self_play"),
    ],
)
def test_spec_capabilities(name, paradigm, data, ref, source):
    spec = losses.get(name)
    assert (spec.name, spec.paradigm, spec.data, spec.needs_reference) == (name, paradigm, data, ref)
    assert spec.sft_source == source
    assert spec.paper.startswith("arXiv:")


@pytest.mark.parametrize("name", NAMES)
def test_defaults_are_exactly_the_keyword_only_hparams(name):
    spec = losses.get(name)
    params = list(inspect.signature(spec.fn).parameters.values())[1:]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    assert {p.name for p in params} == set(spec.defaults)


@pytest.mark.parametrize("name", NAMES)
def test_missing_fields_name_the_loss(name):
    with pytest.raises(ValueError, match=f"loss '{name}' needs LossInputs"):
        losses.get(name)(LossInputs())


def test_paper_defaults():
    assert losses.get("simpo").defaults == {"beta": 2.0, "simpo_gamma": 1.0, "label_smoothing": 0.0}
    assert losses.get("cpo").defaults == {
        "beta": 0.1,
        "cpo_alpha": 1.0,
        "label_smoothing": 0.0,
        "nll_reduction": "mean",
    }
    assert losses.get("orpo").defaults == {"beta": 0.1}
    assert losses.get("alphapo").defaults == {
        "alpha": 0.25,
        "beta": 2.5,
        "simpo_gamma": 0.1,
        "label_smoothing": 0.0,
    }
    assert losses.get("rrhf").defaults == {"rrhf_weight": 1.0, "length_penalty": 1.0, "nll_reduction": "mean"}
    assert losses.get("kto").defaults == {"beta": 0.1, "desirable_weight": 1.0, "undesirable_weight": 1.0}


# --------------------------------------------------------------------------- SimPO


def test_simpo_hand_value():
    """β=2, γ=1. Means: chosen (-2, -2), rejected (-3, -2).

    z1 = 2·(-2 + 3) - 1 = 1,  z2 = 2·(-2 + 2) - 1 = -1.
    L = ½[-logσ(1) - logσ(-1)] = ½[log(1 + e^-1) + log(1 + e)].
    Rewards β·mean: chosen (-4, -4), rejected (-6, -4); accuracy ½, margin 1.
    """
    out = losses.get("simpo")(pairs(*EXAMPLE), beta=2.0, simpo_gamma=1.0)
    assert out.loss.item() == pytest.approx(0.5 * (softplus(-1.0) + softplus(1.0)), rel=1e-12)
    assert out.metrics["rewards/chosen"] == pytest.approx(-4.0)
    assert out.metrics["rewards/rejected"] == pytest.approx(-5.0)
    assert out.metrics["rewards/accuracy"] == pytest.approx(0.5)
    assert out.metrics["rewards/margin"] == pytest.approx(1.0)


def test_simpo_label_smoothing_hand_value():
    """ε = 0.25, one pair with z = 2·(-2 + 3) - 1 = 1: L = 0.75·log(1 + e^-1) + 0.25·log(1 + e)."""
    inp = pairs([-4.0], [-9.0], [2], [3])
    out = losses.get("simpo")(inp, beta=2.0, simpo_gamma=1.0, label_smoothing=0.25)
    assert out.loss.item() == pytest.approx(0.75 * softplus(-1.0) + 0.25 * softplus(1.0), rel=1e-12)


def test_simpo_gradient_prefers_chosen_and_scales_with_inverse_length():
    """dL/d logπ(y_w) = -β σ(-z) / |y_w| < 0 and dL/d logπ(y_l) = +β σ(-z) / |y_l| > 0 (per pair, /B)."""
    inp = pairs(*EXAMPLE, grad=True)
    losses.get("simpo")(inp, beta=2.0, simpo_gamma=1.0).loss.backward()
    z = torch.tensor([1.0, -1.0], dtype=torch.float64)
    s = torch.sigmoid(-z)
    torch.testing.assert_close(inp.chosen_logps.grad, -2.0 * s / torch.tensor([2.0, 3.0]) / 2)
    torch.testing.assert_close(inp.rejected_logps.grad, 2.0 * s / torch.tensor([3.0, 1.0]) / 2)


def test_simpo_is_invariant_to_length_at_fixed_mean_logp():
    """Only the per-token mean enters: doubling both the sum and the length changes nothing."""
    short = losses.get("simpo")(pairs([-2.0], [-3.0], [1], [1])).loss
    long = losses.get("simpo")(pairs([-4.0], [-9.0], [2], [3])).loss
    torch.testing.assert_close(short, long)


def test_simpo_without_margin_on_single_tokens_is_reference_free_dpo():
    """γ = 0 and |y| = 1: SimPO = -logσ(β(logπ_w - logπ_l)) = DPO with log π_ref ≡ 0."""
    inp = pairs([-1.5, -0.2], [-0.7, -3.0], [1, 1], [1, 1])
    inp.ref_chosen_logps = torch.zeros(2, dtype=torch.float64)
    inp.ref_rejected_logps = torch.zeros(2, dtype=torch.float64)
    simpo = losses.get("simpo")(inp, beta=0.5, simpo_gamma=0.0).loss
    torch.testing.assert_close(simpo, dpo_loss(inp, beta=0.5).loss)


# --------------------------------------------------------------------------- CPO


def test_cpo_hand_value():
    """β=0.1, α=1. Margins logπ_w - logπ_l: (-4 + 9, -6 + 2) = (5, -4).

    L_prefer = ½[log(1 + e^{-0.5}) + log(1 + e^{0.4})];  L_NLL = -(-4 - 6)/(2 + 3 tokens) = 2, the
    token mean over the batch's chosen tokens (TRL, the authors' trainer). ``nll_reduction="sum"``:
    the mean of the summed log-probs, -½(-4 - 6) = 5 (version 1's default: loss = prefer + 5).
    """
    out = losses.get("cpo")(pairs(*EXAMPLE), beta=0.1, cpo_alpha=1.0)
    prefer = 0.5 * (softplus(-0.5) + softplus(0.4))
    assert out.loss.item() == pytest.approx(prefer + 2.0, rel=1e-12)
    assert out.metrics["prefer_loss"] == pytest.approx(prefer, rel=1e-12)
    assert out.metrics["nll"] == pytest.approx(2.0)
    assert out.metrics["rewards/chosen"] == pytest.approx(-0.5)
    summed = losses.get("cpo")(pairs(*EXAMPLE), nll_reduction="sum")
    assert summed.loss.item() == pytest.approx(prefer + 5.0, rel=1e-12)
    assert summed.metrics["nll"] == pytest.approx(5.0)


@pytest.mark.parametrize("name", ["cpo", "rrhf"])
def test_unknown_nll_reduction_is_an_error(name):
    with pytest.raises(ValueError, match="nll_reduction 'token'"):
        losses.get(name)(pairs(*EXAMPLE), nll_reduction="token")


def test_cpo_without_nll_is_dpo_with_a_uniform_reference():
    """cpo_alpha = 0: L = -logσ(β(logπ_w - logπ_l)), DPO with log π_ref ≡ 0 (also with smoothing)."""
    inp = pairs(*EXAMPLE)
    inp.ref_chosen_logps = torch.zeros(2, dtype=torch.float64)
    inp.ref_rejected_logps = torch.zeros(2, dtype=torch.float64)
    for eps in (0.0, 0.2):
        cpo = losses.get("cpo")(inp, beta=0.3, cpo_alpha=0.0, label_smoothing=eps).loss
        torch.testing.assert_close(cpo, dpo_loss(inp, beta=0.3, label_smoothing=eps).loss)


@pytest.mark.parametrize(("reduction", "per_pair"), [("mean", -2.0 / 5), ("sum", -2.0 / 2)])
def test_cpo_nll_pushes_the_chosen_up(reduction, per_pair):
    """The NLL adds -α/N (mean; N = 5 chosen tokens) or -α/B (sum; B = 2) to dL/dlogπ(y_w), α = 2,
    and nothing to the rejected."""
    a, b = pairs(*EXAMPLE, grad=True), pairs(*EXAMPLE, grad=True)
    losses.get("cpo")(a, cpo_alpha=0.0).loss.backward()
    losses.get("cpo")(b, cpo_alpha=2.0, nll_reduction=reduction).loss.backward()
    torch.testing.assert_close(
        b.chosen_logps.grad - a.chosen_logps.grad, torch.full((2,), per_pair, dtype=torch.float64)
    )
    torch.testing.assert_close(b.rejected_logps.grad, a.rejected_logps.grad)
    assert (a.rejected_logps.grad > 0).all() and (a.chosen_logps.grad < 0).all()


# --------------------------------------------------------------------------- AlphaPO


def test_alphapo_hand_value():
    """α=0.5, β=1, γ=0.1. r(m) = (1 - e^{-α m})/α = 2(1 - e^{-m/2}).

    Means chosen (-2, -2), rejected (-3, -2):
    z1 = 2(1 - e) - 2(1 - e^{1.5}) - 0.1 = 2(e^{1.5} - e) - 0.1,  z2 = -0.1.
    L = ½[log(1 + e^{-z1}) + log(1 + e^{0.1})].
    """
    out = losses.get("alphapo")(pairs(*EXAMPLE), alpha=0.5, beta=1.0, simpo_gamma=0.1)
    z1 = 2 * (math.exp(1.5) - math.e) - 0.1
    assert out.loss.item() == pytest.approx(0.5 * (softplus(-z1) + softplus(0.1)), rel=1e-12)
    assert out.metrics["rewards/chosen"] == pytest.approx(2 * (1 - math.e))


def test_alphapo_tends_to_simpo_as_alpha_goes_to_zero():
    """(1 - e^{-αm})/α = m - αm²/2 + O(α²): equal at α = 0, within O(α) near it."""
    inp = pairs(*EXAMPLE)
    simpo = losses.get("simpo")(inp, beta=2.0, simpo_gamma=0.5).loss
    exact = losses.get("alphapo")(inp, alpha=0.0, beta=2.0, simpo_gamma=0.5).loss
    near = losses.get("alphapo")(inp, alpha=1e-7, beta=2.0, simpo_gamma=0.5).loss
    torch.testing.assert_close(exact, simpo)
    torch.testing.assert_close(near, simpo, rtol=1e-6, atol=0.0)


def test_alphapo_gradient_prefers_chosen():
    """dr/dm = e^{-αm} > 0, so the sign of the gradient is SimPO's."""
    inp = pairs(*EXAMPLE, grad=True)
    losses.get("alphapo")(inp).loss.backward()
    assert (inp.chosen_logps.grad < 0).all() and (inp.rejected_logps.grad > 0).all()


# --------------------------------------------------------------------------- ORPO


def orpo_example(grad: bool = False) -> LossInputs:
    """Pair 1: chosen 2 tokens of p=½, rejected 1 token of p=0.2.  Pair 2: chosen 1 token of p=¼,
    rejected 2 tokens of p=½."""
    lp = torch.tensor(
        [[math.log(0.5), math.log(0.5), 0.0], [math.log(0.25), 0.0, 0.0]],
        dtype=torch.float64,
        requires_grad=grad,
    )
    rej = torch.tensor([[math.log(0.2), 0.0, 0.0], [math.log(0.5), math.log(0.5), 0.0]], dtype=torch.float64)
    cm, rm = mask_of([2, 1]), mask_of([1, 2])
    return pair_from_tokens(lp, rej, cm, rm)


def test_orpo_hand_value():
    """Mean probabilities: pair 1 chosen ½ (odds 1), rejected 0.2 (odds ¼) -> log-odds ratio log 4,
    logσ(log 4) = log(4/5).  Pair 2 chosen ¼ (odds ⅓), rejected ½ (odds 1) -> ratio log ⅓,
    logσ(log ⅓) = log(¼).  L_OR = -½[log 0.8 + log 0.25].
    L_SFT = token mean over the 3 chosen tokens = -(2 log ½ + log ¼)/3 = (4/3) log 2.
    L = L_SFT + λ L_OR with λ = 0.1.
    """
    out = losses.get("orpo")(orpo_example(), beta=0.1)
    l_or = -0.5 * (math.log(0.8) + math.log(0.25))
    assert out.loss.item() == pytest.approx(4 / 3 * LOG2 + 0.1 * l_or, rel=1e-12)
    assert out.metrics["nll"] == pytest.approx(4 / 3 * LOG2, rel=1e-12)
    assert out.metrics["log_odds_chosen"] == pytest.approx(0.5 * (math.log(4) + math.log(1 / 3)), rel=1e-12)
    assert out.metrics["log_odds_ratio"] == pytest.approx(-l_or, rel=1e-12)


def test_orpo_without_odds_term_is_sft_on_the_chosen():
    """λ = 0: ORPO is the token-mean NLL of the chosen responses, i.e. the sft loss."""
    inp = orpo_example()
    sft = losses.get("sft")(LossInputs(token_logps=inp.chosen_token_logps, mask=inp.chosen_mask)).loss
    torch.testing.assert_close(losses.get("orpo")(inp, beta=0.0).loss, sft)


def test_orpo_gradient_flows_to_chosen_tokens_and_is_finite_at_probability_one():
    inp = orpo_example(grad=True)
    losses.get("orpo")(inp).loss.backward()
    grad = inp.chosen_token_logps.grad
    assert torch.isfinite(grad).all() and (grad[inp.chosen_mask.bool()] < 0).all()
    certain = pairs([0.0], [-1.0], [2], [2])  # every chosen token has probability 1
    assert torch.isfinite(losses.get("orpo")(certain).loss)


def test_log1mexp_is_accurate_at_both_ends():
    """Mid-range: the direct log(1 - e^x). Near 0: log(1 - e^x) = log(-x) + x/2 + O(x²).
    Far below: log(1 - e^x) = -e^x - e^{2x}/2 + O(e^{3x}); the direct formula loses those digits."""
    x = torch.tensor([-1e-4, -0.1, -0.6931, -0.7, -3.0], dtype=torch.float64)
    torch.testing.assert_close(log1mexp(x), torch.log(1 - torch.exp(x)), rtol=1e-9, atol=0.0)
    near, far = log1mexp(torch.tensor([-1e-10, -30.0], dtype=torch.float64)).tolist()
    assert near == pytest.approx(math.log(1e-10) - 5e-11, rel=1e-12)
    assert far == pytest.approx(-math.exp(-30.0) - math.exp(-60.0) / 2, rel=1e-12)


# --------------------------------------------------------------------------- RRHF


def test_rrhf_hand_value():
    """Scores p = sum/len: chosen (-2, -2); rejected with sums (-9, -1) over (3, 1) tokens: (-3, -1).

    Pair 1 ranked right: max(0, -3 + 2) = 0.  Pair 2 wrong: max(0, -1 + 2) = 1.  L_rank = ½(0 + 1).
    L_ft = -½(-4/2 - 6/3) = 2 (token mean of each chosen, as the authors' code, averaged over the
    prompts).  With w = 2: L = 2·½ + 2 = 3.  ``nll_reduction="sum"`` (version 1): L_ft = -½(-4 - 6) = 5,
    L = 6.  With length_penalty = 0 the scores are the sums: L_rank = ½[max(0, -9 + 4) + max(0, -1 + 6)] = 2.5.
    """
    inp = pairs([-4.0, -6.0], [-9.0, -1.0], [2, 3], [3, 1])
    out = losses.get("rrhf")(inp, rrhf_weight=2.0, length_penalty=1.0)
    assert out.loss.item() == pytest.approx(3.0, rel=1e-12)
    assert out.metrics["rank_loss"] == pytest.approx(0.5)
    assert out.metrics["nll"] == pytest.approx(2.0)
    summed = losses.get("rrhf")(inp, rrhf_weight=2.0, nll_reduction="sum")
    assert summed.loss.item() == pytest.approx(6.0, rel=1e-12)
    unnormalised = losses.get("rrhf")(inp, rrhf_weight=1.0, length_penalty=0.0)
    assert unnormalised.metrics["rank_loss"] == pytest.approx(2.5)


def test_rrhf_hinge_has_no_gradient_once_ranked_right():
    """Pair 1 is ranked right, so its rejected gets no gradient; pair 2's gets w/(B·|y_l|) = 2/(2·1)."""
    inp = pairs([-4.0, -6.0], [-9.0, -1.0], [2, 3], [3, 1], grad=True)
    losses.get("rrhf")(inp, rrhf_weight=2.0).loss.backward()
    torch.testing.assert_close(inp.rejected_logps.grad, torch.tensor([0.0, 1.0], dtype=torch.float64))
    # chosen: -1/(B·|y_w|) from L_ft = (-1/4, -1/6), and pair 2 also -w/(B·|y_w|) = -1/3 from the hinge
    torch.testing.assert_close(
        inp.chosen_logps.grad, torch.tensor([-0.25, -1 / 6 - 1 / 3], dtype=torch.float64)
    )


def test_rrhf_without_ranking_is_token_mean_nll():
    """w = 0: only L_ft remains: -mean_b log π(y_w|x)/|y_w| = -½(-4/2 - 6/3) = 2 (the authors' token
    mean); with ``nll_reduction="sum"`` the paper's summed NLL -½(-4 - 6) = 5."""
    out = losses.get("rrhf")(pairs(*EXAMPLE), rrhf_weight=0.0)
    assert out.loss.item() == pytest.approx(2.0)
    out = losses.get("rrhf")(pairs(*EXAMPLE), rrhf_weight=0.0, nll_reduction="sum")
    assert out.loss.item() == pytest.approx(5.0)


# --------------------------------------------------------------------------- KTO


def kto_inputs(kl=(0.5, 1.0, -0.3), grad: bool = False) -> LossInputs:
    """Three examples, labels (desirable, undesirable, desirable), log-ratios (1, -2, 0)."""
    ref = torch.tensor([-5.0, -4.0, -6.0], dtype=torch.float64)
    ref_kl = torch.tensor([-7.0, -3.0, -2.0], dtype=torch.float64)
    return LossInputs(
        logps=(ref + torch.tensor([1.0, -2.0, 0.0], dtype=torch.float64)).requires_grad_(grad),
        ref_logps=ref,
        labels=torch.tensor([True, False, True]),
        kl_logps=(ref_kl + torch.tensor(kl, dtype=torch.float64)).requires_grad_(grad),
        ref_kl_logps=ref_kl,
    )


def test_kto_hand_value():
    """β = 0.5, λ_D = 1, λ_U = 2. z0 = max(0, (0.5 + 1.0 - 0.3)/3) = 0.4.

    desirable r=1:   1 - σ(0.5·(1 - 0.4)) = 1 - σ(0.3)
    undesirable r=-2: 2·(1 - σ(0.5·(0.4 + 2))) = 2·(1 - σ(1.2))
    desirable r=0:   1 - σ(0.5·(0 - 0.4)) = 1 - σ(-0.2)
    L = mean of the three.  Rewards β·r: chosen mean (0.5 + 0)/2 = 0.25, rejected -1.
    """
    out = losses.get("kto")(kto_inputs(), beta=0.5, desirable_weight=1.0, undesirable_weight=2.0)
    expected = ((1 - sigmoid(0.3)) + 2 * (1 - sigmoid(1.2)) + (1 - sigmoid(-0.2))) / 3
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)
    assert out.metrics["kl"] == pytest.approx(0.4)
    assert out.metrics["rewards/chosen"] == pytest.approx(0.25)
    assert out.metrics["rewards/rejected"] == pytest.approx(-1.0)
    assert out.metrics["rewards/margin"] == pytest.approx(1.25)


def test_kto_reference_point_is_clamped_at_zero():
    """mean KL estimate (-1 - 2 - 0.3)/3 < 0 -> z0 = 0: desirable r=1 gives 1 - σ(0.5)."""
    out = losses.get("kto")(kto_inputs(kl=(-1.0, -2.0, -0.3)), beta=0.5)
    expected = ((1 - sigmoid(0.5)) + (1 - sigmoid(1.0)) + 0.5) / 3
    assert out.metrics["kl"] == 0.0
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)


def test_kto_gradient_goes_through_policy_logps_only():
    """z0 is detached: no gradient reaches kl_logps. Desirable log-probs are pushed up, undesirable down."""
    inp = kto_inputs(grad=True)
    losses.get("kto")(inp).loss.backward()
    assert inp.kl_logps.grad is None
    g = inp.logps.grad
    assert torch.isfinite(g).all() and g[0] < 0 and g[2] < 0 and g[1] > 0


def test_kto_single_label_batches_report_only_their_rewards():
    inp = kto_inputs()
    inp.labels = torch.tensor([True, True, True])
    out = losses.get("kto")(inp)
    assert "rewards/chosen" in out.metrics and "rewards/rejected" not in out.metrics
    assert "rewards/margin" not in out.metrics


# --------------------------------------------------------------------------- SFT / RFT


def sft_inputs(grad: bool = False) -> LossInputs:
    """Example 1: tokens of p = ½, ¼ (then padding); example 2: one token of p = ½."""
    lp = torch.tensor([[math.log(0.5), math.log(0.25), 0.0], [math.log(0.5), 0.0, 0.0]], dtype=torch.float64)
    return LossInputs(token_logps=lp.requires_grad_(grad), mask=mask_of([2, 1]))


@pytest.mark.parametrize("name", ["sft", "rft"])
def test_sft_hand_value(name):
    """Token mean over the 3 response tokens: -(log ½ + log ¼ + log ½)/3 = (4/3) log 2 (not the mean of
    per-example means, which would be ½[(3/2) log 2 + log 2] = (5/4) log 2)."""
    out = losses.get(name)(sft_inputs())
    assert out.loss.item() == pytest.approx(4 / 3 * LOG2, rel=1e-12)
    assert out.metrics == {"nll": pytest.approx(4 / 3 * LOG2, rel=1e-12), "tokens": 3.0}


@pytest.mark.parametrize("name", ["sft", "rft"])
def test_sft_every_token_weighs_the_same_and_padding_not_at_all(name):
    inp = sft_inputs(grad=True)
    losses.get(name)(inp).loss.backward()
    expected = -inp.mask.double() / 3
    torch.testing.assert_close(inp.token_logps.grad, expected)
    junk = sft_inputs()
    junk.token_logps = junk.token_logps + 7.0 * (1 - junk.mask)  # change only the padded positions
    torch.testing.assert_close(losses.get(name)(junk).loss, losses.get(name)(sft_inputs()).loss)


def test_rft_is_sft_on_self_play_answers():
    assert losses.get("rft").sft_source == "self_play" and losses.get("sft").sft_source == "gold"
    torch.testing.assert_close(losses.get("rft")(sft_inputs()).loss, losses.get("sft")(sft_inputs()).loss)


# --------------------------------------------------------------------------- all pairwise


@pytest.mark.parametrize("name", ["simpo", "cpo", "orpo", "alphapo", "rrhf"])
def test_pairwise_losses_have_finite_nonzero_policy_gradients_at_defaults(name):
    """At the paper defaults, both policy log-probs get a finite, non-zero gradient of the right sign."""
    inp = pairs([-4.0, -6.0], [-9.0, -1.0], [2, 3], [3, 1], grad=True)  # pair 2 ranked wrong (for RRHF)
    out = losses.get(name)(inp)
    out.loss.backward()
    assert torch.isfinite(inp.chosen_logps.grad).all() and (inp.chosen_logps.grad < 0).all()
    assert torch.isfinite(inp.rejected_logps.grad).all() and (inp.rejected_logps.grad >= 0).all()
    assert inp.rejected_logps.grad.abs().sum() > 0
    assert all(isinstance(v, float) and math.isfinite(v) for v in out.metrics.values())
