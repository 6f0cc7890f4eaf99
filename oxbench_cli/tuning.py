"""``oxbench run`` on a grid with ``tune:`` (:mod:`oxbench.grid.tune`): its tuning cells first, on the
validation split; then each arm's pick, from the tuning records; then the grid's cells at their picks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.table import Table

from oxbench.grid import tune
from oxbench.grid.spec import GridError, tune_plan, tuned_cells
from oxbench.utils import write_json_atomic
from oxbench_cli.app import err_console, fail, out_console, tagged
from oxbench_cli.plan import _estimate_seconds


def tune_first(g, out: Path, plan: bool, run_cells: Callable[[list], list[dict]]) -> tuple[list, list[dict]]:
    """Runs (or, with ``plan``, lists) the tuning cells, picks, and returns the grid's cells at their
    arm's pick (those whose tune has ended) and the tuning cells' records."""
    try:
        tp = tune_plan(g, g.name)  # every tuning cell built once: run here, then read for the picks
    except GridError as exc:
        fail(str(exc))
    cells = tune.tuning_cells(tp.arms)
    spec = g.tune
    out_console.print(
        f"tuning: {len(cells)} cells on the validation split ({len(spec.seeds)} tuning seeds); the pick: the "
        f"best mean {spec.metric}, means within {spec.tie:g} of the best tied, ties to the smaller step",
        soft_wrap=True,
    )
    records = run_cells(cells)
    try:
        ready, state, waiting = tuned_cells(g, out, g.name, tp)
    except GridError as exc:
        fail(str(exc))
    if not plan:
        write_json_atomic(tune.picks_path(out, g.name), state)
    _print_picks(state)
    if waiting:
        minutes = sum(_estimate_seconds(c) for c in waiting) / 60
        out_console.print(
            f"{len(waiting)} final cells wait for their tune (the arms above not yet picked); estimated "
            f"{minutes:.0f} min of cell time on CPU at their family's settings"
        )
    for arm, a in state.items():
        if a["status"] == "none":
            err_console.print(
                tagged("failed", "red", f"{arm}: no tuning cell finished; its final cells do not run")
            )
    return ready, records


def _print_picks(state: dict) -> None:
    table = Table(title="the tune: each arm's pick (validation split)")
    for col in ("arm (first cell)", "method", "status", "tuning cells ended", "pick", "validation mean"):
        table.add_column(col, overflow="fold")
    for arm, a in state.items():
        point = ", ".join(f"{k}={v:g}" for k, v in a.get("point", {}).items())
        mean = f"{a['mean']:.4f}" if "mean" in a else ""
        table.add_row(arm, a["method"], a["status"], f"{a['ended']}/{a['cells']}", point, mean)
    out_console.print(table)
