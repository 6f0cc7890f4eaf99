"""oxbench's bundled lm-eval task YAMLs, read without importing lm-eval (the CLI validates names with it).

Each YAML names its task (``task:``) and, in its metadata, the accuracy of guessing (``chance:``;
``null`` where the run's task decides it). :func:`check_bundled` rejects a misspelt ``oxbench_*``
name before any work starts; other names are lm-eval's own and are checked against its index.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

DIR = Path(__file__).resolve().parent


def bundled() -> dict[str, float | None]:
    """``{task: chance}`` of every bundled YAML (chance ``None`` when the YAML leaves it to the run)."""
    out = {}
    for path in sorted(DIR.glob("*.yaml")):
        text = path.read_text()
        task = re.search(r"^task: (\S+)", text, re.M).group(1)
        chance = re.search(r"^  chance: (\S+)", text, re.M)
        out[task] = float(chance.group(1)) if chance and chance.group(1) != "null" else None
    return out


def check_bundled(tasks: list[str]) -> None:
    """``ValueError`` naming the first ``oxbench_*`` task that is not bundled (with the closest name)."""
    known = list(bundled())
    for task in tasks:
        if task.startswith("oxbench_") and task not in known:
            close = difflib.get_close_matches(task, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (bundled: {', '.join(known)})"
            raise ValueError(f"unknown bundled lm-eval task {task!r}{hint}")
