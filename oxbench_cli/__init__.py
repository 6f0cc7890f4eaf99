"""``oxbench``: run grids and single cells, list the loss registry, write reports.

Bad input (malformed grid, unknown method/model/task, missing file) is one line on stderr
and exit code 2. A grid with any failed cell exits 1 after recording and summarising it.

One module per command: :mod:`~oxbench_cli.run`, :mod:`~oxbench_cli.loss_commands`,
:mod:`~oxbench_cli.task_commands`, :mod:`~oxbench_cli.pretrain`, :mod:`~oxbench_cli.status`, :mod:`~oxbench_cli.report`,
:mod:`~oxbench_cli.seeds` and :mod:`~oxbench_cli.costs`; :mod:`~oxbench_cli.app` holds the application and its consoles,
:mod:`~oxbench_cli.plan` the plan table. Importing a command's module registers it (in this order:
the order of ``oxbench --help``).
"""

from __future__ import annotations

import sys

import typer

# isort: off
from oxbench_cli import run, loss_commands, task_commands, pretrain, status, report, seeds, costs  # noqa: F401  (registers them, --help's order)

# isort: on
from oxbench_cli.app import app, err_console, fail, literal, out_console, tagged
from oxbench_cli.plan import _status, print_plan, summary_table

__all__ = [
    "app",
    "main",
    "err_console",
    "fail",
    "literal",
    "out_console",
    "tagged",
    "_status",
    "print_plan",
    "summary_table",
]


def main() -> None:
    """The ``oxbench`` command. A command-line value click cannot take (``--workers abc``, an unknown
    option) is one line naming the option, exit 2, instead of click's usage box."""
    usage_error = typer.BadParameter.__mro__[1]  # click's UsageError, as this typer vendors it
    try:
        code = app(standalone_mode=False)
    except usage_error as exc:
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        err_console.print(
            tagged("error:", "red", where + " ".join(exc.format_message().split())), soft_wrap=True
        )
        sys.exit(2)
    except typer.Abort:  # Ctrl-C at a prompt
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
