"""Parity with TRL 1.16 for simpo, cpo, alphapo (CPOTrainer), orpo (ORPOTrainer) and kto (KTOTrainer).

TRL's own loss code runs on a tiny random ``Qwen2ForCausalLM``: the trainers are built with
``object.__new__`` (no ``__init__``: no datasets, no accelerate state) and given only the
attributes their loss methods read, then ``get_batch_loss_metrics`` (CPO, ORPO) or
``_compute_loss`` (KTO) runs the model forward and the loss exactly as in training. Our losses
get log-probs from an independent plain forward of the same model. rtol 1e-5.

Where we deviate from TRL on purpose (ORPO's NLL over prompt tokens; CPO's optional summed NLL,
``nll_reduction="sum"``), the test checks the exact relation between the two instead.
"""

from __future__ import annotations

import collections
import os
import types

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from loss_fixtures import micro_qwen2, pair_from_tokens  # noqa: E402
from trl import KTOTrainer  # noqa: E402
from trl.experimental.cpo import CPOTrainer  # noqa: E402
from trl.experimental.orpo import ORPOTrainer  # noqa: E402
from trl.trainer.utils import add_fused_lm_head  # noqa: E402

import losses  # noqa: E402
from losses.types import LossInputs  # noqa: E402
from oxbench.models.tokenizer import build_char_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow  # importing TRL alone takes ~10 s on the shared CPUs

RTOL = 1e-5
ACCELERATOR = types.SimpleNamespace(device=torch.device("cpu"), gather_for_metrics=lambda x: x)
PROMPTS = ["1+2=", "What is 7*6?", "9-3="]
CHOSEN = ["3", "It is 42.", "six"]
REJECTED = ["12", "41", "5 or 7"]


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    m = micro_qwen2(len(tok)).double().eval()  # float64: rounding far below the 1e-5 tolerance
    torch.nn.init.normal_(m.lm_head.weight, std=0.5)  # less flat than the default init: log-probs differ
    add_fused_lm_head(m, outputs=("log_probs", "entropy", "mean_logits"))  # KTOTrainer calls it fused
    return m


def encode(tok, prompts, responses):
    """Right-padded ``prompt + response + eos``: ids, attention mask, labels (-100 off the response)."""
    rows = []
    for p, r in zip(prompts, responses):
        pi, ri = tok(p)["input_ids"], tok(r)["input_ids"] + [tok.eos_token_id]
        rows.append((pi + ri, [-100] * len(pi) + ri))
    width = max(len(ids) for ids, _ in rows)
    pad = width - torch.tensor([len(ids) for ids, _ in rows])
    ids = torch.tensor([x + [tok.pad_token_id] * int(n) for (x, _), n in zip(rows, pad)])
    att = torch.tensor([[1] * len(x) + [0] * int(n) for (x, _), n in zip(rows, pad)])
    labels = torch.tensor([y + [-100] * int(n) for (_, y), n in zip(rows, pad)])
    return ids, att, labels


