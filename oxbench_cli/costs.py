"""``oxbench costs``: the docs' cost tables (docs/gpus.md), from the paper recipes themselves.

The estimates are :mod:`oxbench.engine.cost`'s: memory per GPU of each Qwen2.5 size, and one cell of each
paper recipe per scale, its compute ledger, the fewest 80 GB GPUs that hold it and its expected time.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from oxbench.config import RunConfig
from oxbench.engine import cost
from oxbench.grid.spec import _merge, load_grid
from oxbench_cli.app import app, out_console

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def _cell(recipe: str, method: str, size: str, online: dict) -> RunConfig:
    """A paper recipe's cell at a Qwen2.5 size: its base, per-scale override and ``online`` settings."""
    grid = load_grid(RECIPES / f"{recipe}.yaml")
    name = f"Qwen/Qwen2.5-{size}-Instruct"
    raw = _merge(_merge(grid.base, grid.scales.get(name, {})), {"method": method, "model": {"name": name}})
    raw["online"] = {**raw.get("online", {}), **online}
    return RunConfig(**{k: v for k, v in raw.items() if k != "eval"})


CASES = [("oxrl_paper", "sgrpo", s, {}) for s in cost.QWEN25] + [
    ("oxrl_paper", "dpo", "7B", {}),
    ("isocompute_paper", "sgrpo", "7B", {"n": 64, "prompts_per_batch": 256, "rounds": 256}),
    ("staleness_paper", "sgrpo", "1.5B", {}),
]


def _gpus(cfg: RunConfig, shape: cost.ModelShape, online: bool, pairs: bool) -> tuple[int | None, str]:
    """The fewest 80 GB GPUs that hold the cell (gradient checkpointing on), and a note on how."""
    setup = cost.setup_for_run(cfg, shape.vocab, online=online, pairs=pairs)
    setup = dataclasses.replace(setup, gradient_checkpointing=True)
    n, note = cost.fewest_gpus(shape, setup), ""
    if n is None and online:  # the recipe's micro-batch is too large: one prompt's rollouts per micro-batch
        n = cost.fewest_gpus(shape, dataclasses.replace(setup, micro_seqs=cfg.online.n))
        note = " (train.batch_size 1)" if n else ""
    if cfg.online.source == "async" and n != 1:  # the asynchronous source runs at world size 1
        n, note = None, ""
    return n, note


def ledger_table() -> str:
    """The docs' second table: each case's ledger, GPUs and expected time (train + generate) on them."""
    h = cost.hours
    rows = [
        "| recipe, cell | Qwen2.5 | GPUs | rollouts | generated tokens (at most) | trained tokens | "
        "expected time (train + generate) |",
        "|---|---|---|---|---|---|---|",
    ]
    for recipe, method, size, online in CASES:
        cfg, shape = _cell(recipe, method, size, online), cost.QWEN25[size]
        is_online, pairs = method == "sgrpo", method == "dpo"
        ledger = cost.expected_ledger(cfg, online=is_online, pairs=pairs)
        n, note = _gpus(cfg, shape, is_online, pairs)
        sec = cost.expected_seconds(ledger, shape, n or 8, checkpointing=True)
        label = f"`{recipe}`, {method}" + (" (n 64, B_p 256, M 256)" if online else "")
        rows.append(
            f"| {label} | {size} | {n or '> 8'}{note} | {ledger['rollouts']:,} | {ledger['generated_tokens']:,} | "
            f"{ledger['trained_tokens']:,} | {h(sec['total_s'])} ({h(sec['train_s'])} + {h(sec['gen_s'])}) |"
        )
    return "\n".join(rows)


@app.command()
def costs() -> None:
    """Print the docs' cost tables: GPU memory per Qwen2.5 size, and each paper recipe's expected time."""
    out_console.print(cost.memory_table(), soft_wrap=True)
    out_console.print()
    out_console.print(ledger_table(), soft_wrap=True)
