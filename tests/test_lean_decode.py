"""The lean decode loop (``online.backend: lean``) computes the model's own maths: its logits are the
HF forward's, its greedy ids are HF ``generate``'s, its sampled tokens follow softmax(logits / T), and
the behaviour log-probs it records are the teacher-forced log-probs of the ids it returns."""

from __future__ import annotations

import pytest
import torch
from conftest import make_micro_model

from oxbench.config import RunConfig
from oxbench.grid.spec import GridError, validate_cell
from oxbench.models.tiny import build_tiny
from oxbench.models.tokenizer import build_char_tokenizer
from oxbench.text.batching import collate, token_logps
from oxbench.text.decode import LeanDecoder, supports
from oxbench.text.generation import sample

PROMPTS = ["Question: 3 + 4?\nAnswer:", "Q: 12 - 5 =", "x"]


def tiny_m():
    tok = build_char_tokenizer()
    torch.manual_seed(0)
    model = build_tiny(
        "tiny-m", len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id
    ).eval()
    tok.padding_side = "left"
    return model, tok


def lean_sample(model, tok, prompts, *, n: int, max_new_tokens: int, batch_size: int, seed: int):
    """``n`` samples at temperature 1 per prompt through the lean decoder."""
    return sample(
        model,
        tok,
        prompts,
        max_new_tokens=max_new_tokens,
        temperature=1.0,
        num_return_sequences=n,
        batch_size=batch_size,
        generator_seed=seed,
        backend="lean",
    )


def encode(tok, prompts):
    return tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)


@torch.no_grad()
def test_prefill_logits_are_the_hf_forward_behind_left_padding():
    model, tok = tiny_m()
    enc = encode(tok, PROMPTS)
    pos = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    ref = model(**enc, position_ids=pos).logits[:, -1]
    lean = LeanDecoder(model)
    p = enc["input_ids"].shape[1]
    shape = (len(PROMPTS), lean.kv_heads, p, lean.head_dim)
    cache = [(torch.empty(shape), torch.empty(shape)) for _ in lean.layers]
    mask = torch.ones(p, p, dtype=torch.bool).tril() & enc["attention_mask"].bool()[:, None, None, :]
    out = lean.forward(enc["input_ids"], pos, cache, 0, mask | torch.eye(p, dtype=torch.bool))
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


@torch.no_grad()
def test_greedy_ids_are_hf_generate_ids():
    model, tok = tiny_m()
    enc = encode(tok, PROMPTS)
    new, _ = LeanDecoder(model).sample(
        enc["input_ids"],
        enc["attention_mask"],
        n=1,
        max_new_tokens=20,
        temperature=0.0,
        eos_id=tok.eos_token_id,
        generator=None,
    )
    hf = model.generate(
        **enc,
        max_new_tokens=20,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )[:, enc["input_ids"].shape[1] :]
    assert new[:, : hf.shape[1]].tolist() == hf.tolist()


@torch.no_grad()
def test_behaviour_logps_are_the_teacher_forced_logps_and_rows_stop_at_eos():
    """Every row's recorded log-probs equal log softmax of a full forward over prompt + its own ids (the
    on-policy ratio is 1), including rows that left the batch early at end-of-sequence."""
    model, tok = make_micro_model(seed=3)
    model.eval()
    tok.padding_side = "left"
    samples = lean_sample(model, tok, PROMPTS[:2], n=32, max_new_tokens=24, batch_size=2, seed=5)
    flat = [s for group in samples for s in group]
    assert any(s.finished for s in flat) and not all(s.finished for s in flat)
    batch = collate([(s.prompt_ids + s.completion_ids, len(s.prompt_ids)) for s in flat], tok.pad_token_id)
    teacher, mask = token_logps(model, batch)  # what the trainer computes
    for i, s in enumerate(flat):
        cols = slice(len(s.prompt_ids) - 1, len(s.prompt_ids) - 1 + len(s.completion_ids))
        assert mask[i, cols].all() and s.logps == pytest.approx(teacher[i, cols].tolist(), abs=1e-5)
        assert s.finished == (s.completion_ids[-1] == tok.eos_token_id)
        assert tok.eos_token_id not in s.completion_ids[:-1]


