"""``--plugin MODULE``: register the LossSpecs, TaskSpecs and RewardSpecs of unpublished code (no entry
point needed).

The module names travel to cell subprocesses in ``$OXBENCH_PLUGINS`` (comma-separated).
"""

from __future__ import annotations

import importlib
import os

import losses
from oxbench.tasks import registry as tasks
from oxbench.tasks.errors import TaskError


def load_plugins(modules: list[str]) -> list[str]:
    """Import each module and register every LossSpec, TaskSpec and RewardSpec it defines; returns the
    names added. A task or reward that cannot be registered is a :class:`losses.LossError` too (one line)."""
    added = []
    for mod in modules:
        try:
            module = importlib.import_module(mod)
        except SystemExit as exc:  # not a way to end oxbench: sys.exit(0) would exit 0 silently
            raise losses.LossError(f"plugin {mod!r} called sys.exit({exc.code!r}) on import") from None
        except Exception as exc:
            raise losses.LossError(f"plugin {mod!r} failed to import: {type(exc).__name__}: {exc}") from exc
        specs = [v for v in vars(module).values() if isinstance(v, losses.LossSpec)]
        others = [v for v in vars(module).values() if isinstance(v, tasks.TaskSpec | tasks.RewardSpec)]
        if not specs and not others:
            raise losses.LossError(f"plugin {mod!r} defines no losses.LossSpec, TaskSpec or RewardSpec")
        for spec in specs:
            if _installed(spec):  # a built-in or installed spec the module imported, not its own
                continue
            losses.register(spec, origin=f"--plugin {mod}")
            added.append(spec.name)
        added += _register_tasks(others, mod)
    if modules:
        os.environ["OXBENCH_PLUGINS"] = ",".join(modules)
    return added


def _register_tasks(specs: list, mod: str) -> list[str]:
    added = []
    for spec in specs:
        if _installed_task(spec):
            continue
        try:
            tasks.register(spec, origin=f"--plugin {mod}")
        except TaskError as exc:
            raise losses.LossError(str(exc)) from None
        added.append(spec.name)
    return added


def _installed_task(spec) -> bool:
    """A built-in or installed task (or reward) the module imported, not its own."""
    try:
        found = tasks.get_task(spec.name) if isinstance(spec, tasks.TaskSpec) else tasks.get_reward(spec.name)
    except TaskError:
        return False
    return found is spec


def _installed(spec: losses.LossSpec) -> bool:
    if spec.name not in losses.names():
        return False
    from oxbench.engine.plan import lookup

    try:
        return lookup(spec.name) is spec
    except losses.LossError:
        return False


def load_env_plugins() -> None:
    mods = [m for m in os.environ.get("OXBENCH_PLUGINS", "").split(",") if m]
    load_plugins(mods)
