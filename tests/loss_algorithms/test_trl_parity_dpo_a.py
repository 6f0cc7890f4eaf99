"""Parity of group dpo_a's losses with TRL 1.16's ``DPOTrainer`` (rtol 1e-5).

TRL 1.16 computes every DPO loss type inside ``DPOTrainer._compute_loss``, right after the model
forward; there is no separate loss method. Two checks run TRL's own code:

1. ``_compute_loss`` called unbound on a light ``SimpleNamespace`` carrying the attributes it reads,
   with a stand-in model whose ``log_probs`` are given per-token log-probs (requires_grad).
   Same inputs go to our loss; losses, gradients w.r.t. the policy token log-probs and the reward
   metrics TRL logs must match. Batches of 4 pairs, ragged lengths, so IPO / sigmoid_norm length
   normalisation and AOT's sorting are exercised.
2. A real ``DPOTrainer`` on a tiny random ``Qwen2ForCausalLM`` (separate random reference model)
   and the char tokenizer: ``trainer.compute_loss`` on a collated batch versus our loss on
   log-probs we compute from the same two models with a plain log-softmax. This checks the
   conventions (summed response log-probs, masks, per-token lengths), not just the algebra.

Not in TRL 1.16, so not here: ``dpop``, ``rdpo`` (tested against the papers in test_dpo_a.py).
``bco`` is compared with ``reward_shift="none"``: TRL 1.16's ``bco_pair`` has no reward shift.
"""

from __future__ import annotations

import tempfile
import types
from collections import defaultdict

import pytest
import torch
from datasets import Dataset
from loss_fixtures import micro_qwen2, pair_from_tokens
from transformers import Qwen2ForCausalLM
from trl import DPOConfig, DPOTrainer

import losses
from losses import LossInputs
from oxbench.models.tokenizer import build_char_tokenizer

pytestmark = pytest.mark.slow  # ~15-25 s on the shared CPUs, most of it importing TRL

# (our loss, our hparams, TRL loss_type, TRL beta, TRL label_smoothing, TRL discopop_tau)
CASES = [
    ("dpo", {"beta": 0.1, "label_smoothing": 0.0}, "sigmoid", 0.1, 0.0, 0.05),
    ("dpo", {"beta": 0.3}, "sigmoid", 0.3, 0.0, 0.05),
    ("ipo", {"beta": 0.1}, "ipo", 0.1, 0.0, 0.05),
    ("ipo", {"beta": 0.7}, "ipo", 0.7, 0.0, 0.05),
    ("hinge", {"beta": 0.3}, "hinge", 0.3, 0.0, 0.05),
    ("exo", {"beta": 0.1, "label_smoothing": 1e-3}, "exo_pair", 0.1, 1e-3, 0.05),
    ("exo", {"beta": 0.5, "label_smoothing": 0.2}, "exo_pair", 0.5, 0.2, 0.05),
    ("nca", {"beta": 0.1}, "nca_pair", 0.1, 0.0, 0.05),
    ("robust_dpo", {"beta": 0.1, "label_smoothing": 0.1}, "robust", 0.1, 0.1, 0.05),
    ("robust_dpo", {"beta": 0.4, "label_smoothing": 0.3}, "robust", 0.4, 0.3, 0.05),
    ("bco", {"beta": 0.1, "reward_shift": "none"}, "bco_pair", 0.1, 0.0, 0.05),
    ("sppo", {"beta": 0.1}, "sppo_hard", 0.1, 0.0, 0.05),
    ("aot", {"beta": 0.1, "label_smoothing": 0.0}, "aot", 0.1, 0.0, 0.05),
    ("aot", {"beta": 0.5, "label_smoothing": 0.1}, "aot", 0.5, 0.1, 0.05),
    ("aot_unpaired", {"beta": 0.1, "label_smoothing": 0.0}, "aot_unpaired", 0.1, 0.0, 0.05),
    ("aot_unpaired", {"beta": 0.5, "label_smoothing": 0.1}, "aot_unpaired", 0.5, 0.1, 0.05),
    ("apo_zero", {"beta": 0.1}, "apo_zero", 0.1, 0.0, 0.05),
    ("apo_down", {"beta": 0.1}, "apo_down", 0.1, 0.0, 0.05),
    ("discopop", {"beta": 0.05, "discopop_tau": 0.05}, "discopop", 0.05, 0.0, 0.05),
    ("discopop", {"beta": 0.5, "discopop_tau": 0.3}, "discopop", 0.5, 0.0, 0.3),
    ("ln_dpo", {"beta": 5.0}, "sigmoid_norm", 5.0, 0.0, 0.05),
]
IDS = [f"{c[0]}-{c[2]}-b{c[3]}" for c in CASES]
# the real-trainer check is about conventions (sums, masks, lengths, sorting), so a subset will do
REAL = {
    "dpo-sigmoid-b0.1",
    "ipo-ipo-b0.7",
    "ln_dpo-sigmoid_norm-b5.0",
    "aot-aot-b0.5",
    "robust_dpo-robust-b0.4",
}
REAL_CASES = [case for case, case_id in zip(CASES, IDS) if case_id in REAL]
REAL_IDS = [case_id for case_id in IDS if case_id in REAL]
B, T = 4, 6
TOL = {"rtol": 1e-5, "atol": 1e-7}


