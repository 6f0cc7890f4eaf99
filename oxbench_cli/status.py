"""``oxbench status``: every cell of a results directory, finished, running, failed or to run."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from oxbench.grid.runs import inspect_record, stale_data
from oxbench.grid.spec import (
    GridError,
    expand,
    load_grid,
)
from oxbench.utils import (
    UnsafeFile,
    read_jsonl_checked,
)
from oxbench_cli.app import app, fail, literal, out_console, scores
from oxbench_cli.plan import summary_table
from oxbench_cli.reporting import _report_and_say


@app.command()
def status(
    directory: Path = typer.Argument(..., help="A grid's output directory (e.g. runs/quickstart)."),
    grid: Path | None = typer.Option(None, "--grid", help="The grid file: also list the cells not started."),
):
    """A study in progress, from its records alone: each cell (finished, running at which step,
    pre-empted with its checkpoint, failed with its error, to run) and the partial leaderboard."""
    if not directory.is_dir():
        fail(f"{directory}: no such results directory")
    known = {p.parent.name: p.parent for p in sorted(directory.rglob("run.json"))}
    if grid is not None:
        try:
            cells = expand(load_grid(grid), str(grid))
        except GridError as exc:
            fail(str(exc))
        known |= {c.run_id(): None for c in cells if c.run_id() not in known}
    t = Table(title=f"{directory}: {len(known)} cells")
    for col in ("cell", "status", "where"):
        t.add_column(col, overflow="fold")
    records, counts = [], {}
    for run_id, d in known.items():
        rec, problem = inspect_record(d) if d is not None else (None, None)
        state, where = _cell_state(d, rec, problem)
        counts[state] = counts.get(state, 0) + 1
        records += [rec] if rec is not None else []
        t.add_row(run_id, state, literal(where))
    out_console.print(t)
    out_console.print(", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    finished = [r for r in records if r["status"] == "finished"]
    if finished:
        out_console.print(summary_table(records, f"{directory}: accuracy (%) so far, mean ± std over seeds"))
        _report_and_say(directory)


def _cell_state(d: Path | None, rec: dict | None, problem: str | None = None) -> tuple[str, str]:
    """(status, where it is) of one cell: a ``running`` record whose lock nobody holds was killed; a
    record that cannot be read is ``corrupt``, with its one-line ``problem``."""
    if d is None:
        return "to run", ""
    if rec is None:
        return ("corrupt", problem) if problem else ("to run", "")
    last, bad = _last_step(d / "metrics.jsonl")
    skipped = f"; {bad} bad line(s) of metrics.jsonl skipped" if bad else ""
    resumable = _resumable(d)
    if rec["status"] == "running":
        return (
            ("running", f"step {last}") if _locked(d) else ("killed", f"at step {last}{resumable}{skipped}")
        )
    if rec["status"] in ("failed", "preempted"):
        return rec["status"], f"{rec.get('error') or ''}{resumable}{skipped}"
    if rec["status"] == "finished" and (stale := stale_data(rec)):
        return "stale", stale
    return rec["status"], f"{scores(rec)}{skipped}"


def _resumable(d: Path) -> str:
    """Where a rerun of the cell resumes: its newest checkpoint whose files match their SHA-256, and any
    newer one that does not (a rerun passes it over)."""
    from oxbench.engine.manifest import newest_usable

    usable, passed = newest_usable(d / "checkpoints")
    note = f" ({'; '.join(passed)}: passed over)" if passed else ""
    if usable is None:
        return f"; no usable checkpoint{note}" if passed else ""
    return f"; resumes from {usable.name}{note}"


def _locked(d: Path) -> bool:
    """Whether a process holds ``d``'s run lock (read-only: a results tree from elsewhere may be too)."""
    import fcntl

    try:
        with open(d / ".lock") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: its process is gone
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def _last_step(path: Path) -> tuple[int, int]:
    """The last step ``metrics.jsonl`` logged (0: none) and how many of its lines could not be read."""
    try:
        rows, bad = read_jsonl_checked(path, root=path.parent.parent.parent) if path.exists() else ([], 0)
    except UnsafeFile:
        return 0, 1
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int) and not isinstance(r["step"], bool)]
    return (steps[-1] if steps else 0), bad
