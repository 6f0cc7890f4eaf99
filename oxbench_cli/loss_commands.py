"""``oxbench losses``: the registry's table, a new loss plugin scaffolded, and the loss contract checked."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.table import Table

from oxbench_cli.app import _load_plugins, app, err_console, fail, out_console, tagged

losses_app = typer.Typer(add_completion=False, no_args_is_help=False)
app.add_typer(losses_app, name="losses")


@losses_app.callback(invoke_without_command=True)
def list_losses(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Every spec's metadata as JSON."),
    plugin: list[str] = typer.Option([], "--plugin", help="Import a module that defines LossSpecs."),
):
    """The loss registry: built-ins and installed plugins (``new`` and ``check``: a contributor's loop)."""
    import losses

    _load_plugins(plugin)
    if ctx.invoked_subcommand is not None:
        return
    try:
        specs = losses.all_info()  # the index's built-ins (no torch) and the plugins' live specs
    except losses.LossError as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps([s.metadata() for s in specs], indent=2) + "\n")
        return
    t = Table(title=f"{len(specs)} losses")
    for col in ("name", "paradigm", "data", "reference", "paper", "v"):
        t.add_column(col, overflow="fold")
    for s in specs:
        t.add_row(s.name, s.paradigm, s.data, "yes" if s.needs_reference else "no", s.paper, str(s.version))
    out_console.print(t)


@losses_app.command("new")
def losses_new(
    name: str = typer.Argument(
        ..., help="The loss's name, as grids will write it (a lower-case identifier)."
    ),
    directory: Path = typer.Option(Path("."), "--dir", help="Where the package directory goes."),
):
    """Write a new loss as a plugin package: module, hand-computed test, entry point."""
    from oxbench.scaffold import new_loss

    try:
        root = new_loss(name, directory)
    except ValueError as exc:
        fail(str(exc))
    out_console.print(
        f"wrote {root}: edit oxbench_{name}/__init__.py, then\n"
        f"  pip install -e {root} && oxbench losses check {name} && pytest {root}/tests",
        highlight=False,
    )


@losses_app.command("check")
def losses_check(
    target: str = typer.Argument(..., help="MODULE:ATTR (e.g. my_module:spec) or a registered loss name."),
    fast: bool = typer.Option(False, "--fast", help="Skip the three trainer steps (rule 'trains')."),
):
    """Run the loss contract on a spec; each broken rule is one line naming it (exit 1)."""
    import losses
    from oxbench.losscheck import RULES, check, load_spec

    try:
        spec = load_spec(target)
    except (ImportError, AttributeError, losses.LossError) as exc:
        fail(f"{target}: {type(exc).__name__}: {exc}")
    failures = check(spec, [r for r in RULES if not (fast and r == "trains")])
    for line in failures:
        err_console.print(tagged("broken", "red", f"{spec.name}: {line}"), soft_wrap=True)
    if failures:
        raise typer.Exit(1)
    out_console.print(
        f"{spec.name}: every rule holds ({', '.join(r for r in RULES if not (fast and r == 'trains'))})"
    )
