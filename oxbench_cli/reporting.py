"""The report a results directory gets: written, and its path said (``oxbench run``, ``status``, ``report``)."""

from __future__ import annotations

from pathlib import Path

from oxbench.grid.spec import (
    REPORT_OPTIONS,
    GridError,
    ReportOptions,
    load_report_options,
)
from oxbench.utils import (
    write_json_atomic,
)
from oxbench_cli.app import err_console, out_console, tagged


def _report_and_say(directory: Path, options: ReportOptions | None = None, write: bool = True) -> None:
    """Write ``directory/report.html`` and print where it is and how to open it. ``options``: a grid's
    (saved beside its records for later reports); None: those saved, else the defaults. ``write`` False
    (``oxbench run --no-report``): the options are saved and the report is not written. A report that
    cannot be written is a warning line: the records are what a run produces; the report is read from
    them."""
    try:
        if options is not None:
            write_json_atomic(directory / REPORT_OPTIONS, options.model_dump())
        if not write:
            say = f"report: not written (--no-report); write it with: oxbench report {directory}"
            out_console.print(say, soft_wrap=True)
            return
        options = options or load_report_options(directory) or ReportOptions()
        path = _write_report(directory, options.baseline, metric=options.metric)
    except (ValueError, OSError, GridError) as exc:
        err_console.print(tagged("warning", "yellow", f"no report: {exc}"), soft_wrap=True)
        return
    out_console.print(
        f"report: {path}  (open it: python -m webbrowser -t file://{path.resolve()})", soft_wrap=True
    )


def _write_report(directory: Path, baseline: str, strict: bool = False, metric: str = "accuracy") -> Path:
    """``analysis.report.write_report``, each bad record named once on stderr."""
    import warnings

    from analysis.report import write_report

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        path = write_report(directory, baseline=baseline, strict=strict, metric=metric)
    for w in dict.fromkeys(str(w.message) for w in seen if w.category.__name__ == "BadRecordWarning"):
        err_console.print(tagged("warning", "yellow", w), soft_wrap=True)
    return path
