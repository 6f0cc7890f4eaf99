"""The structure targets of issue 25, counted on the source: functions over 60 lines, modules at the
``oxbench/`` root, call sites of the loss registry in ``oxbench/``, places that decide "is this method
online", and the README's length. ``python benchmarks/structure_counts.py`` (the repeated blocks are
counted by the ``duplicates`` tool, outside the repository)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("oxbench", "oxbench_cli", "losses", "analysis")


def long_functions(limit: int = 60) -> list[str]:
    """``path:line name (length)`` of every function longer than ``limit`` lines."""
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    n = node.end_lineno - node.lineno + 1
                    if n > limit:
                        out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n})")
    return out


def grep(pattern: str, package: str = "oxbench") -> list[str]:
    """``path:line`` of each code line (not a comment) under ``package`` matching ``pattern``."""
    hits = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(pattern, line) and not line.lstrip().startswith("#"):
                hits.append(f"{path.relative_to(ROOT)}:{i}")
    return hits


def main() -> None:
    long = long_functions()
    print(f"functions over 60 lines: {len(long)}", *long, sep="\n  ")
    print(f"modules at oxbench/'s root (with __init__): {len(list((ROOT / 'oxbench').glob('*.py')))}")
    calls = grep(r"losses\.get\(")
    print(f"losses.get call sites in oxbench/: {len(calls)}", *calls, sep="\n  ")
    online = grep(r'data == "online" or .*generates_own_pairs') + grep(r'data == "online" or', "losses")
    print(f"places deciding 'is online': {len(online)}", *online, sep="\n  ")
    print(f"README.md lines: {len((ROOT / 'README.md').read_text(encoding='utf-8').splitlines())}")


if __name__ == "__main__":
    main()
