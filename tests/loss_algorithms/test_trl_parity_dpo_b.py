"""Parity of group dpo_b with TRL 1.16's ``DPOTrainer`` (rtol 1e-5).

TRL implements, in this group: f-DPO (``f_divergence_type``, ``f_alpha_divergence_coef``), WPO
(``use_weighting``), LD-DPO (``ld_alpha``), RPO (``loss_type=["sigmoid", "sft"]`` with
``loss_weights=[1, rpo_alpha]``; TRL 1.16 has no ``rpo_alpha`` field) and TR-DPO
(``sync_ref_model`` through ``SyncRefModelCallback``). ODPO, beta-DPO, Cal-DPO, TDPO, FocalPO,
GPO, DPO-Shift, Dr. DPO, chi-PO and SamPO are not in TRL.

How: one real ``DPOTrainer`` (tiny random ``Qwen2ForCausalLM`` policy and a differently seeded
reference, char tokenizer, CPU) is built once; each test sets the loss attributes TRL reads in
``_compute_loss`` (``f_divergence_type``, ``use_weighting``, ``ld_alpha``, ``loss_types``, ...),
calls ``trainer.compute_loss`` on a collated batch, and compares with our loss on log-probs
computed from the same two models' ordinary forward (full logits, log-softmax, gather).
"""

from __future__ import annotations

import copy
import types

import pytest
import torch
import torch.nn.functional as F

import losses
from losses.types import LossInputs

trl = pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # ~15 s on two shared cores, mostly importing TRL and building the trainer

RTOL = 1e-5
# Gradients: TRL's chunked fused LM head and the plain forward differ by float32 rounding, so a
# gradient tensor is compared as a whole: max |ours - TRL| <= 2e-5 * max |TRL|.
GRAD_RTOL = 2e-5
# Unequal lengths everywhere, so length handling (LD-DPO tails, WPO means) is exercised.
EXAMPLES = [
    {"prompt_ids": [5, 6, 7], "chosen_ids": [8, 9, 10, 11], "rejected_ids": [12, 13]},
    {"prompt_ids": [5, 6], "chosen_ids": [14], "rejected_ids": [15, 16, 17, 18, 19]},
    {"prompt_ids": [20, 21, 22, 23], "chosen_ids": [24, 25, 26], "rejected_ids": [27, 28, 29]},
]
# Same chosen length in every pair: TRL's batch-token-mean SFT term equals the per-sequence mean.
EQUAL_CHOSEN = [
    {"prompt_ids": [5, 6, 7], "chosen_ids": [8, 9, 10], "rejected_ids": [12, 13]},
    {"prompt_ids": [5, 6], "chosen_ids": [14, 30, 31], "rejected_ids": [15, 16, 17, 18, 19]},
]


