"""Group dpo_b: ODPO, beta-DPO, Cal-DPO, f-DPO, WPO, LD-DPO, TDPO, FocalPO, GPO, DPO-Shift,
Dr. DPO, chi-PO, RPO, SamPO, TR-DPO.

Every loss gets (1) a value computed by hand on tiny tensors (the algebra is in the test's
docstring; expected numbers use ``math``, never the code under test), (2) property tests, and
the whole group shares the gradient-direction and spec checks at the bottom.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import losses
from losses.types import LossInputs

GROUP = [
    "odpo", "betadpo", "caldpo", "fdpo", "wpo", "ld_dpo", "tdpo", "focalpo",
    "gpo", "dposhift", "drdpo", "chipo", "rpo", "sampo", "tr_dpo",
]  # fmt: skip


def softplus(x: float) -> float:
    """-log sigma(-x)."""
    return math.log1p(math.exp(x))


def t(values, grad: bool = False) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, requires_grad=grad)


def seq_inputs(pc, pr, rc, rr, **extra) -> LossInputs:
    """Pairwise inputs from summed log-probs; policy tensors need grad, reference ones do not."""
    return LossInputs(
        chosen_logps=t(pc, True),
        rejected_logps=t(pr, True),
        ref_chosen_logps=t(rc),
        ref_rejected_logps=t(rr),
        **extra,
    )


def token_inputs(ctok, rtok, ref_ctok, ref_rtok, cmask, rmask, **extra) -> LossInputs:
    """Token-level inputs (B,T); the summed log-probs are the masked sums of the token ones."""
    cmask, rmask = t(cmask), t(rmask)
    ctok, rtok = t(ctok, True), t(rtok, True)
    ref_ctok, ref_rtok = t(ref_ctok) * cmask, t(ref_rtok) * rmask
    return LossInputs(
        chosen_token_logps=ctok, rejected_token_logps=rtok, ref_chosen_token_logps=ref_ctok,
        ref_rejected_token_logps=ref_rtok, chosen_mask=cmask, rejected_mask=rmask,
        chosen_logps=(ctok * cmask).sum(-1), rejected_logps=(rtok * rmask).sum(-1),
        ref_chosen_logps=ref_ctok.sum(-1), ref_rejected_logps=ref_rtok.sum(-1), **extra,
    )  # fmt: skip


def run(name: str, inputs: LossInputs, **hp):
    return losses.get(name)(inputs, **hp)


def dpo_value(inputs: LossInputs, beta: float = 0.1) -> float:
    return losses.get("dpo")(inputs, beta=beta).loss.item()


# --------------------------------------------------------------------------------- ODPO


class TestODPO:
    def test_hand_value_with_scores(self):
        """h = (−1+1.5) − (−2+1.5) = 1; Δ = α·log(3−1) = log 2;
        L = −log σ(0.1·1 − log 2) = log(1 + e^{log 2 − 0.1}) = log(1 + 2e^{−0.1})."""
        inp = seq_inputs([-1.0], [-2.0], [-1.5], [-1.5], chosen_rewards=t([3.0]), rejected_rewards=t([1.0]))
        out = run("odpo", inp, beta=0.1, alpha=1.0)
        assert out.loss.item() == pytest.approx(math.log(1 + 2 * math.exp(-0.1)), rel=1e-12)
        assert out.metrics["odpo/offset"] == pytest.approx(math.log(2.0))

    def test_constant_offset_without_scores(self):
        """No scores: Δ = offset = 0.5, L = −log σ(0.1 − 0.5) = softplus(0.4)."""
        out = run("odpo", seq_inputs([-1.0], [-2.0], [-1.5], [-1.5]), beta=0.1, offset=0.5)
        assert out.loss.item() == pytest.approx(softplus(0.4), rel=1e-12)

    def test_unit_gap_is_dpo(self):
        """0/1 correctness scores: log(1 − 0) = 0, so ODPO equals DPO exactly."""
        inp = seq_inputs([-1.0, -3.0], [-2.0, -1.0], [-1.5, -2.0], [-1.5, -2.5])
        inp.chosen_rewards, inp.rejected_rewards = t([1.0, 1.0]), t([0.0, 0.0])
        assert run("odpo", inp).loss.item() == pytest.approx(dpo_value(inp), rel=1e-12)

    def test_bigger_score_gap_asks_for_a_bigger_margin(self):
        def loss(gap):
            inp = seq_inputs(
                [-1.0], [-2.0], [-1.5], [-1.5], chosen_rewards=t([gap]), rejected_rewards=t([0.0])
            )
            return run("odpo", inp).loss.item()

        assert loss(1.5) < loss(3.0) < loss(10.0)

    def test_tie_is_clamped_not_nan(self):
        """A zero score gap is clamped at 1e−6: Δ = log 1e−6, L = softplus(log 1e−6 − 0.1)."""
        inp = seq_inputs([-1.0], [-2.0], [-1.5], [-1.5], chosen_rewards=t([1.0]), rejected_rewards=t([1.0]))
        assert run("odpo", inp).loss.item() == pytest.approx(softplus(math.log(1e-6) - 0.1), rel=1e-9)


# ------------------------------------------------------------------------------- beta-DPO


class TestBetaDPO:
    def test_no_filter_no_adaptation_is_dpo(self):
        """ρ = 0 keeps all pairs and α = 0 fixes β: DPO. With α > 0, β = β₀ exactly when the moving
        mean already equals the batch's mean gap (the update then leaves it there)."""
        inp = seq_inputs([-1.0, -3.0, -2.0], [-2.0, -1.0, -2.5], [-1.5, -2.0, -2.0], [-1.5, -2.5, -2.0])
        out = run("betadpo", inp, filter_ratio=0.0, alpha=0.0)
        assert out.loss.item() == pytest.approx(dpo_value(inp), rel=1e-12)
        gap = (inp.chosen_logps - inp.ref_chosen_logps - inp.rejected_logps + inp.ref_rejected_logps).detach()
        inp.state = {"gap_mean": gap.mean().double(), "gap_std": gap.std().double()}
        out = run("betadpo", inp, filter_ratio=0.0, alpha=0.6)
        assert out.metrics["betadpo/beta"] == pytest.approx(0.1, rel=1e-9)
        assert out.loss.item() == pytest.approx(dpo_value(inp), rel=1e-9)

    def test_moving_averages_carried_as_state(self):
        """The authors' update_and_sync_tensor_mean (γ = 0.9, both averages start at 0), then β.

        Gaps M = (1, 3): batch mean 2, unbiased std √2. Step 1 from the initial state:
        M₀ = 0.1·2 = 0.2, σ = 0.1·√2; ρ = 0 keeps both, β = 0.1(1 + 0.6(2 − 0.2)) = 0.208.
        Step 2, same pairs, carrying that state: M₀ = 0.9·0.2 + 0.1·2 = 0.38, σ = 0.19·√2,
        β = 0.1(1 + 0.6(2 − 0.38)) = 0.1972.
        """

        def pairs():
            return seq_inputs([1.0, 3.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])

        spec = losses.get("betadpo")
        assert spec.version == 2 and spec.initial_state == {"gap_mean": 0.0, "gap_std": 0.0}
        first = spec(pairs(), filter_ratio=0.0)
        assert first.state["gap_mean"].item() == pytest.approx(0.2)
        assert first.state["gap_std"].item() == pytest.approx(0.1 * math.sqrt(2))
        assert first.metrics["betadpo/beta"] == pytest.approx(0.208)
        inp = pairs()
        inp.state = first.state
        second = spec(inp, filter_ratio=0.0)
        assert second.state["gap_mean"].item() == pytest.approx(0.38)
        assert second.state["gap_std"].item() == pytest.approx(0.19 * math.sqrt(2))
        assert second.metrics["betadpo/beta"] == pytest.approx(0.1972)

    def test_hand_value_keeps_one_of_two(self):
        """Gaps M = (1, −1); ρ = 0.5 keeps k = 1 pair. Both have z = ±1/√2, equal weights.
        Kept pair i: β_b = 0.1(1 + 0.6(M_i − 0)), L = softplus(−β_b M_i):
        i=0: β_b = 0.16, L = softplus(−0.16); i=1: β_b = 0.04, L = softplus(0.04)."""
        inp = seq_inputs([0.0, 0.0], [-1.0, 1.0], [0.0, 0.0], [0.0, 0.0])
        out = run("betadpo", inp, beta=0.1, alpha=0.6, filter_ratio=0.5, seed=3)
        candidates = {0.16: softplus(-0.16), 0.04: softplus(0.04)}
        beta_b = round(out.metrics["betadpo/beta"], 12)
        assert beta_b in candidates
        assert out.loss.item() == pytest.approx(candidates[beta_b], rel=1e-12)
        assert out.metrics["betadpo/kept"] == 1.0

    def test_deterministic_given_seed(self):
        inp = seq_inputs([-1.0, -3.0, -2.0, -1.0], [-2.0, -1.0, -2.5, -1.2], [-1.5] * 4, [-1.5] * 4)
        a = run("betadpo", inp, seed=7).loss.item()
        assert a == run("betadpo", inp, seed=7).loss.item()

    def test_outlier_is_rarely_kept(self):
        """Nine gaps near 0 and one at 20: its Gaussian weight is ~e^{−4} of the others'."""
        gaps = [0.0, 0.1, -0.1, 0.05, -0.05, 0.2, -0.2, 0.15, -0.15, 20.0]
        inp = seq_inputs([0.0] * 10, [-g for g in gaps], [0.0] * 10, [0.0] * 10)
        kept_outlier = 0
        for seed in range(20):
            out = run("betadpo", inp, filter_ratio=0.2, alpha=0.0, seed=seed)
            # with alpha = 0, beta = 0.1; keeping the outlier would add softplus(-2)/8 ~ 0.016 less loss
            kept_outlier += out.loss.item() < softplus(0.0) - 0.05
        assert kept_outlier <= 4

    def test_beta_moves_with_kept_gaps(self):
        """Kept mean above the batch mean raises β; the clamp keeps it ≥ 1e−3."""
        inp = seq_inputs([0.0, 0.0], [-30.0, 30.0], [0.0, 0.0], [0.0, 0.0])
        betas = {
            round(run("betadpo", inp, filter_ratio=0.5, seed=s).metrics["betadpo/beta"], 9) for s in range(12)
        }
        assert betas == {round(0.1 * (1 + 0.6 * 30), 9), 1e-3}


