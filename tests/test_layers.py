"""The layers, checked on the source: losses/ -> oxbench/ -> analysis/, no arrow back up.

* ``losses`` imports neither ``oxbench`` nor ``analysis`` (pure functions of log-probs);
* ``analysis`` reads records only: from ``oxbench`` it imports ``oxbench.record`` and nothing else;
* ``oxbench.text`` (prompt format, tokenise and score, generate) is the bottom of ``oxbench``: it
  imports only ``oxbench.utils`` and ``oxbench.device`` (the rank's device, which imports nothing of
  oxbench);
* ``oxbench.data`` and ``oxbench.eval`` do not import each other;
* within ``oxbench`` only the CLI (the entry point on top of everything, for ``oxbench report``)
  imports ``analysis``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imports(package: str) -> dict[str, set[str]]:
    """module file -> every absolute module it imports (at any depth in the file)."""
    out = {}
    for path in (ROOT / package.replace(".", "/")).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
        out[str(path.relative_to(ROOT))] = names
    return out


def offending(package: str, allowed) -> list[str]:
    return [f"{f}: {m}" for f, ms in imports(package).items() for m in sorted(ms) if not allowed(m)]


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        ("losses", lambda m: not m.startswith(("oxbench", "analysis"))),
        ("analysis", lambda m: not m.startswith("oxbench") or m == "oxbench.record"),
        (
            "oxbench.text",
            lambda m: (
                not m.startswith(("oxbench", "analysis"))
                or m in ("oxbench.utils", "oxbench.device")
                or m.startswith("oxbench.text")
            ),
        ),
        ("oxbench.data", lambda m: not m.startswith(("oxbench.eval", "analysis"))),
        ("oxbench.eval", lambda m: not m.startswith(("oxbench.data", "oxbench.engine", "analysis"))),
    ],
)
def test_no_import_runs_back_up(package, allowed):
    assert offending(package, allowed) == []


def test_only_the_cli_imports_analysis():
    users = [f for f, ms in imports("oxbench").items() if any(m.startswith("analysis") for m in ms)]
    assert users == [str(Path("oxbench/cli.py"))]


def test_the_check_sees_an_import():
    assert "oxbench.text.formatting" in imports("oxbench.eval")[str(Path("oxbench/eval/evaluate.py"))]
