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


def test_dtype_auto_is_fp32_on_a_cpu_and_bf16_on_a_gpu_machine(monkeypatch):
    """``model.dtype: auto`` resolves where the config is read, so a CPU run keeps the run_id it had
    when fp32 was the written default, and a GPU machine gets bf16 (and says so in its run_id)."""
    import oxbench.config as C

    cpu = RunConfig()
    assert cpu.model.dtype == "fp32"
    assert cpu.run_id() == RunConfig(model={"dtype": "fp32"}).run_id()
    monkeypatch.setattr(C, "accelerator_present", lambda: True)
    gpu = RunConfig(model={"name": "tiny-xs"})
    assert gpu.model.dtype == "bf16" and gpu.run_id() != cpu.run_id()
    assert RunConfig(model={"dtype": "fp32"}).model.dtype == "fp32"  # an explicit dtype stays


def test_new_model_settings_leave_run_ids_alone_until_set():
    base = RunConfig()
    assert RunConfig(model={"gradient_checkpointing": False, "attn_implementation": "auto"}).run_id() == (
        base.run_id()
    )
    assert RunConfig(model={"gradient_checkpointing": True}).run_id() != base.run_id()


def test_gradient_checkpointing_gives_the_same_gradients(micro_model_dir):
    """Recomputing activations in backward is exact: the same loss and gradients, less memory."""
    import torch

    from oxbench.text.batching import collate, token_logps

    grads = []
    for on in (False, True):
        cfg = RunConfig(model={"name": micro_model_dir, "gradient_checkpointing": on})
        model, _ = load_model(micro_model_dir, cfg, init_seed=0)
        model.train()
        assert model.is_gradient_checkpointing == on
        logp, mask = token_logps(model, collate([([5, 6, 7, 8, 9], 2), ([5, 7, 9], 1)], 0))
        (-(logp.sum())).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-6)


def test_attention_implementation_is_passed_through(micro_model_dir):
    cfg = RunConfig(model={"name": micro_model_dir, "attn_implementation": "eager"})
    model, _ = load_model(micro_model_dir, cfg, init_seed=0)
    assert model.config._attn_implementation == "eager"