# -------------------------------------------------------------------------------- Cal-DPO


class TestCalDPO:
    def test_hand_value(self):
        """h_w = 0.5, h_l = −0.5, β = 0.1 → targets ±5: calibration (0.5−5)² + (−0.5+5)² = 40.5,
        weighted ½ as in the authors' code: L = log(1+e^{−1}) + ½·40.5 = 0.3132617 + 20.25 = 20.5632617.
        (Version 1 weighted it 1: 40.8132617.)"""
        out = run("caldpo", seq_inputs([-1.0], [-2.0], [-1.5], [-1.5]), beta=0.1)
        assert out.loss.item() == pytest.approx(math.log1p(math.exp(-1)) + 20.25, rel=1e-12)
        assert out.metrics["caldpo/cal_loss"] == pytest.approx(40.5)

    def test_matches_the_authors_code(self):
        """tengxiao1/Cal-DPO scripts/dpo_trainer.py, written out on a batch of 3:
        ``(-logσ(h_w − h_l) + 0.5·[mse(h_w, 1/(2β)) + mse(h_l, −1/(2β))]).mean()``, each mse a batch mean."""
        pc, pr, rc, rr = [-1.0, -3.0, -0.5], [-2.0, -1.0, -4.0], [-1.5, -2.0, -1.0], [-1.5, -2.5, -3.0]
        beta = 0.25
        hw, hl = t(pc) - t(rc), t(pr) - t(rr)
        target = torch.tensor(1.0 / (2.0 * beta), dtype=torch.float64)
        cal = F.mse_loss(hw, target.expand_as(hw)) + F.mse_loss(hl, -target.expand_as(hl))
        authors = (-F.logsigmoid(hw - hl) + 0.5 * cal).mean()
        out = run("caldpo", seq_inputs(pc, pr, rc, rr), beta=beta)
        assert out.loss.item() == pytest.approx(authors.item(), rel=1e-12)

    def test_default_beta_is_the_authors_released_value(self):
        assert losses.get("caldpo").defaults == {"beta": 0.001}
        assert losses.get("caldpo").version == 2

    def test_calibrated_point_only_bt_gradient(self):
        """At h_w = 5, h_l = −5 the calibration gradient is 0; ∂L/∂h_w = −σ(−10)."""
        inp = seq_inputs([5.0], [-5.0], [0.0], [0.0])
        out = run("caldpo", inp, beta=0.1)
        out.loss.backward()
        assert out.loss.item() == pytest.approx(softplus(-10.0), rel=1e-12)
        assert inp.chosen_logps.grad.item() == pytest.approx(-1 / (1 + math.exp(10)), rel=1e-9)

    def test_bt_term_has_no_beta(self):
        """Changing β moves only the targets: the BT part stays softplus(−(h_w − h_l))."""
        inp = seq_inputs([-1.0], [-2.0], [-1.5], [-1.5])
        for beta in (0.05, 0.5):
            assert run("caldpo", inp, beta=beta).metrics["caldpo/bt_loss"] == pytest.approx(softplus(-1.0))


