"""BCO's unpaired form (``bco_unpaired``): values by hand, its running reward shift, and parity with TRL.

TRL 1.16 no longer ships ``BCOTrainer``; its loss is TRL 0.21's ``BCOTrainer.bco_loss`` and
``RunningMoments.update`` (``trl/trainer/bco_trainer.py``, ``trl/trainer/utils.py``), transcribed below
(one process, no UDM) and run over several steps with the running mean carried, against ours with its
state carried as the trainer carries it. With ``OXBENCH_TRL_0_21`` naming a directory holding TRL 0.21's
``trl`` package (an unpacked ``trl-0.21.0`` wheel), the same steps also run through that code itself,
in a subprocess (TRL 1.16 is this environment's ``trl``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import losses
from losses.types import LossInputs

NAME = "bco_unpaired"
TOL = {"rtol": 1e-6, "atol": 1e-9}


def sp(z: float) -> float:
    """softplus: −log σ(−z) = log(1 + e^z)."""
    return math.log1p(math.exp(z))


def unpaired(logratios, labels, grad: bool = False) -> LossInputs:
    """Inputs whose policy-minus-reference log-ratios are ``logratios`` (reference log-probs −4)."""
    ref = torch.full((len(logratios),), -4.0, dtype=torch.float64)
    logps = (ref + torch.tensor(logratios, dtype=torch.float64)).requires_grad_(grad)
    return LossInputs(logps=logps, ref_logps=ref, labels=torch.tensor(labels))


# --------------------------------------------------------------------------- the spec


def test_spec_is_unpaired_stateful_and_shares_bco_s_state():
    spec, paired = losses.get(NAME), losses.get("bco")
    assert (spec.paradigm, spec.data, spec.needs_reference, spec.version) == ("unpaired", "unpaired", True, 1)
    assert spec.defaults == {"beta": 0.1, "reward_shift": "running"}
    assert spec.initial_state == paired.initial_state == {"reward_mean": 0.0, "count": 0.0}
    assert spec.paper.startswith("arXiv:2404.04656")


def test_missing_fields_and_unknown_shift_name_the_loss():
    with pytest.raises(ValueError, match=f"loss '{NAME}' needs LossInputs"):
        losses.get(NAME)(LossInputs())
    with pytest.raises(ValueError, match=f"loss '{NAME}': reward_shift must be one of running, batch, none"):
        losses.get(NAME)(unpaired([1.0], [True]), reward_shift="moving")


# --------------------------------------------------------------------------- values by hand


def test_hand_value_and_metrics():
    """β = 0.5, log-ratios (2, 1, −2), labels (desirable, undesirable, undesirable): rewards r = (1, 0.5, −1),
    δ = their mean 1/6 (the running mean's first step: no state yet).
    Desirable r = 1: −log σ(1 − 1/6) = sp(−5/6). Undesirable r = 0.5: −log σ(−(0.5 − 1/6)) = sp(1/3);
    r = −1: −log σ(−(−1 − 1/6)) = sp(−7/6). Loss: their mean. Metrics: rewards/chosen 1, rewards/rejected
    (0.5 − 1)/2 = −0.25, margin 1.25."""
    out = losses.get(NAME)(unpaired([2.0, 1.0, -2.0], [True, False, False]), beta=0.5)
    assert out.loss.item() == pytest.approx((sp(-5 / 6) + sp(1 / 3) + sp(-7 / 6)) / 3, rel=1e-12)
    assert out.metrics["bco/delta"] == pytest.approx(1 / 6, rel=1e-12)
    assert out.metrics["rewards/chosen"] == pytest.approx(1.0)
    assert out.metrics["rewards/rejected"] == pytest.approx(-0.25)
    assert out.metrics["rewards/margin"] == pytest.approx(1.25)
    assert out.state["reward_mean"].item() == pytest.approx(1 / 6) and out.state["count"].item() == 3
    batch = losses.get(NAME)(unpaired([2.0, 1.0, -2.0], [True, False, False]), beta=0.5, reward_shift="batch")
    assert batch.loss.item() == pytest.approx(out.loss.item(), rel=1e-12) and batch.state is None


def test_hand_value_without_shift():
    """δ = 0, β = 0.5, same examples: (sp(−1) + sp(0.5) + sp(−1)) / 3, no state."""
    out = losses.get(NAME)(unpaired([2.0, 1.0, -2.0], [True, False, False]), beta=0.5, reward_shift="none")
    assert out.loss.item() == pytest.approx((2 * sp(-1.0) + sp(0.5)) / 3, rel=1e-12)
    assert out.metrics["bco/delta"] == 0.0 and out.state is None


def test_running_mean_is_carried_as_state():
    """Step 1 as above: mean 1/6 over 3 rewards. Step 2: log-ratios (1, 1, 1), rewards all 0.5, so
    δ = (3·1/6 + 3·0.5)/6 = 1/3, count 6; its desirable r = 0.5 gives −log σ(0.5 − 1/3) = sp(−1/6), each
    undesirable −log σ(−(0.5 − 1/3)) = sp(1/6)."""
    spec = losses.get(NAME)
    first = spec(unpaired([2.0, 1.0, -2.0], [True, False, False]), beta=0.5)
    second_in = unpaired([1.0, 1.0, 1.0], [True, False, False])
    second_in.state = first.state
    second = spec(second_in, beta=0.5)
    assert second.metrics["bco/delta"] == pytest.approx(1 / 3)
    assert second.state["reward_mean"].item() == pytest.approx(1 / 3) and second.state["count"].item() == 6
    assert second.loss.item() == pytest.approx((sp(-1 / 6) + 2 * sp(1 / 6)) / 3, rel=1e-6)


def test_gradient_raises_desirable_and_lowers_undesirable_through_the_policy_only():
    """∂L/∂log π(y_i) = β(σ(r_i − δ) − 1)/B for a desirable example, βσ(r_i − δ)/B for an undesirable one
    (δ detached); the reference log-probs carry none."""
    inp = unpaired([2.0, 1.0, -2.0], [True, False, False], grad=True)
    losses.get(NAME)(inp, beta=0.5).loss.backward()
    sig = [1 / (1 + math.exp(-(r - 1 / 6))) for r in (1.0, 0.5, -1.0)]
    want = [0.5 * (sig[0] - 1) / 3, 0.5 * sig[1] / 3, 0.5 * sig[2] / 3]
    assert inp.logps.grad.tolist() == pytest.approx(want, rel=1e-12)
    assert inp.ref_logps.grad is None and want[0] < 0 < min(want[1:])


def test_single_label_batches_report_only_their_rewards():
    out = losses.get(NAME)(unpaired([1.0, -1.0], [True, True]), beta=0.5)
    assert "rewards/chosen" in out.metrics and "rewards/rejected" not in out.metrics
    assert "rewards/margin" not in out.metrics and math.isfinite(out.loss.item())


@pytest.mark.parametrize("shift", ["running", "batch", "none"])
def test_each_pair_as_two_examples_is_half_the_paired_bco(shift):
    """The pipeline makes each pair one desirable and one undesirable example. On those, the unpaired
    mean over 2B examples is half the paired mean over B pairs of two terms, with the same δ and the
    same running state (the same rewards, the same count), step after step."""
    c, r = [1.0, -0.5, 2.5], [-1.0, 0.3, 2.0]
    pair = LossInputs(
        chosen_logps=torch.tensor(c, dtype=torch.float64) - 4.0,
        rejected_logps=torch.tensor(r, dtype=torch.float64) - 4.0,
        ref_chosen_logps=torch.full((3,), -4.0, dtype=torch.float64),
        ref_rejected_logps=torch.full((3,), -4.0, dtype=torch.float64),
    )
    examples = unpaired(c + r, [True] * 3 + [False] * 3)
    for _ in range(2):
        ours, theirs = (
            losses.get(NAME)(examples, beta=0.3, reward_shift=shift),
            losses.get("bco")(pair, beta=0.3, reward_shift=shift),
        )
        assert ours.loss.item() == pytest.approx(theirs.loss.item() / 2, rel=1e-12)
        assert ours.metrics["bco/delta"] == pytest.approx(theirs.metrics["bco/delta"], rel=1e-12)
        assert (ours.state is None) == (theirs.state is None)
        if ours.state is not None:
            assert {k: v.item() for k, v in ours.state.items()} == {
                k: v.item() for k, v in theirs.state.items()
            }
        examples.state, pair.state = ours.state, theirs.state


# --------------------------------------------------------------------------- parity with TRL's BCOTrainer


class RunningMoments:
    """TRL 0.21 ``RunningMoments`` (``trl/trainer/utils.py``), one process: its mean and count (its
    variance and std, which the loss never reads, left out)."""

    def __init__(self):
        self.mean, self.count = 0, 1e-24

    @torch.no_grad()
    def update(self, xs: torch.Tensor) -> None:
        xs_count = xs.numel()
        xs_var, xs_mean = torch.var_mean(xs, unbiased=False)
        xs_mean, xs_var = xs_mean.float(), xs_var.float()
        delta = xs_mean - self.mean
        tot_count = self.count + xs_count
        self.mean += (delta * xs_count / tot_count).item()
        self.count = tot_count


def trl_bco_loss(
    running, beta, policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
):
    """TRL 0.21 ``BCOTrainer.bco_loss`` without UDM (``match_underlying_distribution`` False, its default),
    reduced as ``get_batch_loss_metrics`` reduces it (``losses.nanmean()``)."""
    chosen_rewards = beta * (policy_chosen_logps - ref_chosen_logps)
    rejected_rewards = beta * (policy_rejected_logps - ref_rejected_logps)
    running.update(torch.cat((chosen_rewards, rejected_rewards), 0).detach())
    delta = torch.as_tensor(running.mean, device=chosen_rewards.device)
    chosen_losses = -F.logsigmoid(chosen_rewards - delta)
    rejected_losses = -F.logsigmoid(-(rejected_rewards - delta))
    return torch.cat((chosen_losses, rejected_losses), dim=0).nanmean(), delta


def steps(seed: int = 0) -> list[dict]:
    """Four batches of examples (sizes 6, 5, 3, 4; the third all undesirable), float64."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for b, labels in ((6, None), (5, None), (3, [False] * 3), (4, [True, False, True, True])):
        if labels is None:
            labels = (torch.rand(b, generator=gen) < 0.5).tolist()
        logps = -torch.rand(b, generator=gen, dtype=torch.float64) * 20 - 1
        ref = logps + torch.randn(b, generator=gen, dtype=torch.float64) * 3 + 1.5  # rewards far from 0
        out.append({"logps": logps.tolist(), "ref": ref.tolist(), "labels": labels})
    return out


def run_trl(bco_loss, batches: list[dict]) -> list[dict]:
    """TRL's step loop: the batch split by label (``get_batch_loss_metrics``), the loss, its gradient."""
    results = []
    for b in batches:
        logps = torch.tensor(b["logps"], dtype=torch.float64, requires_grad=True)
        ref = torch.tensor(b["ref"], dtype=torch.float64)
        chosen = [i for i, lab in enumerate(b["labels"]) if lab is True]
        rejected = [i for i, lab in enumerate(b["labels"]) if lab is False]
        loss, delta = bco_loss(logps[chosen], logps[rejected], ref[chosen], ref[rejected])
        loss.backward()
        results.append({"loss": loss.item(), "delta": float(delta), "grad": logps.grad.tolist()})
    return results


def run_ours(batches: list[dict], beta: float) -> list[dict]:
    """Ours, one micro-batch a step: each step's state is the last step's proposal, as the trainer keeps it."""
    state, results = None, []
    for b in batches:
        inp = LossInputs(
            logps=torch.tensor(b["logps"], dtype=torch.float64, requires_grad=True),
            ref_logps=torch.tensor(b["ref"], dtype=torch.float64),
            labels=torch.tensor(b["labels"]),
            state=state,
        )
        out = losses.get(NAME)(inp, beta=beta)
        out.loss.backward()
        state = {k: torch.tensor(float(v)) for k, v in out.state.items()}
        results.append(
            {"loss": out.loss.item(), "delta": out.metrics["bco/delta"], "grad": inp.logps.grad.tolist()}
        )
    return results


def assert_same(ours: list[dict], theirs: list[dict]) -> None:
    assert len(ours) == len(theirs)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6), step
        assert a["delta"] == pytest.approx(b["delta"], rel=1e-6, abs=1e-9), step
        torch.testing.assert_close(
            torch.tensor(a["grad"]), torch.tensor(b["grad"]), **TOL, msg=f"step {step}"
        )


