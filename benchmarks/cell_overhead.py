"""Fixed cost per cell, parallel cells and memory: warm workers against a fresh process per cell.

    python benchmarks/cell_overhead.py [--cells 8] [--repeats 3]

The grid is ``--cells`` short SFT cells on a tiny-xs model saved from config (no pre-training, so the
cache holds everything after the first run and only the cells themselves are timed). Each repeat runs,
in a rotated order, each pool configuration in its own Python process:

* ``fresh x1``: one cell process at a time, each importing torch/transformers/DeepSpeed (before);
* ``warm x1``: one warm worker running every cell;
* ``warm x2``: two warm workers, each with one of the two cores;
* ``warm x1 1t``: one warm worker held to one thread (``OXBENCH_THREADS=1``), the speed each of the two
  workers has: ``bound = 2 x wall(warm x1) / wall(warm x1 1t)`` is what two workers can gain at most,
  so ``x2 / x1`` can only reach 1.8 where one cell leaves its second thread nearly idle.

Per cell, the *fixed cost* is its share of the pool's wall time minus the training and evaluation time
its record reports. ``x2 / x1`` is the speed-up of two workers on the same grid. ``peak MiB`` is the
largest resident size any child process reached (``RUSAGE_CHILDREN``), at ``--cells`` and at 4x as
many cells: flat means no cell's memory stays behind. Quote the ratios; absolute times depend on load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POOLS = {"fresh x1": (1, False), "warm x1": (1, True), "warm x2": (2, True), "warm x1 1t": (1, True)}


def save_model(d: Path) -> str:
    import torch

    from oxbench.models.tiny import build_tiny
    from oxbench.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    torch.manual_seed(0)
    build_tiny(
        "tiny-xs", len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id
    ).save_pretrained(d)
    tok.save_pretrained(d)
    return str(d)


def cells(model: str, n: int, grid: str, n_train: int = 32):
    from oxbench.config import RunConfig

    return [
        RunConfig(
            grid=grid,
            method="sft",
            seed=s,
            model={"name": model},
            data={"n_train": n_train},
            train={"batch_size": 8, "lr": 1e-4},
            eval={"n_test": 32, "n_ood": 0, "k": 0, "max_new_tokens": 16},
            task={"ood": False},
        )
        for s in range(n)
    ]


def run_pool(model: str, n: int, workers: int, warm: bool, out: str, n_train: int) -> dict:
    """One pool over ``n`` cells (in this process); wall time, per-cell in-cell times, child peak RSS."""
    from oxbench.grid import executors
    from oxbench.grid.prepare import prepare_shared

    grid = cells(model, n, f"g{time.time_ns()}", n_train)
    prepare_shared(grid[0], verbose=False)  # the cache holds the base evaluation: cells only
    t = time.perf_counter()
    recs = executors.run_local(grid, Path(out), workers=workers, warm=warm)
    wall = time.perf_counter() - t
    assert all(r["status"] == "finished" for r in recs), [r.get("error") for r in recs]
    inside = [r["timing"]["train_s"] + r["timing"]["eval_s"] for r in recs]
    return {
        "wall_s": wall,
        "fixed_per_cell_s": (wall * workers - sum(inside)) / n,
        "peak_child_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-train", type=int, default=32, help="SFT examples per cell (its size)")
    ap.add_argument("--no-memory", action="store_true", help="skip the 4x-cells memory runs")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)  # model n workers warm
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "cell_overhead.json"))
    args = ap.parse_args()
    if args.child:
        model, n, workers, warm = args.child
        with tempfile.TemporaryDirectory() as out:
            print(json.dumps(run_pool(model, int(n), int(workers), warm == "1", out, args.n_train)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = save_model(Path(tmp) / "tiny-xs")

        def child(n: int, pool: str) -> dict:
            workers, warm = POOLS[pool]
            cmd = [sys.executable, __file__, "--child", model, str(n), str(workers), "1" if warm else "0",
                   "--n-train", str(args.n_train)]  # fmt: skip
            env = {**os.environ, "OXBENCH_THREADS": "1"} if pool.endswith("1t") else None
            res = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
            return json.loads(res.stdout.strip().splitlines()[-1])

        child(1, "warm x1")  # warm the cache (base evaluation) outside the timing
        runs: dict[str, list[dict]] = {p: [] for p in POOLS}
        names = list(POOLS)
        for r in range(args.repeats):
            for pool in names[r % len(names) :] + names[: r % len(names)]:
                runs[pool].append(child(args.cells, pool))
                print(f"repeat {r} {pool}: {runs[pool][-1]}", flush=True)
        big = {} if args.no_memory else {p: child(4 * args.cells, p) for p in ("warm x1", "fresh x1")}
    med = {p: {k: statistics.median(x[k] for x in v) for k in v[0]} for p, v in runs.items()}
    ratios = {
        "x2_over_x1": statistics.median(
            a["wall_s"] / b["wall_s"] for a, b in zip(runs["warm x1"], runs["warm x2"])
        ),
        "fresh_over_warm_wall": statistics.median(
            a["wall_s"] / b["wall_s"] for a, b in zip(runs["fresh x1"], runs["warm x1"])
        ),
        "two_thread_speedup": statistics.median(
            a["wall_s"] / b["wall_s"] for a, b in zip(runs["warm x1 1t"], runs["warm x1"])
        ),
    }
    ratios["x2_bound"] = 2 / ratios["two_thread_speedup"]
    peak = {p: {"cells": args.cells, "mib": med[p]["peak_child_mib"], "cells_4x": 4 * args.cells,
                "mib_4x": big[p]["peak_child_mib"]} for p in big}  # fmt: skip
    result = {"cells": args.cells, "n_train": args.n_train, "repeats": args.repeats, "median": med, "ratios": ratios, "peak": peak,
              "runs": runs}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    for p, m in med.items():
        print(f"{p}: wall {m['wall_s']:.1f} s, fixed cost per cell {m['fixed_per_cell_s']:.2f} s")
    print(
        f"two warm workers vs one: {ratios['x2_over_x1']:.2f}x (bound from one cell's 2-thread speed-up "
        f"{ratios['two_thread_speedup']:.2f}x: {ratios['x2_bound']:.2f}x); warm vs fresh: {ratios['fresh_over_warm_wall']:.2f}x"
    )
    for p, v in peak.items():
        print(
            f"{p}: peak child memory {v['mib']:.0f} MiB at {v['cells']} cells, {v['mib_4x']:.0f} MiB at {v['cells_4x']}"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