# ---------------------------------------------------------------------------------- f-DPO


class TestFDPO:
    A, B, BETA = 0.4, -0.2, 0.5  # chosen / rejected log-ratios

    def inputs(self):
        return seq_inputs([self.A], [self.B], [0.0], [0.0])

    @pytest.mark.parametrize(
        "kind, score",
        [
            ("reverse_kl", lambda a, b: a - b),
            ("forward_kl", lambda a, b: math.exp(-b) - math.exp(-a)),
            (
                "js_divergence",
                lambda a, b: math.log(1 / (1 + math.exp(-a))) - math.log(1 / (1 + math.exp(-b))),
            ),
            ("alpha_divergence", lambda a, b: (math.exp(-0.3 * b) - math.exp(-0.3 * a)) / 0.3),
        ],
    )
    def test_hand_values(self, kind, score):
        """L = softplus(−β (f'(u_w) − f'(u_l))) with f' from the paper's table:
        log u | −1/u | log(2u/(1+u)) | (1 − u^{−α})/α (α = 0.3)."""
        out = run("fdpo", self.inputs(), beta=self.BETA, f_divergence_type=kind, f_alpha_divergence_coef=0.3)
        assert out.loss.item() == pytest.approx(softplus(-self.BETA * score(self.A, self.B)), rel=1e-12)

    @pytest.mark.parametrize(
        "kind, factor", [("forward_kl", 1.0), ("alpha_divergence", 1.0), ("js_divergence", 0.5)]
    )
    def test_nonzero_gradient_at_initialisation(self, kind, factor):
        """Policy == reference: every f'(u) has slope (in log u) 1 (JS: 1/2) at u = 1, so
        ∂L/∂log π(y_w) = −β σ(0) · slope = −β/2 · slope ≠ 0. The reference study's forward KL,
        β(h_w−h_l) + β(e^{−h_w} − e^{−h_l}), has slope 1 − e^0 = 0 here and never moves."""
        inp = seq_inputs([-2.0], [-3.0], [-2.0], [-3.0])
        run("fdpo", inp, beta=0.1, f_divergence_type=kind, f_alpha_divergence_coef=0.5).loss.backward()
        assert inp.chosen_logps.grad.item() == pytest.approx(-0.1 * 0.5 * factor, rel=1e-12)
        assert inp.rejected_logps.grad.item() == pytest.approx(0.1 * 0.5 * factor, rel=1e-12)

    def test_reference_study_forward_kl_is_stuck_at_init(self):
        """The oxRL form, written out here, has exactly zero gradient at policy == reference."""
        pc, pr = t([-2.0], True), t([-3.0], True)
        hw, hl = pc - (-2.0), pr - (-3.0)
        logits = 0.1 * (hw - hl) + 0.1 * (torch.exp(-hw) - torch.exp(-hl))
        (-F.logsigmoid(logits)).sum().backward()
        assert pc.grad.item() == 0.0 and pr.grad.item() == 0.0

    def test_alpha_limits(self):
        """α → 0 is reverse KL; α = 1 is forward KL (the paper's convention)."""
        inp = self.inputs()
        rev = run("fdpo", inp, f_divergence_type="reverse_kl").loss.item()
        fwd = run("fdpo", inp, f_divergence_type="forward_kl").loss.item()
        small = run(
            "fdpo", inp, f_divergence_type="alpha_divergence", f_alpha_divergence_coef=1e-7
        ).loss.item()
        one = run("fdpo", inp, f_divergence_type="alpha_divergence", f_alpha_divergence_coef=1.0).loss.item()
        assert small == pytest.approx(rev, rel=1e-6)
        assert one == pytest.approx(fwd, rel=1e-12)

    def test_huge_negative_ratio_stays_finite(self):
        inp = seq_inputs([-500.0], [-1.0], [0.0], [0.0])
        for kind in ("forward_kl", "alpha_divergence"):
            assert math.isfinite(run("fdpo", inp, f_divergence_type=kind).loss.item())

    def test_unknown_type(self):
        with pytest.raises(ValueError, match="f_divergence_type"):
            run("fdpo", self.inputs(), f_divergence_type="hellinger")


# ------------------------------------------------------------------------------------ WPO


