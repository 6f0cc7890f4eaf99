"""Exact rollouts: the trainer trains on the token ids that were sampled, with the behaviour log-probs
captured while sampling, and an all-tied round of a self-play pair method adds no gradient.

The model here has a real byte-level BPE tokenizer (trained in the test), for which decoding a sample
and encoding the text again gives other tokens than the ones sampled.
"""

from __future__ import annotations

import helpers
import pytest
import torch
from helpers import cfg_for, length_parity_reward, rows_for
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import losses
from oxbench.engine import distributed as D
from oxbench.engine import learner
from oxbench.engine.rollout import Rollout, RolloutWorker, collate_rollouts
from oxbench.models.tiny import build_tiny
from oxbench.text.batching import encode_pair
from oxbench.text.formatting import format_completion, format_prompt

PAD, EOS = "<|pad|>", "<|endoftext|>"


def bpe_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE (GPT-2/Qwen style) trained on a few arithmetic prompts and answers."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=[PAD, EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    texts = [f"Question: {p['question']}\nAnswer: {p['answer']}" for p in rows_for("online", 64)]
    core.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS, padding_side="left")


def bpe_model():
    tok = bpe_tokenizer()
    torch.manual_seed(0)
    model = build_tiny("tiny-xs", len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return model, tok


def run_online(method: str, *, temperature: float = 1.0, steps: int = 1, reward_fn=length_parity_reward):
    """One micro-batch per round (2 prompts x 4 rollouts) on the BPE model."""
    D.init_distributed()
    model, tok = bpe_model()
    cfg = cfg_for("bpe", method, lr=1e-3)
    online = cfg.online.model_copy(update={"temperature": temperature, "rounds": steps})
    cfg = cfg.model_copy(update={"online": online})
    spec = losses.get(method)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    engine, res = helpers.train_online(
        cfg, spec, spec.resolve_hparams(), model, tok, rows_for("online", 8), run=method, reward_fn=reward_fn
    )
    return engine, res, tok, before


def spy(monkeypatch, obj, name: str, record: list, pick):
    """Wrap ``obj.name`` so each call appends ``pick(args, result)`` to ``record``."""
    real = getattr(obj, name)

    def wrapper(*a, **k):
        out = real(*a, **k)
        record.append(pick(a, out))
        return out

    monkeypatch.setattr(obj, name, wrapper)


def test_collate_rollouts_puts_behaviour_logps_on_the_response_mask():
    """Completion token j sits at position prompt_len + j; its log-prob is column prompt_len + j - 1."""
    r = Rollout("p", "q", "a", "", 0.0, 0, 0, True, [5, 6, 7], [8, 9, 1], [-0.1, -0.2, -0.3])
    short = Rollout("p", "q", "a", "", 0.0, 0, 0, False, [5, 6], [4], [-0.5])
    batch, old = collate_rollouts([r, short], pad_id=0, max_len=5)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9], [5, 6, 4, 0, 0]]  # r truncated to max_len
    torch.testing.assert_close(old, torch.tensor([[0, 0, -0.1, -0.2], [0, -0.5, 0, 0]]))
    assert torch.equal(old != 0, batch["response_mask"][:, 1:].bool())


def test_trainer_trains_on_the_sampled_ids_not_a_re_encoding(monkeypatch):
    rollouts, batches = [], []
    spy(monkeypatch, RolloutWorker, "rollouts", rollouts, lambda a, out: out)
    spy(monkeypatch, learner, "logps_from_output", batches, lambda a, out: a[1])
    _, _, tok, _ = run_online("sgrpo")
    (experience,), (batch,) = rollouts, batches
    assert len(experience) == batch["input_ids"].shape[0] == 8
    re_encoded = 0
    for i, r in enumerate(experience):
        ids, plen = r.prompt_ids + r.completion_ids, len(r.prompt_ids)
        assert len(r.behaviour_logps) == len(r.completion_ids) > 0
        assert r.finished == (r.completion_ids[-1] == tok.eos_token_id)
        assert tok.eos_token_id not in r.completion_ids[:-1]
        assert batch["input_ids"][i, : len(ids)].tolist() == ids
        assert batch["response_mask"][i].nonzero().flatten().tolist() == list(range(plen, len(ids)))
        assert r.completion == tok.decode(r.completion_ids, skip_special_tokens=True)
        # what the old trainer trained on: the decoded text encoded again
        text = r.completion + (tok.eos_token if r.finished else "")
        re_encoded += encode_pair(tok, format_prompt(tok, r.question), text, 128)[0] != ids
    assert re_encoded > 0, "decode -> encode gave back the sampled ids for every rollout: no test"


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_on_policy_ratios_are_one_at_step_0(monkeypatch, temperature):
    """The behaviour log-probs are temperature-1 log-probs of the sampled tokens: the trainer's own."""
    seen = []
    spy(monkeypatch, learner.Learner, "_inputs", seen, lambda a, out: out[0])
    run_online("sgrpo", temperature=temperature)
    inp = seen[0]
    mask = inp.mask.bool()
    assert mask.sum() > 0 and torch.equal(inp.old_token_logps != 0, mask)
    ratio = torch.exp(inp.token_logps.detach() - inp.old_token_logps)[mask]
    assert (ratio - 1).abs().max().item() < 1e-5


def _rollout(group: int, reward: float, completion_ids: list[int]) -> Rollout:
    logps = [-1.0] * len(completion_ids)
    return Rollout(f"p{group}", "1 + 1", "2", "x", reward, group, 0, True, [3, 4], completion_ids, logps)


def test_self_play_pairs_are_sampled_ids_and_tied_groups_give_none():
    spec, tok = losses.get("online_dpo"), bpe_tokenizer()
    part = [
        _rollout(0, 1.0, [10, 11]),
        _rollout(0, 0.0, [12, 1]),
        _rollout(1, 0.0, [5]),
        _rollout(1, 0.0, [6]),
    ]
    (ex,) = learner.pair_examples(spec, part, tok, max_len=64)
    assert ex["chosen"] == ([3, 4, 10, 11], 2) and ex["rejected"] == ([3, 4, 12, 1], 2)
    assert learner.pair_examples(spec, part[2:], tok, max_len=64) == []
    (gold,) = learner.pair_examples(losses.get("spin"), part[2:], tok, max_len=64)
    prompt = format_prompt(tok, "1 + 1")
    assert gold["chosen"] == encode_pair(tok, prompt, format_completion(tok, "2"), 64)
    assert gold["rejected"] == ([3, 4, 5], 2)


def test_all_tied_rounds_of_online_dpo_add_no_gradient():
    """A constant reward ties every group: each step runs its forward but changes nothing (no weight
    decay, so a zero gradient leaves AdamW's parameters exactly where they were) and logs the skip."""
    engine, res, _, before = run_online("online_dpo", steps=2, reward_fn=lambda completion, answer: 1.0)
    assert res.optimizer_steps == 2
    assert [h["skipped_tied"] for h in res.history] == [1.0, 1.0]
    assert all("loss" not in h for h in res.history)
    for k, v in engine.module.named_parameters():
        assert torch.equal(before[k], v.detach()), k
