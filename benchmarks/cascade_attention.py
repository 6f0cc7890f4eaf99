"""Cascade attention vs the lean loop's attention, one decode step at tiny-m's shapes.

    python benchmarks/cascade_attention.py [--threads 2] [--reps 500]

The lean loop (``oxbench/text/decode.py``) repeats each prompt's KV cache for its ``n`` samples and
attends with two batched matmuls per layer. Cascade attention scores the shared prompt keys once per
prompt (all ``n · rep`` query rows of a prompt against its keys in one matmul) and the generated keys
per row, then softmaxes the two together. At 8 prompts x 8 samples, 2 key heads of 2 query heads,
head size 32, 76 prompt and 20 generated keys, it does the same arithmetic in fewer, larger matmuls,
plus the reshapes and the concatenation. Prints both outputs' largest difference and the median time
of each over rounds run in alternation.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

B, N, KVH, REP, HD, P, T = 8, 8, 2, 2, 32, 76, 20


def inputs():
    g = torch.Generator().manual_seed(0)
    r = B * N
    q = torch.randn(r, KVH, REP, HD, generator=g)
    pk, pv = torch.randn(B, KVH, P, HD, generator=g), torch.randn(B, KVH, P, HD, generator=g)
    gk, gv = torch.randn(r, KVH, T, HD, generator=g), torch.randn(r, KVH, T, HD, generator=g)
    keys = torch.cat([pk.repeat_interleave(N, 0), gk], 2)
    values = torch.cat([pv.repeat_interleave(N, 0), gv], 2)
    mask = torch.ones(r, 1, 1, P + T, dtype=torch.bool)
    return q, pk, pv, gk, gv, keys, values, mask


def lean(q, pk, pv, gk, gv, keys, values, mask):
    """As ``LeanDecoder.forward`` for one new token: the repeated cache, two batched matmuls."""
    w = ((q @ keys.transpose(-1, -2)) * HD**-0.5).masked_fill(~mask, float("-inf")).softmax(-1)
    return w @ values


def cascade(q, pk, pv, gk, gv, keys, values, mask):
    """The prompt's keys once per prompt, the generated keys per row, one softmax over both."""
    r = B * N
    qp = q.view(B, N, KVH, REP, HD).transpose(1, 2).reshape(B, KVH, N * REP, HD)
    sp = (qp @ pk.transpose(-1, -2)).view(B, KVH, N, REP, P).transpose(1, 2).reshape(r, KVH, REP, P)
    s = torch.cat([sp, q @ gk.transpose(-1, -2)], -1) * HD**-0.5
    w = s.masked_fill(~mask, float("-inf")).softmax(-1)
    wp = w[..., :P].reshape(B, N, KVH, REP, P).transpose(1, 2).reshape(B, KVH, N * REP, P)
    out = (wp @ pv).view(B, KVH, N, REP, HD).transpose(1, 2).reshape(r, KVH, REP, HD)
    return out + w[..., P:] @ gv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x = inputs()
    print(f"largest difference: {float((lean(*x) - cascade(*x)).abs().max()):.2e}")
    times = {"lean": [], "cascade": []}
    for _ in range(args.rounds):
        for name, f in (("lean", lean), ("cascade", cascade)):
            for _ in range(20):
                f(*x)
            t = time.perf_counter()
            for _ in range(args.reps):
                f(*x)
            times[name].append((time.perf_counter() - t) / args.reps)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in med.items()),
        f"(cascade / lean {med['cascade'] / med['lean']:.2f}x the time)",
    )


if __name__ == "__main__":
    main()
