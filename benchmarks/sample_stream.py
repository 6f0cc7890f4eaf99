"""The sampled evaluation's random stream (issue 39, item 6): ``eval.sample_stream`` "call" (one seeded
generator per generation call) against "problem" (each problem's own stream, ``oxbench.text.streams``),
side by side in one process on the quickstart's shipped tiny-s base.

    python benchmarks/sample_stream.py [--recipe recipes/quickstart.yaml] [--repeats 3] [--sizes 16,128,auto]
        [--backends lean,hf] [--out benchmarks/results/sample_stream.json]

For each stream, backend and ``eval.batch_size`` (sequences per call; ``auto`` is the memory rule's) it
times :func:`oxbench.eval.evaluate.sampled_metrics` on ``n_sampled`` problems x ``n_samples`` (median of the
repeats, every setting interleaved in each repeat so load drifts hit each alike) and keeps each
problem's count of correct samples. It prints, per stream, how many problems' counts differ from the
first setting's (the smallest batch, the lean backend): "problem" must be 0 everywhere (the records do
not depend on the batching), "call" is not (its draws depend on the call).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from oxbench.config import RunConfig
from oxbench.eval.evaluate import eval_batch_size, sampled_metrics, test_rows
from oxbench.grid.spec import expand, load_grid
from oxbench.models.loading import base_model_path, load_model


def _setting(cfg: RunConfig, stream: str, backend: str, size: int | None) -> RunConfig:
    ev = cfg.eval.model_copy(update={"batch_size": size, "sample_stream": stream, "backend": backend})
    return cfg.model_copy(update={"eval": ev})


def _run(model, tok, rows, cfg: RunConfig) -> tuple[float, dict]:
    start = time.perf_counter()
    m = sampled_metrics(model, tok, rows, cfg, seed=cfg.seeds()["eval"], per_problem=True)
    return time.perf_counter() - start, m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default="recipes/quickstart.yaml")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="16,128,auto")
    ap.add_argument("--backends", default="lean,hf")
    ap.add_argument("--out", default="benchmarks/results/sample_stream.json")
    args = ap.parse_args()
    cfg = expand(load_grid(args.recipe))[0]
    model, tok = load_model(base_model_path(cfg)[0], cfg, init_seed=0)
    rows = test_rows(cfg)[: cfg.eval.n_sampled]
    sizes = [None if s == "auto" else int(s) for s in args.sizes.split(",")]
    settings = [(st, be, b) for st in ("call", "problem") for be in args.backends.split(",") for b in sizes]
    times: dict[tuple, list[float]] = {s: [] for s in settings}
    metrics: dict[tuple, dict] = {}
    for _ in range(args.repeats):
        for s in settings:
            t, metrics[s] = _run(model, tok, rows, _setting(cfg, *s))
            times[s].append(t)
    out = _table(settings, times, metrics, model, cfg, len(rows))
    Path(args.out).write_text(
        json.dumps({"recipe": args.recipe, "threads": torch.get_num_threads(), "rows": out}, indent=1) + "\n"
    )


def _table(settings, times, metrics, model, cfg, n_rows: int) -> list[dict]:
    """One row per setting: median seconds, the ratio to the first setting of the same stream and
    backend, the problems whose correct counts differ from the stream's first setting, avg@k."""
    out = []
    k = cfg.eval.k
    for s in settings:
        first = next(x for x in settings if x[0] == s[0])
        same_backend_first = next(x for x in settings if x[:2] == s[:2])
        differ = sum(a != b for a, b in zip(metrics[s]["correct_counts"], metrics[first]["correct_counts"]))
        med = statistics.median(times[s])
        seqs = eval_batch_size(_setting(cfg, *s), model)
        row = {
            "stream": s[0],
            "backend": s[1],
            "batch_size": s[2] or f"auto ({seqs})",
            "seconds": round(med, 2),
            "vs_first_of_backend": round(statistics.median(times[same_backend_first]) / med, 2),
            "counts_differing": differ,
            "problems": n_rows,
            f"avg_at_{k}": round(metrics[s][f"avg_at_{k}"], 4),
        }
        out.append(row)
        print(" | ".join(f"{key} {val}" for key, val in row.items()))
    return out


def markdown(rows: list[dict]) -> str:
    """docs/measurements.md's table, from the committed json (tests/test_number_drift.py checks the page)."""
    k = next(key for key in rows[0] if key.startswith("avg_at_"))
    lines = [
        f"| stream | backend | `eval.batch_size` | seconds | problems whose correct count differs from the "
        f"stream's first setting | avg@{k.split('_')[-1]} |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['stream']} | {r['backend']} | {r['batch_size']} | {r['seconds']:.2f} | "
            f"{r['counts_differing']} of {r['problems']} | {r[k]:.4f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
