"""pyproject.toml's requirements against the code (issue 42, item 6): no dependency declared and unused
(each core requirement is imported by oxbench/, oxbench_cli/, losses/ or analysis/); TRL, which only the
tests and a benchmark import, in the extras and not the core; and the ``test`` extra, the README's
install, bringing every distribution the tests import."""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+ (CI's)
from packaging.requirements import Requirement  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("oxbench", "oxbench_cli", "losses", "analysis")
# a requirement used through another library's module rather than imported under its own name
USED_THROUGH = {
    "tensorboard": ("torch.utils.tensorboard",)
}  # TensorBoard's SummaryWriter (oxbench/tracking.py)


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def imported(*dirs: str) -> set[str]:
    """Every module imported (at any depth in a file) under ``dirs``, as written: ``a.b`` and ``a``."""
    mods: set[str] = set()
    for d in dirs:
        for path in (ROOT / d).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    parts = name.split(".")
                    mods |= {".".join(parts[: i + 1]) for i in range(len(parts))}
    return mods


@functools.cache
def distributions() -> dict[str, list[str]]:
    """Each installed top-level module's distributions."""
    return metadata.packages_distributions()


def import_names(dist: str) -> set[str]:
    """The top-level modules an installed distribution provides, and the modules it is used through."""
    tops = {top for top, dists in distributions().items() if dist in map(canon, dists)}
    return tops | set(USED_THROUGH.get(dist, ()))


def test_every_core_requirement_is_imported():
    mods = imported(*PACKAGES)
    unused = []
    for req in map(Requirement, project()["dependencies"]):
        names = import_names(canon(req.name))
        assert names, f"{req.name} is not installed: install the project (pip install -e '.[test]')"
        if not names & mods:
            unused.append(f"{req.name} (imported as {', '.join(sorted(names))}: nowhere)")
    assert not unused, "declared and never imported: " + "; ".join(unused)


def test_trl_is_in_the_extras_that_use_it_and_accelerate_is_not_declared():
    core = {canon(Requirement(r).name) for r in project()["dependencies"]}
    extras = {
        k: {canon(Requirement(r).name) for r in v} for k, v in project()["optional-dependencies"].items()
    }
    assert "trl" not in core and "accelerate" not in core
    assert "trl" in extras["test"] and "trl" in extras["bench"]
    assert not {"trl", "accelerate"} & {m.split(".")[0] for m in imported(*PACKAGES)}  # the reason


def closure(requirements: list[str]) -> set[str]:
    """The installed distributions ``requirements`` bring, dependencies of dependencies included (each
    with the extras asked of it; markers evaluated here)."""
    seen: set[tuple[str, frozenset]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = (canon(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            reqs = [Requirement(r) for r in metadata.requires(req.name) or []]
        except metadata.PackageNotFoundError:
            continue
        for r in reqs:
            asked = [e for e in req.extras if r.marker is not None and r.marker.evaluate({"extra": e})]
            todo.append(Requirement(re.sub(r";.*", "", str(r))) if asked else r)
    return {name for name, _ in seen}


def test_the_test_extra_brings_every_distribution_the_tests_import():
    """The README installs ``-e ".[test]"``: a test's import that only some other install brought (TRL's,
    once it left the core) would fail on a fresh machine."""
    brought = closure([*project()["dependencies"], *project()["optional-dependencies"]["test"]])
    dists = distributions()
    tops = {m.split(".")[0] for m in imported("tests")} - set(sys.stdlib_module_names) - set(PACKAGES)
    missing = sorted(
        f"{top} ({', '.join(dists[top])})"
        for top in tops
        if top in dists and not {canon(d) for d in dists[top]} & brought
    )
    assert not missing, "imported by the tests, not brought by oxbench[test]: " + "; ".join(missing)