def wpo_case():
    """B=1, V=2. Chosen: 2 tokens, logits [0,0] and [ln3,0], token 0 each.
    Rejected: 1 token (+1 pad), logits [0,ln3], token 0."""
    ln3 = math.log(3.0)
    cl = t([[[0.0, 0.0], [ln3, 0.0]]], True)
    rl = t([[[0.0, ln3], [0.0, 0.0]]], True)
    ctok = [[math.log(0.5), math.log(0.75)]]
    rtok = [[math.log(0.25), 0.0]]
    ref_c = [[math.log(0.5), math.log(0.5)]]
    ref_r = [[math.log(0.5), 0.0]]
    return token_inputs(
        ctok, rtok, ref_c, ref_r, [[1.0, 1.0]], [[1.0, 0.0]], chosen_logits=cl, rejected_logits=rl
    )


class TestWPO:
    def test_hand_value(self):
        """Σp² per position: 0.5 and 0.625 (chosen), 0.625 (rejected).
        w_w = exp(½[log(.5/.5) + log(.75/.625)]) = √1.2, w_l = .25/.625 = 0.4.
        h = (ln .5 + ln .75 − 2 ln .5) − (ln .25 − ln .5) = ln 3.
        L = 0.4·√1.2 · softplus(−0.1·ln 3) = 0.4√1.2 · log(1 + 3^{−0.1})."""
        out = run("wpo", wpo_case(), beta=0.1)
        w = 0.4 * math.sqrt(1.2)
        assert out.loss.item() == pytest.approx(w * math.log1p(3**-0.1), rel=1e-12)
        assert out.metrics["wpo/weight"] == pytest.approx(w, rel=1e-12)

    def test_weights_are_detached(self):
        """No gradient reaches the logits (only used for the weights); the pair gradient is
        w·∂DPO: ∂L/∂log π(y_w) = −w β σ(−β ln 3)."""
        inp = wpo_case()
        run("wpo", inp, beta=0.1).loss.backward()
        assert inp.chosen_logits.grad is None and inp.rejected_logits.grad is None
        w = 0.4 * math.sqrt(1.2)
        expected = -w * 0.1 / (1 + 3**0.1)
        assert inp.chosen_token_logps.grad[0, 0].item() == pytest.approx(expected, rel=1e-12)

    def test_uniform_policy_gives_weight_one(self):
        """π uniform over V: π(y_t) = 1/V = Σ_v π(v)², so every response has aligned weight 1."""
        v = 7
        logits = torch.zeros(2, 3, v, dtype=torch.float64)
        tok = [[math.log(1 / v)] * 3] * 2
        mask = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
        inp = token_inputs(tok, tok, tok, tok, mask, mask, chosen_logits=logits, rejected_logits=logits)
        assert run("wpo", inp).metrics["wpo/weight"] == pytest.approx(1.0, rel=1e-12)


# --------------------------------------------------------------------------------- LD-DPO


def ld_case():
    """Chosen 3 tokens with log-ratios (0.1, 0.2, 0.3); rejected 1 token with −0.2: l_p = 1."""
    return token_inputs(
        [[-1.0, -1.0, -1.0]], [[-2.0, 0.0, 0.0]], [[-1.1, -1.2, -1.3]], [[-1.8, 0.0, 0.0]],
        [[1.0, 1.0, 1.0]], [[1.0, 0.0, 0.0]],
    )  # fmt: skip


class TestLDDPO:
    def test_hand_value(self):
        """Chosen: 0.1 + α(0.2 + 0.3); rejected: −0.2 (no tail). α = 0.4:
        h = 0.1 + 0.2 + 0.2 = 0.5, L = softplus(−0.1·0.5)."""
        out = run("ld_dpo", ld_case(), beta=0.1, ld_alpha=0.4)
        assert out.loss.item() == pytest.approx(softplus(-0.05), rel=1e-12)

    def test_alpha_one_is_dpo_and_zero_truncates(self):
        """α = 1: h = 0.6 + 0.2 (DPO); α = 0: h = 0.1 + 0.2 (shared prefix only)."""
        assert run("ld_dpo", ld_case(), ld_alpha=1.0).loss.item() == pytest.approx(
            dpo_value(ld_case()), rel=1e-12
        )
        assert run("ld_dpo", ld_case(), ld_alpha=0.0).loss.item() == pytest.approx(softplus(-0.03), rel=1e-12)

    def test_tail_gradient_scaled_by_alpha(self):
        inp = ld_case()
        run("ld_dpo", inp, ld_alpha=0.25).loss.backward()
        g = inp.chosen_token_logps.grad[0]
        assert g[1].item() == pytest.approx(0.25 * g[0].item(), rel=1e-12)
        assert g[2].item() == pytest.approx(0.25 * g[0].item(), rel=1e-12)

    def test_positions_count_response_tokens_only(self):
        """A left-padded row (mask 0,1,1) has its first *response* token in the shared prefix."""
        inp = token_inputs(
            [[0.0, -1.0, -1.0]], [[0.0, -2.0, 0.0]], [[0.0, -1.1, -1.2]], [[0.0, -1.8, 0.0]],
            [[0.0, 1.0, 1.0]], [[0.0, 1.0, 0.0]],
        )  # fmt: skip
        # chosen 0.1 + α·0.2, rejected −0.2, α = 0.5: h = 0.1 + 0.1 + 0.2 = 0.4
        assert run("ld_dpo", inp, ld_alpha=0.5).loss.item() == pytest.approx(softplus(-0.04), rel=1e-12)


# ----------------------------------------------------------------------------------- TDPO


def tdpo_case():
    """One position, V = 2. Chosen: policy [0,0], ref [ln3,0]; rejected: policy [ln3,0], ref [0,0]."""
    ln3 = math.log(3.0)
    return seq_inputs(
        [-1.0], [-2.0], [-1.5], [-1.5],
        chosen_mask=t([[1.0]]), rejected_mask=t([[1.0]]),
        chosen_logits=t([[[0.0, 0.0]]], True), rejected_logits=t([[[ln3, 0.0]]], True),
        ref_chosen_logits=t([[[ln3, 0.0]]]), ref_rejected_logits=t([[[0.0, 0.0]]]),
    )  # fmt: skip


