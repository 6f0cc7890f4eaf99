"""``oxbench pretrain``: a tiny rung's base, pre-trained or checked against the shipped one."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from oxbench.grid.spec import (
    GridError,
    expand,
    load_grid,
)
from oxbench_cli.app import app, fail, out_console


@app.command()
def pretrain(
    scale: str = typer.Argument(..., help="A tiny rung (tiny-xs, tiny-s, tiny-m, tiny-l)."),
    recipe: Path = typer.Option(
        Path("recipes/quickstart.yaml"), "--recipe", help="Whose pre-training settings."
    ),
    check: bool = typer.Option(False, "--check", help="Compare with the shipped base; write nothing."),
):
    """Pre-train SCALE's base from scratch as RECIPE sets it up. With --check, say whether it equals the
    shipped base bit for bit (exit 1 if not); without, ship it (oxbench/models/bases/<key>/)."""
    import tempfile

    from oxbench.models import shipped
    from oxbench.models.loading import pretrain_config
    from oxbench.models.pretrain import ensure_pretrained

    try:
        cell = next((c for c in expand(load_grid(recipe), str(recipe)) if c.model.name == scale), None)
    except GridError as exc:
        fail(str(exc))
    if cell is None:
        fail(f"{recipe}: no cell at scale {scale!r}")
    pcfg = pretrain_config(cell)
    key, before = pcfg.key(), os.environ.get("OXBENCH_CACHE")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["OXBENCH_CACHE"] = tmp  # trained from scratch: neither the cache nor the shipped copy
        try:
            built = ensure_pretrained(pcfg, use_shipped=False)
            _report_pretrain(shipped, built, scale, key, check)
        finally:
            os.environ.pop("OXBENCH_CACHE") if before is None else os.environ.update(OXBENCH_CACHE=before)


def _report_pretrain(shipped, built: Path, scale: str, key: str, check: bool) -> None:
    if not check:
        out_console.print(f"shipped {scale} base {key}: {shipped.ship(built, key)}")
        return
    ref = shipped.shipped(key)
    if ref is None:
        fail(f"no shipped base for {scale} key {key} (run without --check to ship it)")
    same, diff = shipped.same_weights(built, ref)
    out_console.print(
        f"{scale} base {key}: "
        + (
            "equals the shipped base bit for bit"
            if same
            else f"differs from the shipped base (largest |difference| {diff:.3g})"
        )
    )
    if not same:
        raise typer.Exit(1)
