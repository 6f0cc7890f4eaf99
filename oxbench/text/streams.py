"""Per-problem random streams for sampling: a problem's draws do not depend on the batch it is in.

With one seeded generator per call (the historic stream), a call's noise is drawn for the whole batch
at once, so which draws a problem gets depends on the call's size and on the problems beside it: the
sampled evaluation's records change with ``eval.batch_size``. A :class:`ProblemStream` gives each row
(a problem's ``j``-th sample) its own uniforms, one per decoding step, from NumPy's ``default_rng`` seeded by
``(seed, problem key, j)``, and draws the token by inverse transform: the first token whose cumulative
probability under ``softmax(logits / T)`` exceeds the row's uniform. Any batching, any backend (the lean
decoder, or HF ``generate`` through :class:`StreamProcessor`) then draws the same tokens from the same
probabilities; only rounding in the batched forward could move a probability across a uniform
(``docs/measurements.md`` counts it: none in 1,600 samples at three batch sizes).

The uniforms are made once per call on the host (rows × new tokens, float64) and moved to the batch's
device once: no step waits for the host. The cumulative sum is fp32, as the historic draw's
probabilities are, so a step holds no more memory than before.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def problem_key(problem_id: str) -> int:
    """A problem's stream key: 63 bits of SHA-256 of its id (stable across processes and machines)."""
    return int.from_bytes(hashlib.sha256(str(problem_id).encode()).digest()[:8], "big") >> 1


class ProblemStream:
    """Uniforms ``(rows, steps)`` for ``n`` samples of each problem of a batch, a problem's rows consecutive."""

    def __init__(self, seed: int, keys: list[int], n: int, steps: int, device: torch.device):
        u = [np.random.default_rng([seed, key, j]).random(steps) for key in keys for j in range(n)]
        self.uniforms = torch.as_tensor(np.stack(u), dtype=torch.float64, device=device)

    def draw(self, logits: torch.Tensor, temperature: float, step: int, rows: torch.Tensor) -> torch.Tensor:
        """One token per row of ``logits`` (width, V): ``rows`` are their rows in the batch (the lean
        decoder drops ended rows), ``step`` the decoding step; greedy at ``temperature <= 0``."""
        if temperature <= 0:
            return logits.argmax(-1)
        cdf = torch.softmax(logits.float() / temperature, -1).cumsum(-1)  # as much memory as today's draw
        u = self.uniforms[rows, step, None].to(cdf.dtype) * cdf[:, -1:]
        return torch.searchsorted(cdf, u, right=True)[:, 0].clamp(max=logits.shape[-1] - 1)


class StreamProcessor:
    """HF ``generate``'s logits processor for a :class:`ProblemStream`: every logit but the drawn token's
    becomes ``-inf``, so greedy search (``do_sample=False``) takes the stream's draw."""

    def __init__(self, stream: ProblemStream, prompt_len: int, temperature: float):
        self.stream, self.prompt_len, self.temperature = stream, prompt_len, temperature

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_len
        rows = torch.arange(scores.shape[0], device=scores.device)
        tok = self.stream.draw(scores, self.temperature, step, rows)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter(1, tok[:, None], 0.0)