KL_W = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)  # KL((.75,.25) || (.5,.5))
KL_L = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)  # KL((.5,.5) || (.75,.25))


class TestTDPO:
    def test_hand_value_tdpo2(self):
        """u = 1, δ = KL_l − KL_w (KL(ref||policy) per position);
        TDPO2: L = softplus(−β(u − α δ)) with β = 0.1, α = 0.5."""
        out = run("tdpo", tdpo_case(), beta=0.1, alpha=0.5, tdpo2=True)
        assert out.loss.item() == pytest.approx(softplus(-0.1 * (1 - 0.5 * (KL_L - KL_W))), rel=1e-12)
        assert out.metrics["tdpo/kl_chosen"] == pytest.approx(KL_W, rel=1e-12)
        assert out.metrics["tdpo/kl_rejected"] == pytest.approx(KL_L, rel=1e-12)

    def test_hand_value_tdpo1(self):
        """TDPO1: L = softplus(−β(u − δ)), no α."""
        out = run("tdpo", tdpo_case(), beta=0.1, alpha=0.5, tdpo2=False)
        assert out.loss.item() == pytest.approx(softplus(-0.1 * (1 - (KL_L - KL_W))), rel=1e-12)

    def test_tdpo2_stops_the_chosen_kl_gradient(self):
        for tdpo2, chosen_moves in ((True, False), (False, True)):
            inp = tdpo_case()
            run("tdpo", inp, tdpo2=tdpo2).loss.backward()
            moved = inp.chosen_logits.grad is not None and inp.chosen_logits.grad.abs().sum().item() > 0
            assert moved is chosen_moves
            assert inp.rejected_logits.grad.abs().sum().item() > 0

    def test_policy_equal_to_reference_is_dpo(self):
        inp = tdpo_case()
        inp.ref_chosen_logits = inp.chosen_logits.detach().clone()
        inp.ref_rejected_logits = inp.rejected_logits.detach().clone()
        assert run("tdpo", inp).loss.item() == pytest.approx(dpo_value(inp), rel=1e-12)


# -------------------------------------------------------------------------------- FocalPO


class TestFocalPO:
    def test_hand_value(self):
        """β = 1, h = ln 3 → p = σ(ln 3) = 0.75; L = −0.75^γ · ln 0.75, γ = 0.05."""
        ln3 = math.log(3.0)
        out = run("focalpo", seq_inputs([ln3], [0.0], [0.0], [0.0]), beta=1.0, gamma=0.05)
        assert out.loss.item() == pytest.approx(-(0.75**0.05) * math.log(0.75), rel=1e-12)

    def test_gamma_zero_is_dpo(self):
        inp = seq_inputs([-1.0, -3.0], [-2.0, -1.0], [-1.5, -2.0], [-1.5, -2.5])
        assert run("focalpo", inp, gamma=0.0).loss.item() == pytest.approx(dpo_value(inp), rel=1e-12)

    def test_gradient_keeps_the_modulating_factor(self):
        """∂L/∂h = −β p^γ (1 − p)(1 + γ log p), at β = 1, h = ln 3, γ = 0.5."""
        inp = seq_inputs([math.log(3.0)], [0.0], [0.0], [0.0])
        run("focalpo", inp, beta=1.0, gamma=0.5).loss.backward()
        expected = -(0.75**0.5) * 0.25 * (1 + 0.5 * math.log(0.75))
        assert inp.chosen_logps.grad.item() == pytest.approx(expected, rel=1e-12)

    def test_misranked_pairs_weigh_less_than_in_dpo(self):
        """FocalPO/DPO loss ratio is p^γ: smaller for a misranked pair (p < ½)."""
        wrong, right = seq_inputs([-5.0], [0.0], [0.0], [0.0]), seq_inputs([5.0], [0.0], [0.0], [0.0])
        ratio_wrong = run("focalpo", wrong, gamma=0.5).loss.item() / dpo_value(wrong)
        ratio_right = run("focalpo", right, gamma=0.5).loss.item() / dpo_value(right)
        assert ratio_wrong < ratio_right < 1.0


# ------------------------------------------------------------------------------------ GPO


class TestGPO:
    @pytest.mark.parametrize(
        "kind, at_plus1, at_minus1",
        [
            ("logistic", math.log1p(math.exp(-1)), math.log1p(math.e)),
            ("exponential", math.exp(-1), math.e),
            ("truncated_quadratic", 0.0, 4.0),
            ("savage", 1 / (1 + math.e) ** 2, 1 / (1 + math.exp(-1)) ** 2),
        ],
    )
    def test_hand_values(self, kind, at_plus1, at_minus1):
        """ρ = β h with β = 0.5, h = ±2: f(1) and f(−1) from GPO's table."""
        plus = run("gpo", seq_inputs([2.0], [0.0], [0.0], [0.0]), beta=0.5, loss_type=kind)
        minus = run("gpo", seq_inputs([-2.0], [0.0], [0.0], [0.0]), beta=0.5, loss_type=kind)
        assert plus.loss.item() == pytest.approx(at_plus1, rel=1e-12, abs=1e-15)
        assert minus.loss.item() == pytest.approx(at_minus1, rel=1e-12)

    def test_logistic_is_dpo(self):
        inp = seq_inputs([-1.0, -3.0], [-2.0, -1.0], [-1.5, -2.0], [-1.5, -2.5])
        assert run("gpo", inp, loss_type="logistic").loss.item() == pytest.approx(dpo_value(inp), rel=1e-12)

    @pytest.mark.parametrize("kind", ["logistic", "exponential", "truncated_quadratic", "savage"])
    def test_larger_margin_never_costs_more(self, kind):
        values = [
            run("gpo", seq_inputs([h], [0.0], [0.0], [0.0]), loss_type=kind).loss.item() for h in (-5, 0, 5)
        ]
        assert values[0] > values[1] > values[2]

    def test_unknown_type(self):
        with pytest.raises(ValueError, match="loss_type"):
            run("gpo", seq_inputs([0.0], [0.0], [0.0], [0.0]), loss_type="hinge")


