"""What ``reads_kl_pairs=False`` saves BCO's unpaired form (issue 42.3): one micro-batch's inputs, loss
and backward on the tiny-m rung, with KTO's mismatched pairs scored (as before) and without (as now),
timed side by side in one process, alternating, the median of each.

    python benchmarks/unpaired_forward.py [--repeats 15] [--batch 16]

Prints the two medians and their ratio (a ratio, not a time: the machine is shared)."""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import losses
from oxbench.engine.batches import build_offline_inputs, encode_examples
from oxbench.models.tiny import build_tiny
from oxbench.models.tokenizer import build_char_tokenizer
from oxbench.tasks import arith


def rows(n: int) -> list[dict]:
    problems = arith.generate("train", n, seed=0, max_operand=60)
    return [
        {
            "id": f"{p['id']}/{i % 2}",
            "question": p["question"],
            "completion": p["answer"],
            "label": i % 2 == 0,
        }
        for i, p in enumerate(problems)
    ]


def step(model, chunk, pad_id: int, spec, kl_pairs: bool) -> float:
    start = time.perf_counter()
    inputs = build_offline_inputs("unpaired", model, chunk, pad_id, kl_pairs=kl_pairs)
    inputs.ref_logps = inputs.logps.detach() - 0.1  # a cached reference's values
    spec.fn(inputs, **spec.defaults).loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    tok = build_char_tokenizer()
    model = build_tiny("tiny-m", len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    chunk = encode_examples("unpaired", rows(args.batch), tok, 160)
    spec = losses.get("bco_unpaired")
    times = {True: [], False: []}
    step(model, chunk, tok.pad_token_id, spec, True)  # warm-up
    for _ in range(args.repeats):
        for kl in (True, False):
            times[kl].append(step(model, chunk, tok.pad_token_id, spec, kl))
    full, lean = statistics.median(times[True]), statistics.median(times[False])
    print(f"bco_unpaired micro-batch of {args.batch} on tiny-m, median of {args.repeats}:")
    print(f"  with the mismatched pairs' forward: {1000 * full:.1f} ms; without: {1000 * lean:.1f} ms")
    print(f"  ratio without / with: {lean / full:.2f}")


if __name__ == "__main__":
    main()
