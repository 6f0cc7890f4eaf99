"""``online.share_prompt``: the learner's forward takes each group's prompt once and its completions on
that prompt's KV cache (:func:`oxbench.text.batching.shared_prompt_forward`). It must give the full
forward's log-probs and gradients (up to float rounding) on every layout an online batch can have:
groups of repeated prompts, prompts of different lengths, empty completions and a row cut at
``max_len`` inside its prompt. Training invariance (whole batch, accumulation, 2 ranks) is in
``test_online_invariance.py``."""

from __future__ import annotations

import random

import pytest
import torch
from peft import LoraConfig, get_peft_model
from test_cli import one_line_error, runner, write

from oxbench.config import RunConfig
from oxbench.grid.spec import GridError, validate_cell
from oxbench.models.tiny import build_tiny
from oxbench.models.tokenizer import build_char_tokenizer
from oxbench.text.batching import collate, logps_from_output, shared_prompt_forward
from oxbench_cli import app


def model(scale: str = "tiny-s"):
    tok = build_char_tokenizer()
    torch.manual_seed(0)
    return build_tiny(scale, len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id), tok


def online_batch(tok, groups: int = 4, n: int = 4, max_len: int = 64) -> dict:
    """``groups`` prompts of 5..29 tokens, each with ``n`` completions of 0..11 tokens, cut at ``max_len``
    (so a long prompt can lose its completion, and with it its response tokens)."""
    rng = random.Random(0)
    seqs = []
    for _ in range(groups):
        prompt = [rng.randrange(3, len(tok)) for _ in range(rng.randrange(5, 30))]
        for _ in range(n):
            completion = [rng.randrange(3, len(tok)) for _ in range(rng.randrange(0, 12))]
            seqs.append(((prompt + completion)[:max_len], len(prompt)))
    return collate(seqs, tok.pad_token_id)


def both(m, batch):
    full, mask = logps_from_output(
        m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False), batch
    )
    shared, _ = logps_from_output(shared_prompt_forward(m, batch), batch)
    return full, shared, mask


def grads(m, logp) -> torch.Tensor:
    params = [p for p in m.parameters() if p.requires_grad]
    return torch.cat([g.flatten() for g in torch.autograd.grad((logp * 1.7).sum(), params)])


@pytest.mark.parametrize("scale", ["tiny-s", "tiny-m"])
def test_logps_and_gradients_are_the_full_forwards(scale):
    m, tok = model(scale)
    batch = online_batch(tok)
    assert (batch["response_mask"].sum(1) == 0).any()  # empty completions are in the batch
    full, shared, mask = both(m, batch)
    assert mask.sum() > 20
    torch.testing.assert_close(shared, full, rtol=0, atol=2e-5)
    g_full, g_shared = grads(m, full), grads(m, shared)
    assert float((g_full - g_shared).norm() / g_full.norm()) < 1e-5


def test_a_prompt_cut_by_max_len_has_nothing_to_score_and_does_not_break_the_others():
    m, tok = model()
    batch = online_batch(tok, max_len=18)  # half the prompts are longer: their rows are prompt only
    lens, resp = batch["attention_mask"].sum(1), batch["response_mask"].sum(1)
    assert (resp == 0).sum() >= 4 and (resp > 0).any() and int(lens.max()) == 18
    full, shared, _ = both(m, batch)
    torch.testing.assert_close(shared, full, rtol=0, atol=2e-5)


def test_a_batch_with_nothing_to_score_takes_the_full_forward():
    m, tok = model()
    batch = online_batch(tok, max_len=4)  # every prompt is longer than 4 tokens
    assert batch["response_mask"].sum() == 0
    full, shared, _ = both(m, batch)
    assert shared.requires_grad and float(shared.abs().sum()) == 0.0


def test_lora_model_trains_only_its_adapters_through_the_shared_cache():
    m, tok = model()
    lora = get_peft_model(m, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, p in lora.named_parameters():  # B starts at zero: move it so A gets a gradient too
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    full, shared, _ = both(lora, online_batch(tok))
    torch.testing.assert_close(shared, full, rtol=0, atol=2e-5)
    g_full, g_shared = grads(lora, full), grads(lora, shared)
    assert g_full.norm() > 0
    assert float((g_full - g_shared).norm() / g_full.norm()) < 1e-5


def test_each_prompt_is_forwarded_once():
    """4 groups of 4: the embedding sees 4 prompt rows of the longest prompt's width, then 16
    completion rows of the longest completion's width; the full forward sees 16 rows of the batch."""
    m, tok = model()
    batch = online_batch(tok)
    shapes = []
    m.model.embed_tokens.register_forward_hook(lambda mod, args, out: shapes.append(tuple(args[0].shape)))
    shared_prompt_forward(m, batch)
    resp, lens = batch["response_mask"], batch["attention_mask"].sum(1)
    plens = torch.where(resp.bool().any(1), resp.int().argmax(1), lens)
    widths = lens - plens
    assert shapes == [(4, int(plens.max())), (16, int(widths.max()))]
    assert 4 * shapes[0][1] + 16 * shapes[1][1] < 0.7 * batch["input_ids"].numel()


def test_on_by_default_pinned_off_keeps_run_ids_and_refused_only_when_asked_for():
    """On by default (issue 26); pinned off, a run keeps the run_id it had when off was the default; a
    value-head or pair method falls back to the full forward by default, and refuses it when it is set."""
    base = RunConfig(method="sgrpo")
    assert base.online.share_prompt and "share_prompt" in base.identity()["online"]
    assert (
        "share_prompt" not in RunConfig(method="sgrpo", online={"share_prompt": False}).identity()["online"]
    )
    validate_cell(RunConfig(method="sgrpo", online={"share_prompt": True}), "g.yaml")
    for method in ("ppo", "online_dpo"):
        validate_cell(RunConfig(method=method), "g.yaml")  # the default: falls back, no error
        with pytest.raises(GridError, match="field 'online.share_prompt'"):
            validate_cell(RunConfig(method=method, online={"share_prompt": True}), "g.yaml")


def test_cli_refuses_share_prompt_for_a_value_model_method_before_any_work(tmp_path):
    g = write(tmp_path, "g.yaml", "name: g\nbase: {online: {share_prompt: true}}\naxes: {method: [ppo]}\n")
    result = runner.invoke(app, ["run", "--grid", str(g), "--out", str(tmp_path / "out")])
    one_line_error(result, "g.yaml", "field 'online.share_prompt'")
    assert not (tmp_path / "out").exists()
