"""The expected cost of the paper recipes' cells on GPUs, as the docs' tables give it: memory per GPU
(:mod:`oxbench.engine.memory`) and time per cell from the compute ledger (:mod:`oxbench.engine.ledger`),
read from the recipes themselves. ``python -m oxbench.grid.estimates`` prints both tables."""

from __future__ import annotations

from pathlib import Path

from oxbench.engine.ledger import _hours, expected_ledger, expected_seconds
from oxbench.engine.memory import QWEN25
from oxbench.engine.memory import readme_table as memory_table


def _cell(recipe: str, method: str, size: str, online: dict):
    """A paper recipe's cell at a Qwen2.5 size: its base, per-scale override and ``online`` settings."""
    from oxbench.config import RunConfig
    from oxbench.grid.spec import _merge, load_grid

    grid = load_grid(Path(__file__).resolve().parents[2] / "recipes" / f"{recipe}.yaml")
    name = f"Qwen/Qwen2.5-{size}-Instruct"
    raw = _merge(_merge(grid.base, grid.scales.get(name, {})), {"method": method, "model": {"name": name}})
    raw["online"] = {**raw.get("online", {}), **online}
    return RunConfig(**{k: v for k, v in raw.items() if k != "eval"})


def ledger_table() -> str:
    """The docs' table (docs/gpus.md): one cell of each paper recipe per scale, its ledger, the fewest 80 GB GPUs that
    hold it (oxbench.engine.memory, gradient checkpointing on) and its expected time on them."""
    import dataclasses

    from oxbench.engine.memory import fewest_gpus, setup_for_run

    rows = [
        "| recipe, cell | Qwen2.5 | GPUs | rollouts | generated tokens (at most) | trained tokens | "
        "expected time (train + generate) |",
        "|---|---|---|---|---|---|---|",
    ]
    cases = [("oxrl_paper", "sgrpo", s, {}) for s in QWEN25] + [("oxrl_paper", "dpo", "7B", {})]
    cases += [
        ("isocompute_paper", "sgrpo", "7B", {"n": 64, "prompts_per_batch": 256, "rounds": 256}),
        ("staleness_paper", "sgrpo", "1.5B", {}),
    ]
    for recipe, method, size, online in cases:
        cfg, shape = _cell(recipe, method, size, online), QWEN25[size]
        is_online = method == "sgrpo"
        ledger = expected_ledger(cfg, online=is_online, pairs=method == "dpo")
        setup = setup_for_run(cfg, shape.vocab, online=is_online, pairs=method == "dpo")
        setup = dataclasses.replace(setup, gradient_checkpointing=True)
        n, note = fewest_gpus(shape, setup), ""
        if (
            n is None and is_online
        ):  # the recipe's micro-batch is too large: one prompt's rollouts per micro-batch
            n = fewest_gpus(shape, dataclasses.replace(setup, micro_seqs=cfg.online.n))
            note = " (train.batch_size 1)" if n else ""
        if cfg.online.source == "async" and n != 1:  # the asynchronous source runs at world size 1
            n, note = None, ""
        sec = expected_seconds(ledger, shape, n or 8, checkpointing=True)
        label = f"`{recipe}`, {method}" + (" (n 64, B_p 256, M 256)" if online else "")
        rows.append(
            f"| {label} | {size} | {n or '> 8'}{note} | {ledger['rollouts']:,} | {ledger['generated_tokens']:,} | "
            f"{ledger['trained_tokens']:,} | {_hours(sec['total_s'])} ({_hours(sec['train_s'])} + "
            f"{_hours(sec['gen_s'])}) |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print(memory_table(), ledger_table(), sep="\n\n")
