"""A lean decode loop for Qwen2- and Llama-architecture models: the ``lean`` rollout backend.

HF ``generate`` spends most of a tiny model's decoding step in Python and framework overhead (logits
processors, mask building, cache objects, module hooks), not in arithmetic. This loop reads the same
weight tensors (no copy: a ``load_state_dict`` into the model is seen at once) and runs the forward as
plain tensor ops over a preallocated KV cache:

* the prompt batch is prefilled once (left padding, positions counted over real tokens as HF does);
* each step feeds one token per *live* row; a row that has emitted end-of-sequence leaves the batch
  (its cache rows are dropped), so a batch costs what its live sequences cost;
* sampling is HF's at ``top_k=0``: ``softmax(logits / T)`` then ``multinomial``, drawn from a
  ``torch.Generator`` of its own, and the temperature-1 log-prob of each sampled token is kept.

The maths is the model's (``tests/test_lean_decode.py`` checks the logits against the HF forward and the
greedy ids against ``generate``); the rounding differs from HF's by a few ulps, so the sampled ids at a
given seed are not HF's. Models of another architecture, or wrapped by PEFT, use the ``hf`` backend.
"""

from __future__ import annotations

from collections import deque

import torch
import torch.nn.functional as F

from oxbench.text.streams import ProblemStream

SUPPORTED = ("qwen2", "llama")
GPU_LAG = 4  # steps the host may run ahead of the device before it reads which rows ended (:class:`_Ended`)


def supports(model) -> bool:
    """Whether :class:`LeanDecoder` can run ``model``: a plain Qwen2/Llama causal LM, no sliding window,
    its weights whole (not ZeRO-3 partitions, which only DeepSpeed's hooks gather)."""
    cfg = getattr(model, "config", None)
    return (
        type(model).__name__ in ("Qwen2ForCausalLM", "LlamaForCausalLM")
        and getattr(cfg, "model_type", None) in SUPPORTED
        and not getattr(cfg, "use_sliding_window", False)
        and getattr(model.model.rotary_emb, "rope_type", "default") == "default"
        and not hasattr(model.model.embed_tokens.weight, "ds_id")
    )


