"""The structure targets of issue 25, counted on the source: functions over 60 lines, modules at the
``oxbench/`` root, call sites of the loss registry in ``oxbench/``, places that decide "is this method
online", the README's length, and, where the ``duplicates`` tool is on the PATH, the pairs of repeated
blocks of six or more lines in the tracked files without the generated ``results/*.html`` reports.
``python benchmarks/structure_counts.py``."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("oxbench", "oxbench_cli", "losses", "analysis")


def long_functions(limit: int = 60, root: Path = ROOT) -> list[str]:
    """``path:line name (length)`` of every function longer than ``limit`` lines under ``root``."""
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    n = node.end_lineno - node.lineno + 1
                    if n > limit:
                        out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({n})")
    return out


def grep(pattern: str, package: str = "oxbench") -> list[str]:
    """``path:line`` of each code line (not a comment) under ``package`` matching ``pattern``."""
    hits = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(pattern, line) and not line.lstrip().startswith("#"):
                hits.append(f"{path.relative_to(ROOT)}:{i}")
    return hits


def fmt_skips() -> list[str]:
    """``path:line`` of every line that keeps the formatter off (``# fmt: skip``)."""
    return [hit for package in PACKAGES for hit in grep(r"#\s*fmt:\s*skip", package)]


def long_functions_formatted(limit: int = 60) -> list[str]:
    """:func:`long_functions` of a copy of the packages with every ``# fmt: skip`` removed and ``ruff
    format`` run over it: the lengths as the formatter lays the code out."""
    with tempfile.TemporaryDirectory() as tmp:
        for package in PACKAGES:
            for path in (ROOT / package).rglob("*.py"):
                dest = Path(tmp) / path.relative_to(ROOT)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(re.sub(r"[ \t]*#[ \t]*fmt:[ \t]*skip.*$", "", path.read_text(encoding="utf-8"), flags=re.M))
        ruff = subprocess.run(["ruff", "format", "--config", str(ROOT / "pyproject.toml"), tmp], capture_output=True,
                              text=True)  # fmt: skip
        if ruff.returncode:
            raise RuntimeError(f"ruff format failed on the copy: {ruff.stderr.strip()[:500]}")
        return long_functions(limit, Path(tmp))


def duplicate_pairs() -> str:
    """The ``duplicates`` tool's summary line over a copy of the tracked files, reports left out."""
    if shutil.which("duplicates") is None:
        return "duplicates: the tool is not on the PATH"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        for name in files.splitlines():
            if not re.match(r"results/.*\.html$", name) and (ROOT / name).is_file():
                dest = Path(tmp) / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ROOT / name, dest)
        out = subprocess.run(["duplicates", "--most", "200", "--seconds", "120"], cwd=tmp, capture_output=True,
                             text=True).stdout  # fmt: skip
    return out.splitlines()[0] if out else "duplicates: no output"


def main() -> None:
    long = long_functions()
    print(f"functions over 60 lines: {len(long)}", *long, sep="\n  ")
    formatted = long_functions_formatted()
    print(f"functions over 60 lines once formatted (no fmt: skip): {len(formatted)}", *formatted, sep="\n  ")
    print(f"lines with '# fmt: skip': {len(fmt_skips())}")
    print(f"modules at oxbench/'s root (with __init__): {len(list((ROOT / 'oxbench').glob('*.py')))}")
    calls = grep(r"losses\.get\(")
    print(f"losses.get call sites in oxbench/: {len(calls)}", *calls, sep="\n  ")
    online = grep(r'data == "online" or .*generates_own_pairs') + grep(r'data == "online" or', "losses")
    print(f"places deciding 'is online': {len(online)}", *online, sep="\n  ")
    print(f"README.md lines: {len((ROOT / 'README.md').read_text(encoding='utf-8').splitlines())}")
    print(f"repeated blocks: {duplicate_pairs()}")


if __name__ == "__main__":
    main()
