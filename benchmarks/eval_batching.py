"""Evaluation in fewer, larger calls (issue 26.3): time and outcomes of the evaluator's decoding at
several batch sizes, side by side in one process, on the quickstart's shipped tiny-s base.

    python benchmarks/eval_batching.py [--recipe recipes/quickstart.yaml] [--repeats 2] [--sizes 128,auto]

``auto`` is ``eval.batch_size: null``, the default: the memory rule's sequences per call.

Greedy (the test split): the same ``n_test`` prompts at each ``eval.batch_size``; prints the seconds
(median of the repeats, the sizes interleaved so load drifts hit each alike) and how many completions
differ from the smallest size's (greedy ids are deterministic, so any difference is rounding in a
padded batch). Sampled (avg/best/worst@k): ``n_sampled`` prompts x ``n_samples``, ``eval.batch_size``
sequences per call; sampled completions depend on the batch (each call draws its own random stream),
so only the time and the avg@k are compared.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from oxbench.config import RunConfig
from oxbench.eval.evaluate import eval_batch_size, greedy_completions, sampled_metrics, test_rows
from oxbench.grid.spec import expand, load_grid
from oxbench.models.loading import base_model_path, load_model


def _cfg(recipe: str) -> RunConfig:
    return expand(load_grid(recipe))[0]


def _timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default="recipes/quickstart.yaml")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--sizes", default="128,auto", help="comma-separated; auto: eval.batch_size null")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    cfg = _cfg(args.recipe)
    path, _ = base_model_path(cfg)
    model, tok = load_model(path, cfg, init_seed=0)
    rows = test_rows(cfg)
    sizes = [None if s == "auto" else int(s) for s in args.sizes.split(",")]
    times: dict[tuple[str, int | None], list[float]] = {}
    greedy: dict[int | None, list[str]] = {}
    avg: dict[int | None, float] = {}
    for _ in range(args.repeats):
        for b in sizes:
            c = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"batch_size": b})})
            t, greedy[b] = _timed(lambda c=c: greedy_completions(model, tok, rows, c, None))
            times.setdefault(("greedy", b), []).append(t)
            sub = rows[: cfg.eval.n_sampled]
            t, m = _timed(lambda c=c, sub=sub: sampled_metrics(model, tok, sub, c, seed=0))
            times.setdefault(("sampled", b), []).append(t)
            avg[b] = m[f"avg_at_{cfg.eval.k}"]
    base = sizes[0]
    print(f"{len(rows)} greedy prompts; {min(len(rows), cfg.eval.n_sampled)} x {max(cfg.eval.n_samples, cfg.eval.k)} "
          f"sampled; backend {cfg.eval.backend}; {torch.get_num_threads()} threads; {args.repeats} repeats")  # fmt: skip
    print(
        "| eval.batch_size | greedy s | vs first | greedy completions differing | sampled s | vs first | avg@k |"
    )
    print("|---|---|---|---|---|---|---|")
    g0, s0 = statistics.median(times[("greedy", base)]), statistics.median(times[("sampled", base)])
    for b in sizes:
        g, s = statistics.median(times[("greedy", b)]), statistics.median(times[("sampled", b)])
        diff = sum(x != y for x, y in zip(greedy[b], greedy[base]))
        print(
            f"| {b or f'auto ({eval_batch_size(cfg, model)})'} | {g:.2f} | {g0 / g:.2f}x | {diff} of {len(rows)} | {s:.2f} | {s0 / s:.2f}x | {avg[b]:.4f} |"
        )


if __name__ == "__main__":
    main()