# ------------------------------------------------------------------------------ DPO-Shift


class TestDPOShift:
    def test_hand_value(self):
        """h_w = 0.5, h_l = −0.3, β = 0.1, λ = 0.5: L = softplus(−(0.05 + 0.015))."""
        out = run("dposhift", seq_inputs([0.5], [-0.3], [0.0], [0.0]), beta=0.1, shift_lambda=0.5)
        assert out.loss.item() == pytest.approx(softplus(-0.065), rel=1e-12)

    def test_lambda_one_is_dpo(self):
        inp = seq_inputs([-1.0, -3.0], [-2.0, -1.0], [-1.5, -2.0], [-1.5, -2.5])
        assert run("dposhift", inp, shift_lambda=1.0).loss.item() == pytest.approx(dpo_value(inp), rel=1e-12)

    def test_rejected_gradient_is_lambda_times_chosen(self):
        inp = seq_inputs([-1.0], [-2.0], [-1.5], [-1.5])
        run("dposhift", inp, shift_lambda=0.7).loss.backward()
        assert inp.rejected_logps.grad.item() == pytest.approx(-0.7 * inp.chosen_logps.grad.item(), rel=1e-12)

    @pytest.mark.parametrize(
        ("schedule", "progress", "lam"),
        [
            ("fixed", 0.2, 0.75),
            ("increase_linear", 0.0, 0.75),
            ("increase_linear", 0.2, 0.8),  # 0.75 + 0.25·0.2
            ("decrease_linear", 0.0, 1.0),
            ("decrease_linear", 0.2, 0.95),  # 1 − 0.25·0.2
        ],
    )
    def test_schedules_follow_training_progress(self, schedule, progress, lam):
        """The authors' schedules ("increase_linear-0.75to1.0", "decrease_linear-1.0to0.75") read
        LossInputs.progress: h_w = 0.5, h_l = −0.3, β = 0.1 → L = softplus(−(0.05 + λ·0.03))."""
        inp = seq_inputs([0.5], [-0.3], [0.0], [0.0])
        inp.progress = progress
        out = run("dposhift", inp, beta=0.1, shift_lambda=0.75, shift_schedule=schedule)
        assert out.metrics["dposhift/lambda"] == pytest.approx(lam)
        assert out.loss.item() == pytest.approx(softplus(-(0.05 + lam * 0.03)), rel=1e-9)

    def test_unknown_schedule_raises(self):
        with pytest.raises(ValueError, match="shift_schedule"):
            run("dposhift", seq_inputs([0.5], [-0.3], [0.0], [0.0]), shift_schedule="cosine")


# ------------------------------------------------------------------------------- Dr. DPO


class TestDrDPO:
    def test_hand_value(self):
        """Margins 0.1·(1) and 0.1·(−2): ℓ = softplus(−0.1), softplus(0.2);
        L = −β' log(½(e^{−ℓ1/β'} + e^{−ℓ2/β'})), β' = 0.5."""
        inp = seq_inputs([0.0, 0.0], [-1.0, 2.0], [0.0, 0.0], [0.0, 0.0])
        l1, l2 = softplus(-0.1), softplus(0.2)
        expected = -0.5 * math.log(0.5 * (math.exp(-l1 / 0.5) + math.exp(-l2 / 0.5)))
        assert run("drdpo", inp, beta=0.1, beta_prime=0.5).loss.item() == pytest.approx(expected, rel=1e-12)

    def test_large_beta_prime_is_dpo(self):
        inp = seq_inputs([-1.0, -3.0, 0.0], [-2.0, -1.0, -4.0], [-1.5, -2.0, -1.0], [-1.5, -2.5, -1.0])
        assert run("drdpo", inp, beta_prime=1e6).loss.item() == pytest.approx(dpo_value(inp), rel=1e-6)

    def test_gradient_weights_are_softmax_of_negative_losses(self):
        """∂L/∂h_i = B·softmax(−ℓ/β')_i · ∂DPO/∂h_i: the high-loss (misranked) pair weighs less."""
        inp = seq_inputs([0.0, 0.0], [-1.0, 2.0], [0.0, 0.0], [0.0, 0.0])
        run("drdpo", inp, beta=0.1, beta_prime=0.5).loss.backward()
        l1, l2 = softplus(-0.1), softplus(0.2)
        e1, e2 = math.exp(-l1 / 0.5), math.exp(-l2 / 0.5)
        w1, w2 = e1 / (e1 + e2), e2 / (e1 + e2)
        dpo1, dpo2 = -0.1 / (1 + math.exp(0.1)) / 2, -0.1 / (1 + math.exp(-0.2)) / 2
        assert inp.chosen_logps.grad[0].item() == pytest.approx(2 * w1 * dpo1, rel=1e-12)
        assert inp.chosen_logps.grad[1].item() == pytest.approx(2 * w2 * dpo2, rel=1e-12)
        assert w2 < w1


# ----------------------------------------------------------------------------------- chi-PO


class TestChiPO:
    def test_hand_value(self):
        """h_w = 0.4, h_l = −0.2: margin = 0.1((e^{0.4} + 0.4) − (e^{−0.2} − 0.2))."""
        margin = 0.1 * ((math.exp(0.4) + 0.4) - (math.exp(-0.2) - 0.2))
        out = run("chipo", seq_inputs([0.4], [-0.2], [0.0], [0.0]), beta=0.1)
        assert out.loss.item() == pytest.approx(softplus(-margin), rel=1e-12)

    def test_gradient_at_init_is_twice_dpo(self):
        """φ'(in log z) = z + 1 = 2 at z = 1."""
        inp, ref = seq_inputs([-2.0], [-3.0], [-2.0], [-3.0]), seq_inputs([-2.0], [-3.0], [-2.0], [-3.0])
        run("chipo", inp).loss.backward()
        losses.get("dpo")(ref, beta=0.1).loss.backward()
        assert inp.chosen_logps.grad.item() == pytest.approx(2 * ref.chosen_logps.grad.item(), rel=1e-12)

    def test_clip(self):
        """r_max = 0.1 clips the margin to [−0.2, 0.2]: a far misranked pair costs softplus(0.2), no gradient."""
        inp = seq_inputs([-10.0], [0.0], [0.0], [0.0])
        out = run("chipo", inp, r_max=0.1)
        out.loss.backward()
        assert out.loss.item() == pytest.approx(softplus(0.2), rel=1e-12)
        assert inp.chosen_logps.grad.item() == 0.0

    def test_huge_ratio_is_finite(self):
        inp = seq_inputs([300.0], [0.0], [0.0], [0.0])
        out = run("chipo", inp)
        out.loss.backward()
        assert math.isfinite(out.loss.item()) and math.isfinite(inp.chosen_logps.grad.item())


