"""A real-format checkpoint built locally: a Qwen2 model and a byte-level BPE tokenizer, no download.

:func:`build_real_checkpoint` stands in for a Hub checkpoint such as ``Qwen/Qwen2.5-0.5B-Instruct``:
the directory it writes has the files ``save_pretrained`` writes for one (``config.json``,
``generation_config.json``, ``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json``
with ``tokenizer_class: Qwen2Tokenizer`` and a Qwen chat template), so ``model.name: <that path>``
goes through the same loading path (:mod:`oxbench.models.loading`) as a Hub id: ``AutoTokenizer``
rebuilds it as a ``Qwen2Tokenizer``, ``AutoModelForCausalLM`` as a ``Qwen2ForCausalLM``, and prompts
are formatted with the chat template (unlike the built-in tiny rungs' char tokenizer).

What differs from the Hub model is only size and training: the tokenizer is a byte-level BPE
trained on GSM8K's train split (questions and answers) with Qwen's pre-tokenizer and special
tokens (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, appended after the merges as in Qwen's
vocabulary), and the model is a randomly initialised tiny Qwen2 (seeded). Both are deterministic:
the same arguments give byte-identical files.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

from oxbench.models.tiny import qwen2_config

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)  # Qwen's order: ids vocab-3, vocab-2, vocab-1

# Qwen2-Instruct's chat template (without tool calls): a default system turn, then each message as
# <|im_start|>role\ncontent<|im_end|>\n, and <|im_start|>assistant\n as the generation prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# (hidden, layers, heads, kv_heads, intermediate): Qwen2's shape, shrunk
SHAPE = (64, 2, 4, 2, 128)


def gsm8k_texts(train_path: str | Path) -> list[str]:
    """Every question and answer of a GSM8K train file (JSONL), in file order."""
    texts = []
    with Path(train_path).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                texts += [row["question"], row["answer"]]
    return texts


def train_bpe(texts: list[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE with Qwen2's normalizer, pre-tokenizer and decoder and ``vocab_size`` tokens in
    all: ``vocab_size - 3`` learnt (the 256 byte symbols and the merges), then the special tokens."""
    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    return core


def qwen_tokenizer(core: Tokenizer, max_length: int) -> Qwen2Tokenizer:
    """``core``'s vocabulary and merges as a :class:`Qwen2Tokenizer` (what ``AutoTokenizer`` gives for
    a Qwen checkpoint): eos ``<|im_end|>`` (the end of an assistant turn), pad ``<|endoftext|>``."""
    state = json.loads(core.to_str())["model"]
    vocab = dict(state["vocab"])
    vocab.update({t: len(vocab) + i for i, t in enumerate(SPECIAL_TOKENS)})
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    tok = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        extra_special_tokens=[IM_START, IM_END],
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.model_max_length = max_length
    return tok


def qwen_config(tok: Qwen2Tokenizer, max_positions: int) -> Qwen2Config:
    """A tiny Qwen2 config in Qwen2.5's style (tied embeddings, rope theta 1e6) for ``tok``."""
    return qwen2_config(
        SHAPE,
        len(tok),
        max_position_embeddings=max_positions,
        rope_theta=1_000_000.0,
        bos_token_id=tok.convert_tokens_to_ids(ENDOFTEXT),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def build_real_checkpoint(
    out_dir: str | Path, gsm8k_train_path: str | Path, *, vocab_size: int = 1024, seed: int = 0
) -> Path:
    """Write a Qwen2-format checkpoint (model and tokenizer, ``save_pretrained``) to ``out_dir``.

    The tokenizer is trained on ``gsm8k_train_path`` (a GSM8K ``train.jsonl``); the model is a random
    Qwen2 of :data:`SHAPE` seeded by ``seed``. Returns ``out_dir``, to be given as ``model.name``.
    """
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must hold the 256 bytes and 3 special tokens, got {vocab_size}")
    out = Path(out_dir)
    max_positions = 1024
    tok = qwen_tokenizer(train_bpe(gsm8k_texts(gsm8k_train_path), vocab_size), max_positions)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(qwen_config(tok, max_positions))
    model.generation_config = GenerationConfig(
        bos_token_id=tok.convert_tokens_to_ids(ENDOFTEXT),
        eos_token_id=[tok.eos_token_id, tok.convert_tokens_to_ids(ENDOFTEXT)],
        pad_token_id=tok.pad_token_id,
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
