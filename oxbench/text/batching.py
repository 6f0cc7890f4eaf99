"""Tokenisation, padding and per-token log-probs: shared by every method and the evaluator.

Training batches are right-padded; ``response_mask`` marks the completion tokens (the
targets the loss sees). Log-probs are aligned to targets: position ``t`` of
``token_logps`` is ``log p(input_ids[t+1] | input_ids[:t+1])``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import oxbench.device as placement
from oxbench.text.compat import cache_name


def encode_pair(tokenizer, prompt: str, completion: str, max_len: int) -> tuple[list[int], int]:
    """Token ids of prompt+completion and the prompt length (completion truncated to fit)."""
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    c = tokenizer(completion, add_special_tokens=False)["input_ids"]
    return (p + c)[:max_len], len(p)


def collate(seqs: list[tuple[list[int], int]], pad_id: int, device=None) -> dict[str, torch.Tensor]:
    """Right-pad ``(ids, prompt_len)`` pairs into input_ids, attention_mask, response_mask, built
    on ``device`` (default: the rank's, :mod:`oxbench.device`) in one copy each."""
    dev = placement.get() if device is None else device
    width = max(len(ids) for ids, _ in seqs)
    ids = [s + [pad_id] * (width - len(s)) for s, _ in seqs]
    attn = [[1] * len(s) + [0] * (width - len(s)) for s, _ in seqs]
    resp = [[0.0] * min(p, len(s)) + [1.0] * (len(s) - p) + [0.0] * (width - len(s)) for s, p in seqs]
    return {
        "input_ids": torch.tensor(ids, dtype=torch.long, device=dev),
        "attention_mask": torch.tensor(attn, dtype=torch.long, device=dev),
        "response_mask": torch.tensor(resp, dtype=torch.float32, device=dev),
    }


def forward(model, batch: dict[str, torch.Tensor], *, share_prompt: bool = False):
    """The model's output on ``batch`` (no KV cache kept); ``share_prompt``: through
    :func:`shared_prompt_forward` (each distinct prompt forwarded once)."""
    if share_prompt:
        return shared_prompt_forward(model, batch)
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)


def token_logps(model, batch: dict[str, torch.Tensor], *, return_logits: bool = False, share_prompt=False):
    """Per-target log-probs (B, T-1), their mask (B, T-1), and optionally the logits (B, T-1, V).

    Token log-probs are zero where the mask is zero. ``share_prompt``: as :func:`forward`.
    """
    return logps_from_output(
        forward(model, batch, share_prompt=share_prompt), batch, return_logits=return_logits
    )


def logps_from_output(out, batch: dict[str, torch.Tensor], *, return_logits: bool = False):
    """:func:`token_logps` from a forward output already computed (e.g. one that also carries values)."""
    logits = out["logits"][:, :-1].float()
    targets = batch["input_ids"][:, 1:]
    mask = batch["response_mask"][:, 1:]
    logp = torch.gather(F.log_softmax(logits, dim=-1), 2, targets.unsqueeze(-1)).squeeze(-1) * mask
    if return_logits:
        return logp, mask, logits
    return logp, mask


def shared_prompt_forward(model, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{"logits": (B, T, V)}`` for ``batch`` from one forward of each distinct prompt and one forward
    of all the completions on their prompts' KV cache: what ``model(**batch)`` gives at every position
    the loss reads (``prompt_len - 1 … len - 2``, whose logits score the completion tokens), zero
    elsewhere. Equal to the full forward up to float rounding; gradients flow through the shared cache.

    Online groups repeat each prompt ``n`` times, so with prompt length P, completion length K and U
    distinct prompts the forward covers U·P + B·K positions instead of B·(P + K).

    Prompts are right-padded (so no query row is fully masked) and the completions follow the padded
    prompt; the attention mask hides both gaps and ``position_ids`` continue each row's own prompt, so
    rotary positions are the full forward's. A row's prompt ends where its ``response_mask`` starts.
    Needs a model that returns a KV cache (HF causal LMs, with or without LoRA).
    """
    ids, resp = batch["input_ids"], batch["response_mask"].bool()
    if not resp.any():  # nothing to score (every completion cut by max_len): the full forward's zeros
        return forward(model, batch)
    lens = batch["attention_mask"].sum(1)
    plens = torch.where(resp.any(1), resp.int().argmax(1), lens)
    dev = ids.device
    keys = [tuple(ids[i, : plens[i]].tolist()) for i in range(len(ids))]
    index = {key: u for u, key in enumerate(dict.fromkeys(keys))}  # each distinct prompt, in first-seen order
    owner = torch.tensor([index[key] for key in keys], device=dev)
    prompts = collate([(list(key), len(key)) for key in index], 0, dev)
    first = model(input_ids=prompts["input_ids"], attention_mask=prompts["attention_mask"], use_cache=True)
    cache = first[cache_name()]
    cache.reorder_cache(owner)
    k = lens - plens  # completion tokens per row
    comps = collate([(ids[i, plens[i] : lens[i]].tolist(), 0) for i in range(len(ids))], 0, dev)
    second = model(
        input_ids=comps["input_ids"],
        attention_mask=torch.cat([prompts["attention_mask"][owner], comps["attention_mask"]], 1),
        position_ids=plens[:, None] + torch.arange(comps["input_ids"].shape[1], device=dev)[None, :],
        use_cache=True,
        **{cache_name(): cache},
    )
    # completion token j of row i is scored at column plen_i + j - 1: by the prompt's last position
    # (j = 0) or by the completion's position j - 1
    rows = torch.repeat_interleave(torch.arange(len(ids), device=dev), k)
    js = torch.cat([torch.arange(int(n), device=dev) for n in k])
    values = torch.where(
        (js == 0)[:, None],
        first["logits"][owner[rows], plens[rows] - 1].float(),
        second["logits"][rows, (js - 1).clamp(min=0)].float(),
    )
    out = torch.zeros((*ids.shape, values.shape[-1]), dtype=values.dtype, device=dev)
    return {"logits": out.index_put((rows, plens[rows] + js - 1), values)}
