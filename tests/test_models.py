"""Model loading: the char tokenizer survives save/load, LoRA is applied and not counted as scale."""

from __future__ import annotations

from oxbench.config import RunConfig
from oxbench.models.loading import count_parameters, load_model, load_tokenizer
from oxbench.models.tiny import LADDER, build_tiny
from oxbench.models.tokenizer import build_char_tokenizer


def test_char_tokenizer_round_trips_through_save_pretrained(tmp_path, micro_model_dir):
    text = "Question: Ann has 12 pens.\nAnswer: 12 + 3 = 15\n#### 15"
    tok = load_tokenizer(micro_model_dir)
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert len(tok(text, add_special_tokens=False)["input_ids"]) == len(text)  # one token per character
    assert tok.pad_token == "<|pad|>" and tok.eos_token == "<|endoftext|>"


def test_lora_is_applied_and_not_counted_as_scale(micro_model_dir):
    full, _ = load_model(micro_model_dir, RunConfig(), init_seed=0)
    cfg = RunConfig(model={"name": micro_model_dir, "lora": {"enabled": True, "r": 4, "alpha": 8}})
    lora, _ = load_model(micro_model_dir, cfg, init_seed=0)
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert 0 < trainable < count_parameters(full)
    assert count_parameters(lora) == count_parameters(full)


def test_ladder_grows():
    tok = build_char_tokenizer()
    sizes = [count_parameters(build_tiny(n, len(tok), pad_token_id=0, eos_token_id=1)) for n in LADDER]
    assert sizes == sorted(sizes) and sizes[0] < 150_000 and 3_000_000 < sizes[-1] < 6_000_000