# --- 1. TRL's _compute_loss on given log-probs ---------------------------------------------


class _FixedLogProbsModel:
    """Stands in for the fused-LM-head model: returns the given per-token log-probs."""

    training = True

    def __init__(self, log_probs: torch.Tensor):
        self.log_probs = log_probs

    def __call__(self, **kwargs):
        n, t = self.log_probs.shape
        zeros = torch.zeros(n, t)
        return types.SimpleNamespace(
            log_probs=self.log_probs, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool()
        )


class _Accelerator:
    device = torch.device("cpu")

    def gather_for_metrics(self, x):
        return x

    def gather(self, x):
        return x


def _batch(seed: int):
    """Per-token policy log-probs (2B, T) with grad, zero on padding; reference sums; masks."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([1, 3, 6, 4, 2, 6, 5, 1])  # chosen rows 0..B-1, rejected rows B..2B-1
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    policy = (-torch.rand(2 * B, T, generator=g) * 1.5 * mask).requires_grad_(True)
    ref_tok = -torch.rand(2 * B, T, generator=g) * 1.5 * mask
    return policy, ref_tok.sum(1), mask


def trl_loss(policy, ref, mask, loss_type, beta, label_smoothing, tau):
    """Run TRL's ``DPOTrainer._compute_loss`` with precomputed reference log-probs."""
    model = _FixedLogProbsModel(policy)
    trainer = types.SimpleNamespace(
        model=model,
        accelerator=_Accelerator(),
        aux_loss_enabled=False,
        ld_alpha=None,
        precompute_ref_logps=True,
        f_divergence_type="reverse_kl",
        loss_types=[loss_type],
        loss_weights=[1.0],
        beta=beta,
        label_smoothing=label_smoothing,
        args=types.SimpleNamespace(discopop_tau=tau),
        use_weighting=False,
        _metrics={"train": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
    )
    n = policy.shape[0]
    inputs = {
        "input_ids": torch.zeros(n, T + 1, dtype=torch.long),
        "attention_mask": torch.ones(n, T + 1, dtype=torch.long),
        # the first position is the prompt; TRL shifts the mask by one for the log-probs
        "completion_mask": torch.cat([torch.zeros(n, 1), mask], dim=1).long(),
        "ref_chosen_logps": ref[: n // 2],
        "ref_rejected_logps": ref[n // 2 :],
    }
    loss = DPOTrainer._compute_loss(trainer, model, inputs, False)
    return loss, {k: v[-1] for k, v in trainer._metrics["train"].items()}


def our_inputs(policy, ref, mask) -> LossInputs:
    tok, n = policy * mask, policy.shape[0] // 2
    return pair_from_tokens(
        tok[:n], tok[n:], mask[:n], mask[n:], ref_chosen_logps=ref[:n], ref_rejected_logps=ref[n:]
    )


def _grad(loss, leaf, mask):
    """Gradient on response tokens (TRL sums unmasked log-probs, which are zero on padding)."""
    return torch.autograd.grad(loss, leaf)[0] * mask


@pytest.mark.parametrize(("name", "hparams", "loss_type", "beta", "ls", "tau"), CASES, ids=IDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_loss_and_gradient_match_trl(name, hparams, loss_type, beta, ls, tau, seed):
    policy, ref, mask = _batch(seed)
    theirs, trl_metrics = trl_loss(policy, ref, mask, loss_type, beta, ls, tau)
    ours = losses.get(name)(our_inputs(policy, ref, mask), **hparams)
    torch.testing.assert_close(ours.loss, theirs, **TOL)
    torch.testing.assert_close(_grad(ours.loss, policy, mask), _grad(theirs, policy, mask), **TOL)
    for key, trl_key in [
        ("rewards/chosen", "rewards/chosen"),
        ("rewards/rejected", "rewards/rejected"),
        ("rewards/margin", "rewards/margins"),
        ("rewards/accuracy", "rewards/accuracies"),
    ]:
        assert ours.metrics[key] == pytest.approx(trl_metrics[trl_key], rel=1e-5, abs=1e-7)


def _pair(policy, ref, mask, i):
    """Pair i alone, as a batch of one: rows (i, B + i)."""
    rows = [i, B + i]
    return policy[rows], ref[rows], mask[rows]


@pytest.mark.parametrize(("beta", "eps"), [(0.1, 0.1), (0.4, 0.3)])
def test_cdpo_matches_trl_smoothed_logistic(beta, eps):
    """TRL 1.16's ``sigmoid`` no longer takes ``label_smoothing``; the cDPO formula survives in
    its ``aot`` loss, which for a batch of one pair (sorting is the identity) is exactly
    ``-(1-ε)logσ(βh) - ε logσ(-βh)``. Compare cDPO on the batch with TRL's aot pair by pair.
    """
    policy, ref, mask = _batch(0)
    ours = losses.get("cdpo")(our_inputs(policy, ref, mask), beta=beta, label_smoothing=eps)
    per_pair = [trl_loss(*_pair(policy, ref, mask, i), "aot", beta, eps, 0.05)[0] for i in range(B)]
    theirs = torch.stack(per_pair).mean()
    torch.testing.assert_close(ours.loss, theirs, **TOL)
    torch.testing.assert_close(_grad(ours.loss, policy, mask), _grad(theirs, policy, mask), **TOL)


def test_bco_default_shift_differs_from_trl():
    """Our default (paper's reward shift, batch estimate) is a deliberate difference from TRL 1.16."""
    policy, ref, mask = _batch(0)
    theirs, _ = trl_loss(policy, ref + 3.0, mask, "bco_pair", 0.1, 0.0, 0.05)  # rewards far from 0
    inputs = our_inputs(policy, ref + 3.0, mask)
    assert losses.get("bco")(inputs).loss.item() != pytest.approx(theirs.item(), rel=1e-3)


# --- 2. a real DPOTrainer on a tiny model ---------------------------------------------------


def _tiny(vocab: int, pad: int, eos: int, seed: int) -> Qwen2ForCausalLM:
    return micro_qwen2(vocab, seed, pad_token_id=pad, eos_token_id=eos)


@pytest.fixture(scope="module")
def real_trainer():
    tok = build_char_tokenizer()
    data = Dataset.from_dict(
        {
            "prompt": ["1+1=", "2+3=", "7-4=", "9*9="],
            "chosen": ["2", "5 ok", "3", "81!"],
            "rejected": ["3 no", "6", "2 hm?", "80"],
        }
    )
    ids = (len(tok), tok.pad_token_id, tok.eos_token_id)
    with tempfile.TemporaryDirectory() as out:
        args = DPOConfig(
            output_dir=out, per_device_train_batch_size=4, report_to=[], use_cpu=True, save_strategy="no"
        )
        trainer = DPOTrainer(
            model=_tiny(*ids, seed=0),
            ref_model=_tiny(*ids, seed=1),
            args=args,
            train_dataset=data,
            processing_class=tok,
        )
        batch = next(iter(trainer.get_train_dataloader()))
        yield trainer, batch


def _response_logps(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of the response tokens (zero elsewhere) and the response mask."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    targets = batch["input_ids"][:, 1:]
    tok = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    mask = batch["completion_mask"][:, 1:].float()
    return tok * mask, mask


def _real_inputs(trainer, batch) -> LossInputs:
    tok, mask = _response_logps(trainer.model, batch)
    with torch.no_grad():
        ref_tok, _ = _response_logps(trainer.ref_model, batch)
    n = tok.shape[0] // 2
    return pair_from_tokens(
        tok[:n],
        tok[n:],
        mask[:n],
        mask[n:],
        ref_chosen_logps=ref_tok[:n].sum(-1),
        ref_rejected_logps=ref_tok[n:].sum(-1),
    )


@pytest.mark.parametrize(("name", "hparams", "loss_type", "beta", "ls", "tau"), REAL_CASES, ids=REAL_IDS)
def test_matches_real_dpo_trainer(real_trainer, name, hparams, loss_type, beta, ls, tau):
    trainer, batch = real_trainer
    trainer.loss_types, trainer.loss_weights = [loss_type], [1.0]
    trainer.beta, trainer.label_smoothing, trainer.args.discopop_tau = beta, ls, tau
    theirs = trainer.compute_loss(trainer.model, batch)
    ours = losses.get(name)(_real_inputs(trainer, batch), **hparams)
    assert ours.loss.item() != 0.0
    torch.testing.assert_close(ours.loss, theirs, **TOL)