def backend_for(requested: str, model) -> str:
    """The generation backend ``model`` runs with: ``requested``, except ``lean`` on a model its loop
    cannot decode (:func:`supports`), which falls back to HF ``generate``."""
    return "hf" if requested == "lean" and not supports(model) else requested


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def _fused(*linears) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for several projections of the same input: one matmul instead of several."""
    weight = torch.cat([m.weight for m in linears])
    biases = [m.bias for m in linears]
    return weight, None if biases[0] is None else torch.cat(biases)


def _repeat_prompt(c: torch.Tensor, n: int, p: int) -> torch.Tensor:
    """The cache with each row repeated ``n`` times: the prompt's ``p`` filled slots copied, the slots
    decoding will write left unset (copying them cost 5% of a rollout batch at tiny-m)."""
    out = c.new_empty((c.shape[0] * n, *c.shape[1:]))
    out[:, :, :p] = c[:, :, :p].repeat_interleave(n, 0)
    return out


class LeanDecoder:
    """Built per :func:`sample` call from the model's current weights (the projections that share an
    input are concatenated, a copy, so build it again after the weights change)."""

    def __init__(self, model, lag: int | None = None):
        if not supports(model):
            raise ValueError(f"the lean decoder runs Qwen2/Llama models, not {type(model).__name__}")
        cfg, inner = model.config, model.model
        self.lag = lag  # how many steps late the host learns which rows ended (:class:`_Ended`; None: auto)
        self.eps = cfg.rms_norm_eps
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.embed, self.norm, self.lm_head = inner.embed_tokens.weight, inner.norm.weight, model.lm_head
        self.inv_freq, self.rope_scale = inner.rotary_emb.inv_freq, inner.rotary_emb.attention_scaling
        self.layers = [
            (
                blk.input_layernorm.weight,
                _fused(blk.self_attn.q_proj, blk.self_attn.k_proj, blk.self_attn.v_proj),
                blk.self_attn.o_proj,
                blk.post_attention_layernorm.weight,
                _fused(blk.mlp.gate_proj, blk.mlp.up_proj),
                blk.mlp.down_proj,
            )
            for blk in inner.layers
        ]

    def _rope(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = pos[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # (B, 1, L, d), in fp32 as HF computes it
        dtype = self.embed.dtype  # then in the model's dtype, as HF's rotary embedding returns them
        return (emb.cos() * self.rope_scale).to(dtype), (emb.sin() * self.rope_scale).to(dtype)

    def forward(self, ids, pos, cache, at: int, mask) -> torch.Tensor:
        """Last-position logits (B, V) for ``ids`` (B, L) at positions ``pos``, writing keys and values
        into ``cache`` slots ``at : at + L``. ``mask`` (B, 1, L, at + L) is True where attention is
        allowed. One new token per row (decoding) takes a plain softmax attention: for a single query,
        two batched matmuls beat the fused SDPA kernel several times over on CPU."""
        b, n = ids.shape
        h = F.embedding(ids, self.embed)
        cos, sin = self._rope(pos)
        rep, hd = self.heads // self.kv_heads, self.head_dim
        sizes = (self.heads * hd, self.kv_heads * hd, self.kv_heads * hd)
        for (ln1, qkv, o_p, ln2, gate_up, down), (kc, vc) in zip(self.layers, cache):
            q, k, v = F.linear(_rms(h, ln1, self.eps), *qkv).split(sizes, -1)
            q = _rotate(q.view(b, n, self.heads, hd).transpose(1, 2), cos, sin)
            k = _rotate(k.view(b, n, self.kv_heads, hd).transpose(1, 2), cos, sin)
            kc[:, :, at : at + n] = k
            vc[:, :, at : at + n] = v.view(b, n, self.kv_heads, hd).transpose(1, 2)
            keys, values = kc[:, :, : at + n], vc[:, :, : at + n]
            if n == 1:  # the query heads sharing a key head are one (rep x d) block against its keys
                qg = q.reshape(b, self.kv_heads, rep, hd)
                scores = (qg @ keys.transpose(-1, -2)) * hd**-0.5
                w = scores.masked_fill(~mask, float("-inf")).softmax(-1)
                a = (w @ values).reshape(b, self.heads, 1, hd)
            else:
                keys, values = keys.repeat_interleave(rep, 1), values.repeat_interleave(rep, 1)
                a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            h = h + o_p(a.transpose(1, 2).reshape(b, n, -1))
            gate, up = F.linear(_rms(h, ln2, self.eps), *gate_up).chunk(2, -1)
            h = h + down(F.silu(gate) * up)
        return self.lm_head(_rms(h[:, -1], self.norm, self.eps))

    @torch.no_grad()
    def sample(self, input_ids, attention_mask, *, n, max_new_tokens, temperature, eos_id, generator):
        """``(new_ids, logps)`` for ``n`` samples of each prompt of a left-padded batch, a prompt's samples
        consecutive (HF's order). ``new_ids`` (B·n, W) are the sampled tokens (``eos_id`` after the end),
        ``logps`` (B·n, W) their temperature-1 log-probs; ``temperature == 0`` is greedy. Each prompt is
        prefilled once and its cache shared by its ``n`` samples. Rows that have ended stay in the batch
        (their draws discarded) until a quarter of it has ended, then leave it with their caches.

        No step waits for the device (:class:`_Ended`): tokens and log-probs are written with
        ``torch.where`` and integer row indices (no boolean indexing, no ``nonzero``), and the host
        learns how many rows have ended from a non-blocking copy read ``lag`` steps later on a GPU."""
        b, p = input_ids.shape
        total, dev = p + max_new_tokens, input_ids.device
        shape = (b, self.kv_heads, total, self.head_dim)
        cache = [(self.embed.new_empty(shape), self.embed.new_empty(shape)) for _ in self.layers]
        allowed = torch.zeros(b, total, dtype=torch.bool, device=dev)
        allowed[:, :p] = attention_mask.bool()
        causal = torch.ones(p, p, dtype=torch.bool, device=dev).tril()
        self_only = torch.eye(p, dtype=torch.bool, device=dev)  # a padding position sees itself (no NaN row)
        pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        logits = self.forward(input_ids, pos, cache, 0, (causal & allowed[:, None, None, :p]) | self_only)
        cache = [(_repeat_prompt(kc, n, p), _repeat_prompt(vc, n, p)) for kc, vc in cache]
        logits, allowed, last = logits.repeat_interleave(n, 0), allowed.repeat_interleave(n, 0), pos[:, -1]
        new_ids = torch.full((b * n, max_new_tokens), eos_id, dtype=torch.long, device=dev)
        logps = torch.zeros(b * n, max_new_tokens, dtype=torch.float32, device=dev)
        rows, last = torch.arange(b * n, device=dev), last.repeat_interleave(n)  # each row's output row
        done = torch.zeros(b * n, dtype=torch.bool, device=dev)
        lag = self.lag if self.lag is not None else (0 if dev.type == "cpu" else GPU_LAG)
        ended, width = _Ended(lag), b * n  # width: rows in the batch, known to the host
        for t in range(max_new_tokens):
            tok = self._draw(logits, temperature, generator, t, rows)
            lp = logits.float().log_softmax(-1).gather(1, tok[:, None])[:, 0]
            new_ids[rows, t] = torch.where(done, eos_id, tok)
            logps[rows, t] = torch.where(done, 0.0, lp)
            allowed[rows, p + t] = True
            done |= tok == eos_id
            seen = ended.push(done)  # (rows ended, which) as of `lag` steps ago; None while it is too early
            if t == max_new_tokens - 1 or (seen is not None and seen[0] == width):
                break
            if seen is not None and 4 * seen[0] > width:
                keep = torch.argsort(seen[1].to(torch.uint8), stable=True)[: width - seen[0]]  # in order
                rows, tok, last, done = rows[keep], tok[keep], last[keep], done[keep]
                cache = [(kc[keep], vc[keep]) for kc, vc in cache]
                width -= seen[0]
                ended.clear()  # counts taken before the batch shrank are of other rows
            last = last + 1
            logits = self.forward(
                tok[:, None], last[:, None], cache, p + t, allowed[rows, None, None, : p + t + 1]
            )
        return new_ids, logps

    @staticmethod
    def _draw(
        logits: torch.Tensor, temperature: float, generator, step: int, rows: torch.Tensor
    ) -> torch.Tensor:
        """Greedy, or one draw from softmax(logits / T). From a :class:`~oxbench.text.streams.ProblemStream`,
        each row's own uniform for ``step``; from a ``torch.Generator``, ``torch.multinomial``'s own one-sample
        method (probs / Exp(1) noise, then argmax; the same ids and generator state as ``multinomial`` on
        the CPU), written out because ``multinomial`` checks its input on the host first, a device wait
        per token on a GPU."""
        if isinstance(generator, ProblemStream):
            return generator.draw(logits, temperature, step, rows)
        if temperature <= 0:
            return logits.argmax(-1)
        probs = torch.softmax(logits.float() / temperature, -1)
        return (probs / torch.empty_like(probs).exponential_(1, generator=generator)).argmax(-1)


class _Ended:
    """How many rows of a decoding batch have ended, as the host learns it.

    On the CPU, at once (reading a count costs nothing there: ``lag`` 0). On a GPU, ``lag`` steps late,
    so that the loop never waits for the step it has just queued: each step's count is copied to pinned
    host memory without blocking, and :meth:`push` returns the count of ``lag`` steps back, waiting (if
    the device is that far behind at all) on that step's event while the ``lag`` later steps stay
    queued. The decisions it feeds (ended rows leave the batch, the loop stops) then come ``lag`` steps
    later than on the CPU, always the same steps for the same samples: rows that ended meanwhile draw
    tokens that are discarded."""

    def __init__(self, lag: int):
        self.lag = lag
        pinned = torch.cuda.is_available()  # this build can pin (a CPU-only build cannot)
        self.host = torch.zeros(self.lag + 1, dtype=torch.long, device="cpu", pin_memory=pinned)
        self.queue: deque = deque()  # (host slot, the step's ended mask, its event)
        self.step = 0

    def push(self, done: torch.Tensor) -> tuple[int, torch.Tensor] | None:
        if not self.lag:
            return int(done.sum()), done
        slot = self.host[self.step % (self.lag + 1)]
        slot.copy_(done.sum(), non_blocking=True)
        event = torch.cuda.Event() if torch.cuda.is_available() else None
        if event is not None:
            event.record()
        self.queue.append((slot, done.clone(), event))
        self.step += 1
        if len(self.queue) <= self.lag:
            return None
        slot, mask, event = self.queue.popleft()
        if event is not None:
            event.synchronize()
        return int(slot), mask

    def clear(self) -> None:
        self.queue.clear()