def tiny_model(vocab_size: int, seed: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32, vocab_size=vocab_size,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # larger weights than the default init: log-ratios of order 1, not 1e-2
        for p in model.parameters():
            p.mul_(3.0)
    return model


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from oxbench.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    args = DPOConfig(
        output_dir=str(tmp_path_factory.mktemp("trl")), report_to=[], use_cpu=True, bf16=False,
        per_device_train_batch_size=2, gradient_checkpointing=False, save_strategy="no",
        use_weighting=True,  # makes the fused head also return log_sum_sq_probs; switched per test
    )  # fmt: skip
    data = Dataset.from_dict({"prompt": ["1+1="], "chosen": ["2"], "rejected": ["3"]})
    tr = DPOTrainer(
        model=tiny_model(len(tok), 0), ref_model=tiny_model(len(tok), 1), args=args,
        train_dataset=data, processing_class=tok,
    )  # fmt: skip
    tr.model.eval()
    return tr


def configure(tr, **attrs):
    """Reset TRL's loss attributes to plain sigmoid DPO, then apply ``attrs``."""
    base = dict(
        beta=0.1, loss_types=["sigmoid"], loss_weights=[1.0], f_divergence_type="reverse_kl",
        f_alpha_divergence_coef=0.5, use_weighting=False, ld_alpha=None,
    )  # fmt: skip
    for key, value in {**base, **attrs}.items():
        setattr(tr, key, value)


def trl_loss(tr, batch) -> torch.Tensor:
    tr.model.zero_grad()
    return tr.compute_loss(tr.model, batch)


def token_logps(model, batch, with_grad: bool):
    """Per-token log-probs (2B, L-1), logits and mask at the completion positions, via the plain forward."""
    with torch.set_grad_enabled(with_grad):
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    mask = batch["completion_mask"][:, 1:].to(logits.dtype)
    tok = F.log_softmax(logits, -1).gather(-1, batch["input_ids"][:, 1:].unsqueeze(-1)).squeeze(-1) * mask
    return tok, logits, mask


def our_inputs(tr, batch) -> LossInputs:
    """Our LossInputs from the trainer's own policy and reference models; chunk(2) = [chosen; rejected]."""
    tok, logits, mask = token_logps(tr.model, batch, True)
    ref_tok, ref_logits, _ = token_logps(tr.ref_model, batch, False)
    (ct, rt), (rct, rrt) = tok.chunk(2), ref_tok.chunk(2)
    (cm, rm), (cl, rl), (rcl, rrl) = mask.chunk(2), logits.chunk(2), ref_logits.chunk(2)
    return LossInputs(
        chosen_logps=ct.sum(-1), rejected_logps=rt.sum(-1), ref_chosen_logps=rct.sum(-1),
        ref_rejected_logps=rrt.sum(-1), chosen_token_logps=ct, rejected_token_logps=rt,
        ref_chosen_token_logps=rct, ref_rejected_token_logps=rrt, chosen_mask=cm, rejected_mask=rm,
        chosen_logits=cl, rejected_logits=rl, ref_chosen_logits=rcl, ref_rejected_logits=rrl,
    )  # fmt: skip


def grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def assert_parity(tr, batch, name, trl_attrs, **hparams):
    """Loss values agree at rtol 1e-5, parameter gradients as described at GRAD_RTOL."""
    configure(tr, **trl_attrs)
    ref_loss = trl_loss(tr, batch)
    ref_loss.backward()
    ref_grads = grads(tr.model)
    tr.model.zero_grad()
    ours = losses.get(name)(our_inputs(tr, batch), **hparams).loss
    ours.backward()
    torch.testing.assert_close(ours.detach(), ref_loss.detach(), rtol=RTOL, atol=0.0)
    for a, b in zip(grads(tr.model), ref_grads, strict=True):
        assert (a - b).abs().max() <= GRAD_RTOL * b.abs().max(), name
    tr.model.zero_grad()


@pytest.fixture(scope="module")
def batch(trainer):
    return trainer.data_collator(EXAMPLES)


def test_log_ratios_are_not_trivial(trainer, batch):
    """Guard: the two models differ enough that every f-divergence gives a different loss."""
    inputs = our_inputs(trainer, batch)
    ratios = (inputs.chosen_logps - inputs.ref_chosen_logps).detach()
    assert ratios.abs().min() > 0.05


@pytest.mark.parametrize("kind", ["reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"])
def test_fdpo(trainer, batch, kind):
    assert_parity(
        trainer, batch, "fdpo", {"f_divergence_type": kind, "f_alpha_divergence_coef": 0.5},
        beta=0.1, f_divergence_type=kind, f_alpha_divergence_coef=0.5,
    )  # fmt: skip


def test_fdpo_alpha_convention(trainer, batch):
    """Away from 0.5, TRL's coefficient a is our (the paper's) 1 − α: ours at 0.3 == TRL at 0.7."""
    assert_parity(
        trainer, batch, "fdpo", {"f_divergence_type": "alpha_divergence", "f_alpha_divergence_coef": 0.7},
        beta=0.1, f_divergence_type="alpha_divergence", f_alpha_divergence_coef=0.3,
    )  # fmt: skip


def test_wpo(trainer, batch):
    """Loss and gradients: the weights are detached on both sides."""
    assert_parity(trainer, batch, "wpo", {"use_weighting": True}, beta=0.1)


@pytest.mark.parametrize("ld_alpha", [0.0, 0.5, 1.0])
def test_ld_dpo(trainer, batch, ld_alpha):
    assert_parity(trainer, batch, "ld_dpo", {"ld_alpha": ld_alpha}, beta=0.1, ld_alpha=ld_alpha)


def test_rpo_equal_chosen_lengths(trainer):
    equal = trainer.data_collator(EQUAL_CHOSEN)
    assert_parity(
        trainer, equal, "rpo", {"loss_types": ["sigmoid", "sft"], "loss_weights": [1.0, 0.5]},
        beta=0.1, rpo_alpha=0.5,
    )  # fmt: skip


def test_rpo_unequal_lengths_differs_as_documented(trainer, batch):
    """With unequal chosen lengths TRL's SFT term is the batch token mean; ours is the mean of
    per-response means (the paper's). DPO + α·(token mean) reproduces TRL; ours is different."""
    configure(trainer, loss_types=["sigmoid", "sft"], loss_weights=[1.0, 0.5])
    ref_loss = trl_loss(trainer, batch).detach()
    inputs = our_inputs(trainer, batch)
    token_mean = -(inputs.chosen_token_logps.sum() / inputs.chosen_mask.sum())
    dpo = losses.get("dpo")(inputs, beta=0.1).loss
    torch.testing.assert_close((dpo + 0.5 * token_mean).detach(), ref_loss, rtol=RTOL, atol=0.0)
    ours = losses.get("rpo")(inputs, beta=0.1, rpo_alpha=0.5).loss.detach()
    assert not torch.isclose(ours, ref_loss, rtol=1e-3)


def test_tr_dpo_loss(trainer, batch):
    assert_parity(trainer, batch, "tr_dpo", {}, beta=0.1, ref_model_mixup_alpha=0.6, ref_model_sync_steps=2)


def test_tr_dpo_reference_update_matches_sync_callback(trainer):
    """Five optimiser steps with τ = 2, α = 0.6: our schedule + mix == TRL's SyncRefModelCallback."""
    from trl.trainer.callbacks import SyncRefModelCallback

    from losses.tr_dpo import mix_reference_, should_sync_reference

    policy = copy.deepcopy(trainer.model)
    theirs, ours = copy.deepcopy(trainer.ref_model), copy.deepcopy(trainer.ref_model)
    callback = SyncRefModelCallback(ref_model=theirs, accelerator=None)
    args = types.SimpleNamespace(ref_model_sync_steps=2, ref_model_mixup_alpha=0.6)
    for step in range(1, 6):
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(0.01 * step)  # stand-in for an optimiser step
        callback.on_step_end(args, types.SimpleNamespace(global_step=step), None, model=policy)
        if should_sync_reference(step, args.ref_model_sync_steps):
            mix_reference_(policy.parameters(), ours.parameters(), args.ref_model_mixup_alpha)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=0.0)
    assert not torch.equal(next(ours.parameters()), next(trainer.ref_model.parameters()))
