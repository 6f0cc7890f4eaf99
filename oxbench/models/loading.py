"""One loader for every arm: a built-in tiny rung (pre-trained on first use) or any HF causal LM."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from oxbench.config import RunConfig
from oxbench.models.tiny import ModelError, check_model_name, is_tiny

hf_logging.disable_progress_bar()  # a bar per weight load would bury oxbench's own progress lines


def base_model_path(cfg: RunConfig, *, verbose: bool = True) -> tuple[str, dict]:
    """Where the base ("instruct") model lives, and a dict identifying it for cache keys."""
    name = cfg.model.name
    if is_tiny(name):
        from oxbench.models.pretrain import ensure_pretrained

        pcfg = pretrain_config(cfg)
        path = ensure_pretrained(pcfg, verbose=verbose)
        return str(path), {"model": name, "pretrain_key": pcfg.key()}
    check_model_name(name)
    return name, {"model": name}


def pretrain_config(cfg: RunConfig):
    """The :class:`~oxbench.models.pretrain.PretrainConfig` of a tiny rung's base for ``cfg``."""
    from oxbench.models.pretrain import PretrainConfig

    p = cfg.model.pretrain
    task = {"name": cfg.task.name, "n_ops": cfg.task.n_ops, "max_operand": cfg.task.max_operand}
    if p.task is not None:  # a base pre-trained on another arith task than the run's
        task = {"name": "arith", "n_ops": p.task.n_ops, "max_operand": p.task.max_operand}
    elif cfg.task.name != "arith":
        task["path"] = cfg.task.path
        if cfg.task.options:  # a plugin task's settings (none: the key a GSM8K base always had)
            task["options"] = cfg.task.options
    return PretrainConfig(
        scale=cfg.model.name,
        updates=p.updates,
        batch_size=p.batch_size,
        lr=p.lr,
        n_examples=p.n_examples,
        seed=p.seed,
        task=task,
        answer_styles=p.answer_styles,
        mixture=p.mixture,
    )


def load_tokenizer(path: str):
    """AutoTokenizer, except for plain ``tokenizers``-backed tokenizers such as the built-in char
    tokenizer: for a ``qwen2`` config, AutoTokenizer would rebuild it as a byte-level Qwen2 tokenizer."""
    cfg_file = Path(path) / "tokenizer_config.json"
    if cfg_file.exists():
        cls = json.loads(cfg_file.read_text()).get("tokenizer_class")
        if cls in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def load_model(path: str, cfg: RunConfig, *, init_seed: int):
    """(model, tokenizer); LoRA adapters (seeded by ``init_seed``) when ``model.lora.enabled``."""
    dtype = torch.bfloat16 if cfg.model.dtype == "bf16" else torch.float32
    try:
        tok = load_tokenizer(path)
        # use_kernels=False: transformers would otherwise fetch kernels from the Hub when the model
        # first meets a GPU (no network there, and kernels that differ between arms)
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, use_kernels=False, **attention_kwargs(cfg.model.attn_implementation)
        )
    except OSError as exc:
        raise ModelError(f"cannot load model {path!r}: {str(exc).splitlines()[0]}") from exc
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model.config.pad_token_id = tok.pad_token_id
    if cfg.model.gradient_checkpointing:
        # non-reentrant: no input that requires grad needed (LoRA freezes the embeddings); only in
        # training mode, so the rollout and reference copies keep their KV caches
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg.model.lora.enabled:
        from peft import LoraConfig, get_peft_model

        lc = cfg.model.lora
        torch.manual_seed(init_seed)
        model = get_peft_model(
            model,
            LoraConfig(
                r=lc.r,
                lora_alpha=lc.alpha,
                lora_dropout=lc.dropout,
                target_modules=lc.target_modules,
                task_type="CAUSAL_LM",
            ),
        )
    return model, tok


def attention_kwargs(name: str) -> dict:
    """``attn_implementation`` for ``from_pretrained``. ``auto``: HF's own default (sdpa) on the CPU,
    so CPU runs are unchanged; on a GPU, FlashAttention-2 where ``flash_attn`` is installed (no padded
    attention matrix: the long, padded GSM8K batches of a 7B run at 1,024 tokens) and sdpa otherwise."""
    if name != "auto":
        return {"attn_implementation": name}
    if not torch.cuda.is_available():
        return {}
    import importlib.util

    return {"attn_implementation": "flash_attention_2" if importlib.util.find_spec("flash_attn") else "sdpa"}


def count_parameters(model) -> int:
    """Parameters of the model itself: LoRA adapters are not counted, so a scale has one size."""
    return sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