# ------------------------------------------------------------------------------------ RPO


class TestRPO:
    def test_hand_value(self):
        """Log-ratios: chosen (1, 1), rejected (0, 0) → DPO part softplus(−0.1) per pair.
        NLL: chosen log-probs (−5, −3) over lengths (3, 1) → mean(5/3, 3); α = 0.5."""
        inp = seq_inputs([-5.0, -3.0], [-7.0, -5.0], [-6.0, -4.0], [-7.0, -5.0])
        inp.chosen_mask = t([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
        nll = (5 / 3 + 3) / 2
        out = run("rpo", inp, beta=0.1, rpo_alpha=0.5)
        assert out.loss.item() == pytest.approx(softplus(-0.1) + 0.5 * nll, rel=1e-12)
        assert out.metrics["rpo/nll"] == pytest.approx(nll, rel=1e-12)

    def test_alpha_zero_is_dpo(self):
        inp = seq_inputs(
            [-1.0, -3.0], [-2.0, -1.0], [-1.5, -2.0], [-1.5, -2.5], chosen_mask=t([[1.0], [1.0]])
        )
        assert run("rpo", inp, rpo_alpha=0.0).loss.item() == pytest.approx(dpo_value(inp), rel=1e-12)

    def test_nll_gradient_is_one_over_length(self):
        """∂(α NLL)/∂log π(y_w) = −α/(B |y_w|); add DPO's −β σ(−βh)/B."""
        inp = seq_inputs([-4.0], [-4.0], [-4.0], [-4.0], chosen_mask=t([[1.0, 1.0, 1.0, 1.0]]))
        run("rpo", inp, beta=0.1, rpo_alpha=1.0).loss.backward()
        assert inp.chosen_logps.grad.item() == pytest.approx(-0.25 - 0.05, rel=1e-12)


# ---------------------------------------------------------------------------------- SamPO


def sampo_case(rtok=(-1.0, -2.0, -3.0), ref_rtok=(-1.5, -2.5, -3.5)):
    """Chosen 1 token (log-ratio 0.3); rejected 3 tokens with log-ratios ``rtok − ref_rtok``."""
    return token_inputs([[-1.0, 0.0, 0.0]], [list(rtok)], [[-1.3, 0.0, 0.0]], [list(ref_rtok)],
                        [[1.0, 0.0, 0.0]], [[1.0, 1.0, 1.0]])  # fmt: skip


class TestSamPO:
    def test_equal_lengths_is_dpo(self):
        inp = token_inputs(
            [[-1.0, -2.0]], [[-2.0, -1.0]], [[-1.5, -1.0]], [[-1.0, -1.2]], [[1.0, 1.0]], [[1.0, 1.0]]
        )
        for seed in (0, 1, 2):
            assert run("sampo", inp, seed=seed).loss.item() == pytest.approx(dpo_value(inp), rel=1e-12)

    def test_hand_value_one_of_three(self):
        """T_m = 1: the rejected keeps one of its three log-ratios 0.5 (any position here, they
        are equal), so h = 0.3 − 0.5 and L = softplus(0.1·0.2)."""
        out = run("sampo", sampo_case(), beta=0.1)
        assert out.loss.item() == pytest.approx(softplus(0.02), rel=1e-12)
        assert out.metrics["sampo/kept_tokens"] == 1.0

    def test_positions_are_uniform_over_seeds(self):
        """Rejected log-ratios (0.1, 0.2, 0.4): the kept one is read back from the loss;
        over 40 seeds every position is drawn."""
        inp = sampo_case(rtok=(-1.0, -2.0, -3.0), ref_rtok=(-1.1, -2.2, -3.4))
        by_value = {round(softplus(-0.1 * (0.3 - r)), 12): r for r in (0.1, 0.2, 0.4)}
        seen = {by_value[round(run("sampo", inp, seed=s).loss.item(), 12)] for s in range(40)}
        assert seen == {0.1, 0.2, 0.4}

    def test_deterministic_given_seed(self):
        inp = sampo_case(rtok=(-1.0, -2.0, -3.0), ref_rtok=(-1.1, -2.2, -3.4))
        assert run("sampo", inp, seed=5).loss.item() == run("sampo", inp, seed=5).loss.item()

    def test_same_positions_for_policy_and_reference(self):
        """Policy == reference token by token, different tokens differ: the sampled log-ratio
        is exactly 0, L = log 2. (Independent policy/ref draws would mix −1, −2, −3.)"""
        inp = token_inputs([[-1.0, 0.0, 0.0]], [[-1.0, -2.0, -3.0]], [[-1.0, 0.0, 0.0]], [[-1.0, -2.0, -3.0]],
                           [[1.0, 0.0, 0.0]], [[1.0, 1.0, 1.0]])  # fmt: skip
        for seed in range(10):
            assert run("sampo", inp, seed=seed).loss.item() == pytest.approx(math.log(2.0), rel=1e-12)

    def test_keep_random_keeps_exactly_count(self):
        from losses.sampo import keep_random

        mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0, 0.0]])
        kept = keep_random(mask, torch.tensor([2.0, 4.0, 1.0]), torch.Generator().manual_seed(0))
        assert kept.sum(-1).tolist() == [2.0, 4.0, 1.0]
        assert bool(((kept > 0) <= (mask > 0)).all())


