"""Tokenisation, padding and per-token log-probs: shared by every method and the evaluator.

Training batches are right-padded; ``response_mask`` marks the completion tokens (the
targets the loss sees). Log-probs are aligned to targets: position ``t`` of
``token_logps`` is ``log p(input_ids[t+1] | input_ids[:t+1])``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def encode_pair(tokenizer, prompt: str, completion: str, max_len: int) -> tuple[list[int], int]:
    """Token ids of prompt+completion and the prompt length (completion truncated to fit)."""
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    c = tokenizer(completion, add_special_tokens=False)["input_ids"]
    return (p + c)[:max_len], len(p)


def collate(seqs: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad ``(ids, prompt_len)`` pairs into input_ids, attention_mask, response_mask."""
    width = max(len(ids) for ids, _ in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    resp = torch.zeros((len(seqs), width), dtype=torch.float32)
    for i, (s, plen) in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        resp[i, plen : len(s)] = 1.0
    return {"input_ids": ids, "attention_mask": attn, "response_mask": resp}


def token_logps(model, batch: dict[str, torch.Tensor], *, return_logits: bool = False):
    """Per-target log-probs (B, T-1), their mask (B, T-1), and optionally the logits (B, T-1, V).

    Token log-probs are zero where the mask is zero.
    """
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
    return logps_from_output(out, batch, return_logits=return_logits)


def logps_from_output(out, batch: dict[str, torch.Tensor], *, return_logits: bool = False):
    """:func:`token_logps` from a forward output already computed (e.g. one that also carries values)."""
    logits = out["logits"][:, :-1].float()
    targets = batch["input_ids"][:, 1:]
    mask = batch["response_mask"][:, 1:]
    logp = torch.gather(F.log_softmax(logits, dim=-1), 2, targets.unsqueeze(-1)).squeeze(-1) * mask
    if return_logits:
        return logp, mask, logits
    return logp, mask