@torch.no_grad()
def test_samples_follow_softmax_at_temperature():
    model, tok = make_micro_model(seed=1)
    model.eval()
    tok.padding_side = "left"
    enc = encode(tok, ["ab"])
    logits = model(**enc).logits[0, -1]
    for temp in (0.7, 1.5):
        gen = torch.Generator().manual_seed(0)
        new, _ = LeanDecoder(model).sample(
            enc["input_ids"],
            enc["attention_mask"],
            n=20000,
            max_new_tokens=1,
            temperature=temp,
            eos_id=tok.eos_token_id,
            generator=gen,
        )
        freq = torch.bincount(new[:, 0], minlength=logits.shape[0]).float() / 20000
        assert (freq - torch.softmax(logits / temp, -1)).abs().sum() / 2 < 0.03  # total variation


def test_same_seed_same_samples_other_seed_other_samples():
    model, tok = tiny_m()

    def run(seed):
        return lean_sample(model, tok, PROMPTS, n=4, max_new_tokens=10, batch_size=2, seed=seed)

    a, b, c = run(0), run(0), run(1)
    assert a == b and a != c


def test_unsupported_models_and_lora_are_errors_not_silent_fallbacks():
    class Other(torch.nn.Module):
        config = None

    assert not supports(Other())
    with pytest.raises(ValueError, match="lean"):
        lean_sample(Other(), build_char_tokenizer(), ["x"], n=1, max_new_tokens=2, batch_size=1, seed=0)
    cfg = RunConfig(
        method="sgrpo", model={"name": "tiny-xs", "lora": {"enabled": True}}, online={"backend": "lean"}
    )
    with pytest.raises(GridError, match="online.backend"):
        validate_cell(cfg, "g.yaml")


def test_lean_is_the_default_and_pinning_hf_keeps_the_old_run_ids():
    """The fast path is what a new config gets (issue 26); a recipe that pins hf keeps the run_id it
    had when hf was the default (the setting is left out of the hash at its historic value)."""
    assert RunConfig(method="sgrpo").online.backend == "lean" and RunConfig().eval.backend == "lean"
    pinned = RunConfig(
        method="sgrpo", online={"backend": "hf", "share_prompt": False}, eval={"backend": "hf"}
    )
    assert "backend" not in pinned.identity()["online"] and "backend" not in pinned.identity()["eval"]
    assert "share_prompt" not in pinned.identity()["online"]
    assert RunConfig(method="sgrpo").run_id() != pinned.run_id()


def test_evaluation_batches_by_the_memory_rule_and_greedy_does_not_depend_on_it():
    """``eval.batch_size: null`` (the default since issue 26.3): as many sequences per call as the KV cache
    and one step's logits fit in EVAL_BUDGET, at most EVAL_MAX_SEQS. The greedy completions are those
    of the old default (128 sequences a call) and of a batch of 2, to the character."""
    from types import SimpleNamespace

    from oxbench.eval.evaluate import EVAL_MAX_SEQS, eval_batch_size, eval_sequences, greedy_completions

    qwen7b = SimpleNamespace(num_attention_heads=28, num_key_value_heads=4, hidden_size=3584,
                             num_hidden_layers=28, vocab_size=152064)  # fmt: skip

    assert RunConfig().eval.batch_size is None and RunConfig(eval={"batch_size": 128}).eval.batch_size == 128
    assert "batch_size" in RunConfig().identity()["eval"]  # a pre-existing setting: always in the run_id
    assert eval_sequences(qwen7b, 512, "bf16") == 71  # 28.6 MiB of KV and logits a sequence in 2 GiB
    assert eval_sequences(qwen7b, 512, "bf16", budget=1) == 1
    model, tok = tiny_m()
    assert eval_batch_size(RunConfig(), model) == EVAL_MAX_SEQS == 1024  # a tiny model: the cap
    assert eval_sequences(model.config, 304, "fp32") == EVAL_MAX_SEQS
    rows = [{"question": f"{a} + {b}?"} for a in range(6) for b in range(5)]
    outs = [
        greedy_completions(model, tok, rows, RunConfig(eval={"batch_size": size, "max_new_tokens": 12}), None)
        for size in (None, 128, 2)
    ]
    assert outs[0] == outs[1] == outs[2] and len(set(outs[0])) > 1