def token_logps(model, ids, att, labels):
    """Our side: plain forward, log-softmax, next-token gather. (B, T-1) zero off the response, mask."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
    target = labels[:, 1:]
    mask = (target != -100).float()
    lp = torch.log_softmax(logits, -1).gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return lp * mask, mask


def pair_batch(tok, prompts=PROMPTS):
    ci, ca, cl = encode(tok, prompts, CHOSEN)
    ri, ra, rl = encode(tok, prompts, REJECTED)
    return dict(
        chosen_input_ids=ci,
        chosen_attention_mask=ca,
        chosen_labels=cl,
        rejected_input_ids=ri,
        rejected_attention_mask=ra,
        rejected_labels=rl,
    )


def pair_inputs(model, batch) -> LossInputs:
    c_lp, c_mask = token_logps(
        model, batch["chosen_input_ids"], batch["chosen_attention_mask"], batch["chosen_labels"]
    )
    r_lp, r_mask = token_logps(
        model, batch["rejected_input_ids"], batch["rejected_attention_mask"], batch["rejected_labels"]
    )
    return pair_from_tokens(c_lp, r_lp, c_mask, r_mask)


def trl_cpo(model, batch, **config):
    """CPOTrainer.get_batch_loss_metrics with the attributes its __init__ would set from CPOConfig."""
    trainer = object.__new__(CPOTrainer)
    attrs = dict(
        beta=0.1, label_smoothing=0.0, loss_type="sigmoid", cpo_alpha=1.0, simpo_gamma=0.5, alpha=0.0
    )
    attrs.update(config)
    trainer.__dict__.update(
        attrs, is_encoder_decoder=False, pad_token_id=0, accelerator=ACCELERATOR, aux_loss_enabled=False
    )
    with torch.no_grad():
        return trainer.get_batch_loss_metrics(model, batch)


def trl_orpo(model, batch, beta):
    trainer = object.__new__(ORPOTrainer)
    trainer.__dict__.update(
        beta=beta, is_encoder_decoder=False, padding_value=0, accelerator=ACCELERATOR, aux_loss_enabled=False
    )
    with torch.no_grad():
        return trainer.get_batch_loss_metrics(model, batch)


def close(ours, theirs):
    torch.testing.assert_close(
        torch.as_tensor(ours).double(), torch.as_tensor(theirs).double(), rtol=RTOL, atol=0.0
    )


def assert_reward_metrics_match(out, metrics):
    for ours, theirs in [("chosen", "chosen"), ("rejected", "rejected"), ("margin", "margins")]:
        close(out.metrics[f"rewards/{ours}"], metrics[f"rewards/{theirs}"])
    assert out.metrics["rewards/accuracy"] == metrics["rewards/accuracies"]


# --------------------------------------------------------------------------- CPOTrainer family


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_simpo_matches_trl_cpo_trainer_simpo(model, tok, label_smoothing):
    batch = pair_batch(tok)
    hp = dict(beta=2.0, simpo_gamma=1.0, label_smoothing=label_smoothing)
    loss, metrics = trl_cpo(model, batch, loss_type="simpo", cpo_alpha=0.0, **hp)
    out = losses.get("simpo")(pair_inputs(model, batch), **hp)
    close(out.loss, loss)
    assert_reward_metrics_match(out, metrics)


@pytest.mark.parametrize("alpha", [0.25, -0.5])
def test_alphapo_matches_trl_cpo_trainer_alphapo(model, tok, alpha):
    """TRL's ``loss_type="alphapo"`` is ``simpo`` with ``cpo_alpha=0`` and ``alpha`` set."""
    batch = pair_batch(tok)
    hp = dict(alpha=alpha, beta=2.5, simpo_gamma=0.1)
    loss, metrics = trl_cpo(model, batch, loss_type="simpo", cpo_alpha=0.0, **hp)
    out = losses.get("alphapo")(pair_inputs(model, batch), **hp)
    close(out.loss, loss)
    assert_reward_metrics_match(out, metrics)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_cpo_preference_term_matches_trl(model, tok, label_smoothing):
    batch = pair_batch(tok)
    loss, metrics = trl_cpo(model, batch, beta=0.1, cpo_alpha=0.0, label_smoothing=label_smoothing)
    out = losses.get("cpo")(
        pair_inputs(model, batch), beta=0.1, cpo_alpha=0.0, label_smoothing=label_smoothing
    )
    close(out.loss, loss)
    assert_reward_metrics_match(out, metrics)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_cpo_matches_trl_at_its_defaults(model, tok, label_smoothing):
    """The whole CPO loss, NLL included, at the defaults (β = 0.1, α = 1, ``nll_reduction="mean"``):
    TRL's NLL is the token mean over the chosen response tokens of the batch, and so is ours.
    (Version 1 summed per response: 33.30 here against TRL's 7.61.)"""
    batch = pair_batch(tok)
    loss, metrics = trl_cpo(model, batch, label_smoothing=label_smoothing)
    out = losses.get("cpo")(pair_inputs(model, batch), label_smoothing=label_smoothing)
    close(out.loss, loss)
    close(out.metrics["nll"], metrics["nll_loss"])
    assert_reward_metrics_match(out, metrics)


def test_cpo_summed_nll_is_trls_token_mean_rescaled_to_sequence_sums(model, tok):
    """``nll_reduction="sum"`` is the paper's -E[log π(y_w|x)], the mean over B pairs of the summed
    log-prob; TRL's NLL is the token mean over the N chosen tokens of the batch: sum = TRL · N / B."""
    batch = pair_batch(tok)
    inputs = pair_inputs(model, batch)
    n_tokens, pairs = inputs.chosen_mask.sum(), inputs.chosen_mask.shape[0]
    prefer, _ = trl_cpo(model, batch, cpo_alpha=0.0)
    full, metrics = trl_cpo(model, batch, cpo_alpha=1.5)
    out = losses.get("cpo")(inputs, cpo_alpha=1.5, nll_reduction="sum")
    close(out.metrics["nll"], metrics["nll_loss"] * n_tokens / pairs)
    close(out.loss, prefer + 1.5 * metrics["nll_loss"] * n_tokens / pairs)
    assert abs(out.loss.item() - full.item()) > 1.0  # the two reductions really differ here
    close(losses.get("cpo")(inputs, cpo_alpha=1.5).loss, full)


# --------------------------------------------------------------------------- ORPOTrainer


