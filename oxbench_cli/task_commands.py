"""``oxbench tasks``: the task registry's table, a new task plugin scaffolded, and the task contract
checked (as ``oxbench losses`` does for losses)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.table import Table

from oxbench_cli.app import _load_plugins, app, err_console, fail, out_console, tagged

tasks_app = typer.Typer(add_completion=False, no_args_is_help=False)
app.add_typer(tasks_app, name="tasks")


def _row(spec) -> dict:
    from oxbench.tasks.registry import GRADER_REWARDS, origin

    return {
        "name": spec.name,
        "splits": list(spec.splits),
        "graders": sorted(spec.graders),
        "rewards": [*GRADER_REWARDS, *spec.rewards],
        "metrics": spec.metrics is not None,
        "bins": {k: list(v) for k, v in spec.bins.items()},
        "origin": origin(spec.name),
        "description": spec.description,
    }


@tasks_app.callback(invoke_without_command=True)
def list_tasks(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Every task's splits, graders, rewards as JSON."),
    plugin: list[str] = typer.Option([], "--plugin", help="Import a module that defines TaskSpecs."),
):
    """The task registry: built-ins and plugins, and the reward functions a grid can name."""
    from oxbench.tasks import registry

    _load_plugins(plugin)
    if ctx.invoked_subcommand is not None:
        return
    try:
        rows = [_row(s) for s in registry.all_tasks()]
        rewards = registry.reward_names()
    except registry.TaskError as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps({"tasks": rows, "rewards": rewards}, indent=2) + "\n")
        return
    t = Table(title=f"{len(rows)} tasks")
    for col in ("name", "splits", "rewards", "bins", "origin"):
        t.add_column(col, overflow="fold")
    for r in rows:
        own = [x for x in r["rewards"] if x not in registry.GRADER_REWARDS]
        t.add_row(
            r["name"], ", ".join(r["splits"]), ", ".join(own) or "-", ", ".join(r["bins"]) or "-", r["origin"]
        )
    out_console.print(t)
    out_console.print(f"every task's graders reward as: {', '.join(registry.GRADER_REWARDS)}")
    out_console.print(f"registered reward functions: {', '.join(rewards) or 'none'}")


@tasks_app.command("new")
def tasks_new(
    name: str = typer.Argument(
        ..., help="The task's name, as grids will write it (a lower-case identifier)."
    ),
    directory: Path = typer.Option(Path("."), "--dir", help="Where the package directory goes."),
):
    """Write a new task as a plugin package: module, tests, entry point."""
    from oxbench.scaffold import new_task

    try:
        root = new_task(name, directory)
    except ValueError as exc:
        fail(str(exc))
    out_console.print(
        f"wrote {root}: edit oxbench_{name}/__init__.py, then\n"
        f"  pip install -e {root} && oxbench tasks check {name} && pytest {root}/tests",
        highlight=False,
    )


@tasks_app.command("check")
def tasks_check(
    target: str = typer.Argument(..., help="MODULE:ATTR (e.g. my_module:spec) or a registered task name."),
    path: str | None = typer.Option(None, "--path", help="task.path, for a task that reads files."),
    test_path: str | None = typer.Option(None, "--test-path", help="task.test_path."),
):
    """Run the task contract on a spec; each broken rule is one line naming it (exit 1)."""
    from oxbench.tasks.check import RULES, check, load_spec
    from oxbench.tasks.errors import TaskError

    try:
        spec = load_spec(target)
    except (ImportError, AttributeError, TaskError) as exc:
        fail(f"{target}: {type(exc).__name__}: {exc}")
    failures = check(spec, task={"path": path, "test_path": test_path})
    for line in failures:
        err_console.print(tagged("broken", "red", f"{spec.name}: {line}"), soft_wrap=True)
    if failures:
        raise typer.Exit(1)
    out_console.print(f"{spec.name}: every rule holds ({', '.join(RULES)})")
