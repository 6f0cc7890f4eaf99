"""``oxbench report``: the HTML report of a results directory (and the path the run commands print)."""

from __future__ import annotations

from pathlib import Path

import typer

from oxbench.grid.spec import (
    GridError,
    ReportMetric,
    ReportOptions,
    load_report_options,
)
from oxbench_cli.app import app, fail, out_console
from oxbench_cli.reporting import _write_report


@app.command()
def report(
    directory: Path = typer.Argument(..., help="A results directory (e.g. results/quickstart)."),
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        help="The method (or arm, e.g. 'dpo lr=1e-05') every other arm is compared with "
        "(default: the grid's report.baseline, else dpo).",
    ),
    metric: ReportMetric | None = typer.Option(
        None,
        "--metric",
        help="The accuracy the leaderboard ranks and tests (default: the grid's report.metric, else accuracy).",
    ),
    strict: bool = typer.Option(
        False, "--strict", help="A run.json that is not a valid record is an error (exit 2), not a warning."
    ),
):
    """Write DIRECTORY/report.html from the run records under it (a bad record is named and skipped)."""
    if not directory.is_dir():
        fail(f"{directory}: no such results directory")
    if (directory / "report.html").exists() and not (directory / "report.html").is_file():
        fail(f"{directory / 'report.html'}: exists and is not a file")
    try:
        saved = load_report_options(directory) or ReportOptions()
    except GridError as exc:
        fail(str(exc))
    try:
        path = _write_report(directory, baseline or saved.baseline, strict, metric or saved.metric)
    except (ValueError, OSError) as exc:  # OSError: a full disk, the report's path named
        fail(" ".join(str(exc).split()))
    out_console.print(f"wrote {path}")