@pytest.mark.parametrize("seed, beta", [(0, 0.1), (1, 0.5), (2, 2.0)])
def test_matches_trl_bco_trainer_over_steps(seed, beta):
    """Loss, δ and gradient at each of four steps, the running mean carried (TRL's δ moves every step)."""
    running = RunningMoments()
    theirs = run_trl(lambda *t: trl_bco_loss(running, beta, *t), steps(seed))
    assert_same(run_ours(steps(seed), beta), theirs)
    assert len({round(s["delta"], 9) for s in theirs}) == 4


TRL_0_21 = os.environ.get("OXBENCH_TRL_0_21")
REAL_TRL = """
import json, sys, types
sys.path.insert(0, sys.argv[1])
import trl
from trl.trainer.bco_trainer import BCOTrainer
from trl.trainer.utils import RunningMoments
assert trl.__version__ == "0.21.0", trl.__version__
sys.path.insert(0, sys.argv[2])
from test_bco_unpaired import run_trl, steps
trainer = object.__new__(BCOTrainer)  # only what bco_loss reads
trainer.running = RunningMoments(accelerator=types.SimpleNamespace(use_distributed=False))
trainer.embedding_func = trainer.embedding_tokenizer = None  # no UDM
trainer.beta = float(sys.argv[4])


def bco_loss(*logps):
    losses, _, _, delta = trainer.bco_loss(*logps, None, None)
    return losses.nanmean(), delta


print(json.dumps(run_trl(bco_loss, steps(int(sys.argv[3])))))
"""


@pytest.mark.slow
@pytest.mark.skipif(not TRL_0_21, reason="OXBENCH_TRL_0_21 (an unpacked trl 0.21 wheel) is not set")
@pytest.mark.parametrize("seed, beta", [(0, 0.1), (1, 0.5), (2, 2.0)])
def test_matches_trl_0_21_s_own_code(seed, beta):
    """TRL 0.21's ``BCOTrainer.bco_loss`` and ``RunningMoments`` themselves, in this file's step loop
    (:func:`run_trl`) on the same steps."""
    args = [sys.executable, "-c", REAL_TRL, TRL_0_21, str(Path(__file__).parent), str(seed), str(beta)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert_same(run_ours(steps(seed), beta), json.loads(done.stdout.strip().splitlines()[-1]))
