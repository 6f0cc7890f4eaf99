"""A character-level tokenizer for the built-in tiny models.

It is a real :class:`transformers.PreTrainedTokenizerFast` built with ``tokenizers``
(a BPE model with no merges, so every character is one token), so the rest of the
code treats it exactly like a Hugging Face tokenizer: ``save_pretrained`` /
``from_pretrained``, padding, ``batch_decode``.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<|pad|>", "<|endoftext|>", "<|unk|>"
CHARS = string.digits + string.ascii_letters + string.punctuation + " \n"


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate([PAD, EOS, UNK, *CHARS])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK, ignore_merges=True))
    core.add_special_tokens([PAD, EOS, UNK])
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )
    tok.model_max_length = 1024
    return tok