# --------------------------------------------------------------------------------- TR-DPO


class TestTRDPO:
    def test_loss_is_dpo_and_ignores_trainer_knobs(self):
        inp = seq_inputs([-1.0, -3.0], [-2.0, -1.0], [-1.5, -2.0], [-1.5, -2.5])
        a = run("tr_dpo", inp, ref_model_mixup_alpha=0.1, ref_model_sync_steps=3).loss.item()
        b = run("tr_dpo", inp, ref_model_mixup_alpha=0.9, ref_model_sync_steps=1000).loss.item()
        assert a == b == pytest.approx(dpo_value(inp), rel=1e-12)

    def test_mix_reference_by_hand(self):
        """ref ← α·policy + (1−α)·ref with α = 0.25: (1,2) and (3,6) → (1.5, 3)."""
        from losses.tr_dpo import mix_reference_

        ref, pol = [torch.tensor([1.0, 2.0])], [torch.tensor([3.0, 6.0])]
        mix_reference_(pol, ref, 0.25)
        assert ref[0].tolist() == [1.5, 3.0]
        assert pol[0].tolist() == [3.0, 6.0]

    def test_sync_schedule(self):
        from losses.tr_dpo import should_sync_reference

        assert [s for s in range(0, 13) if should_sync_reference(s, 4)] == [4, 8, 12]

    def test_spec_declares_reference_updates(self):
        spec = losses.get("tr_dpo")
        assert spec.updates_reference and {"ref_model_mixup_alpha", "ref_model_sync_steps"} <= set(
            spec.defaults
        )


# ---------------------------------------------------------------------- the whole group


def full_batch(seed: int = 0):
    """Consistent inputs with every field: token log-probs are log_softmax(logits) at random ids.

    Returns the inputs and the policy leaves (logits); the token log-prob tensors retain grad.
    """
    g = torch.Generator().manual_seed(seed)
    b, t_, v = 3, 4, 5
    cmask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.float64)
    rmask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float64)
    leaves = [torch.randn(b, t_, v, generator=g, dtype=torch.float64).requires_grad_() for _ in range(2)]
    refs = [torch.randn(b, t_, v, generator=g, dtype=torch.float64) for _ in range(2)]
    ids = [torch.randint(v, (b, t_), generator=g) for _ in range(2)]

    def tok(logits, which, mask):
        return F.log_softmax(logits, -1).gather(-1, ids[which].unsqueeze(-1)).squeeze(-1) * mask

    ctok, rtok = tok(leaves[0], 0, cmask), tok(leaves[1], 1, rmask)
    ctok.retain_grad()
    rtok.retain_grad()
    ref_c, ref_r = tok(refs[0], 0, cmask), tok(refs[1], 1, rmask)
    inputs = LossInputs(
        chosen_logps=ctok.sum(-1), rejected_logps=rtok.sum(-1), ref_chosen_logps=ref_c.sum(-1),
        ref_rejected_logps=ref_r.sum(-1), chosen_token_logps=ctok, rejected_token_logps=rtok,
        ref_chosen_token_logps=ref_c, ref_rejected_token_logps=ref_r, chosen_mask=cmask, rejected_mask=rmask,
        chosen_logits=leaves[0], rejected_logits=leaves[1], ref_chosen_logits=refs[0], ref_rejected_logits=refs[1],
        chosen_rewards=torch.tensor([3.0, 2.0, 1.5], dtype=torch.float64),
        rejected_rewards=torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64),
    )  # fmt: skip
    return inputs, leaves


@pytest.mark.parametrize("name", GROUP)
def test_gradient_flows_only_through_the_policy(name):
    inputs, leaves = full_batch()
    out = losses.get(name)(inputs)
    assert out.loss.dim() == 0 and math.isfinite(out.loss.item())
    out.loss.backward()
    grads = [p.grad for p in leaves if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert sum(g.abs().sum().item() for g in grads) > 0
    assert inputs.ref_chosen_logits.grad is None and inputs.ref_chosen_token_logps.grad is None
    assert not inputs.ref_chosen_logps.requires_grad


@pytest.mark.parametrize("name", GROUP)
def test_gradient_raises_chosen_and_lowers_rejected(name):
    """A descent step raises log π(y_w) and lowers log π(y_l): per pair, the gradient summed
    over the response tokens is ≤ 0 for the chosen and ≥ 0 for the rejected, strictly for some."""
    inputs, _ = full_batch(seed=1)
    losses.get(name)(inputs).loss.backward()
    g_c = (inputs.chosen_token_logps.grad * inputs.chosen_mask).sum(-1)
    g_r = (inputs.rejected_token_logps.grad * inputs.rejected_mask).sum(-1)
    assert (g_c <= 1e-15).all() and (g_r >= -1e-15).all()
    assert g_c.min() < 0 and g_r.max() > 0


@pytest.mark.parametrize("name", GROUP)
def test_metrics_are_finite_floats(name):
    inputs, _ = full_batch(seed=2)
    metrics = losses.get(name)(inputs).metrics
    assert {"rewards/chosen", "rewards/rejected", "rewards/accuracy", "rewards/margin"} <= set(metrics)
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("name", GROUP)
def test_spec_contract(name):
    spec = losses.get(name)
    assert (spec.paradigm, spec.data, spec.needs_reference) == ("offline", "pairs", True)
    assert spec.paper.startswith("arXiv:") and spec.description
    assert "beta" in spec.defaults
    assert spec.needs_full_logits == (name in {"wpo", "tdpo"})
    assert spec.updates_reference == (name == "tr_dpo")


@pytest.mark.parametrize("name", GROUP)
def test_missing_field_is_a_one_line_error(name):
    with pytest.raises(ValueError, match=f"loss '{name}' needs LossInputs"):
        losses.get(name)(LossInputs(chosen_mask=torch.ones(1, 1)))