def test_orpo_matches_trl_with_one_token_prompts(model, tok):
    """With a one-token prompt TRL's full-sequence NLL (shifted) covers the response only, as ours."""
    batch = pair_batch(tok, prompts=["?", "#", "="])
    loss, metrics = trl_orpo(model, batch, beta=0.1)
    out = losses.get("orpo")(pair_inputs(model, batch), beta=0.1)
    close(out.loss, loss)
    assert_reward_metrics_match(out, metrics)
    for key in ("nll", "log_odds_ratio", "log_odds_chosen"):
        close(out.metrics[key], metrics["nll_loss" if key == "nll" else key])


def test_orpo_odds_term_matches_trl_and_nll_leaves_out_the_prompt(model, tok):
    """Deliberate deviation: TRL's NLL also scores prompt tokens; ours is the response-only token mean.
    The odds-ratio part, loss - nll = -λ·mean logσ(log-odds ratio), is identical."""
    batch = pair_batch(tok)
    inputs = pair_inputs(model, batch)
    loss, metrics = trl_orpo(model, batch, beta=0.1)
    out = losses.get("orpo")(inputs, beta=0.1)
    close(out.loss - out.metrics["nll"], loss - metrics["nll_loss"])
    response_ce = -(inputs.chosen_token_logps.sum() / inputs.chosen_mask.sum())
    close(out.metrics["nll"], response_ce)
    assert abs(out.metrics["nll"] - metrics["nll_loss"]) > 1e-2


# --------------------------------------------------------------------------- KTOTrainer


def kto_batch(tok, model, logratio, kl_offset):
    """Four examples, KL completions shifted by one within the batch (TRL's construction).

    Reference log-probs are set from the policy's: ref = policy - logratio, ref_KL = KL - kl_offset,
    so the log-ratios and the KL estimate mean(kl_offset) are known.
    """
    prompts, comps = PROMPTS + ["2*2="], CHOSEN + ["5"]
    ids, att, labels = encode(tok, prompts, comps)
    kl_ids, kl_att, kl_labels = encode(tok, prompts, comps[-1:] + comps[:-1])
    lp, mask = token_logps(model, ids, att, labels)
    kl_lp, _ = token_logps(model, kl_ids, kl_att, kl_labels)
    inputs = LossInputs(
        logps=lp.sum(-1),
        token_logps=lp,
        mask=mask,
        ref_logps=lp.sum(-1) - torch.tensor(logratio),
        labels=torch.tensor([True, False, True, False]),
        kl_logps=kl_lp.sum(-1),
        ref_kl_logps=kl_lp.sum(-1) - torch.tensor(kl_offset),
    )
    batch = dict(
        input_ids=ids,
        attention_mask=att,
        completion_mask=(labels != -100).long(),
        KL_input_ids=kl_ids,
        KL_attention_mask=kl_att,
        KL_completion_mask=(kl_labels != -100).long(),
        label=inputs.labels,
        ref_logps=inputs.ref_logps,
        ref_KL_logps=inputs.ref_kl_logps,
    )
    return batch, inputs


def trl_kto(model, batch, **config):
    """KTOTrainer._compute_loss with precomputed reference log-probs (``precompute_ref_logps=True``)."""
    trainer = object.__new__(KTOTrainer)
    trainer.__dict__.update(
        config,
        model=model,
        accelerator=ACCELERATOR,
        _metrics=collections.defaultdict(lambda: collections.defaultdict(list)),
        precompute_ref_logps=True,
        calculate_KL=True,
        aux_loss_enabled=False,
        loss_type="kto",
        _total_train_tokens=0,
        _tp_size=1,
    )
    with torch.no_grad():
        loss = trainer._compute_loss(model, batch, return_outputs=False)
    return loss, {k: v[-1] for k, v in trainer._metrics["eval"].items()}


@pytest.mark.parametrize(
    "kl_offset, weights",
    [((1.0, 0.2, -0.4, 0.6), (1.0, 1.0)), ((-1.0, 0.2, -0.4, 0.6), (1.0, 1.33))],
    ids=["kl-positive", "kl-clamped"],
)
def test_kto_matches_trl_kto_trainer(model, tok, kl_offset, weights):
    batch, inputs = kto_batch(tok, model, logratio=(0.5, -1.0, 2.0, 0.3), kl_offset=kl_offset)
    hp = dict(beta=0.1, desirable_weight=weights[0], undesirable_weight=weights[1])
    loss, metrics = trl_kto(model, batch, **hp)
    out = losses.get("kto")(inputs, **hp)
    close(out.loss, loss)
    close(out.metrics["kl"], max(0.0, sum(kl_offset) / 4))
    for key in ("kl", "rewards/chosen", "rewards/rejected"):
        close(out.metrics[key], metrics[key])
    close(out.metrics["rewards/margin"], metrics["rewards/margins"])
