"""The layers, checked on the source: losses/ -> oxbench/ -> analysis/, no arrow back up.

* ``losses`` imports neither ``oxbench`` nor ``analysis`` (pure functions of log-probs);
* ``analysis`` reads records only: from ``oxbench`` it imports ``oxbench.grid.record`` and nothing else;
* ``oxbench.text`` (prompt format, tokenise and score, generate) is the bottom of ``oxbench``: it
  imports only ``oxbench.utils`` and ``oxbench.device`` (the rank's device, which imports nothing of
  oxbench);
* ``oxbench.data`` and ``oxbench.eval`` do not import each other;
* no module of ``oxbench`` imports ``analysis`` or the CLI (``oxbench_cli``, on top of both);
* ``oxbench.config`` imports nothing above it (only ``oxbench.utils``, the task definitions and
  ``losses``), and nothing below the grid layer imports ``oxbench.grid``;
* ``benchmarks/`` holds benchmarks only: a study analysis (it reads run records and prints a study's
  numbers) is a module of ``analysis/``, run as ``python -m analysis.<name>``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BELOW_GRID = ("text", "tasks", "models", "data", "engine", "eval")  # the layers under oxbench.grid


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
        ("analysis", lambda m: not m.startswith("oxbench") or m in ("oxbench.grid", "oxbench.grid.record")),
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
        ("oxbench", lambda m: not m.startswith(("analysis", "oxbench_cli"))),
        *((f"oxbench.{p}", lambda m: not m.startswith("oxbench.grid")) for p in BELOW_GRID),
    ],
)
def test_no_import_runs_back_up(package, allowed):
    assert offending(package, allowed) == []


def test_config_imports_nothing_above_it():
    below = ("oxbench.utils", "oxbench.tasks", "losses")
    ms = imports("oxbench")[str(Path("oxbench/config.py"))]
    assert [
        m for m in sorted(ms) if m.startswith(("oxbench", "losses", "analysis")) and not m.startswith(below)
    ] == []


def test_the_cli_is_the_only_user_of_analysis():
    assert any(m.startswith("analysis") for ms in imports("oxbench_cli").values() for m in ms)


def test_at_most_eight_modules_at_the_package_root():
    assert len(list((ROOT / "oxbench").glob("*.py"))) <= 8


def test_the_check_sees_an_import():
    assert "oxbench.text.generation" in imports("oxbench.eval")[str(Path("oxbench/eval/evaluate.py"))]


def test_the_runner_keeps_only_the_cells_life():
    """grid/runner.py (lock, plan, record, status, failures) leans on at most eight oxbench modules; what
    a cell does (load, prepare, train, evaluate) is grid/stages.py's."""
    runner = imports("oxbench.grid")[str(Path("oxbench/grid/runner.py"))]
    ours = sorted(m for m in runner if m.startswith("oxbench"))
    assert len(ours) <= 8, ours
    assert "oxbench.grid.stages" in ours


def test_cost_estimates_have_one_home():
    """Every cost estimate (memory per rank, GPU time, CPU time) is oxbench/engine/cost.py's: no other module
    of the package or the CLI writes the arithmetic (FLOPs per parameter and token, rates, bytes per
    parameter)."""
    arithmetic = re.compile(r"[0-9] \* params\b|\bparams \* [a-z_]*tokens|\d(\.\d+)?e1[0-9]\b|ADAM\[|BYTES\[")
    found = [
        f"{path.relative_to(ROOT)}:{i}"
        for package in ("oxbench", "oxbench_cli")
        for path in (ROOT / package).rglob("*.py")
        if path.name != "cost.py"
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if arithmetic.search(line)
    ]
    assert found == []
    assert arithmetic.search("flops = 6 * params * train_tokens")  # the check sees what it must refuse


#: the study analyses that lived in benchmarks/ until issue 39, item 2 (now ``python -m analysis.<name>``)
STUDY_ANALYSES = (
    "isocompute_confound",
    "isocompute_summary",
    "regularisers_collapse",
    "relabel_staleness",
    "skill_gain",
    "staleness_summary",
    "study_summary",
    "testbed_targets",
)
#: the functions of ``analysis`` that read run records: a script calling one is a study analysis
RECORD_READERS = {
    "load_runs",
    "load_failed",
    "load_problem_outcomes",
    "load_completions",
    "load_curves",
    "load_stability",
    "load_histories",
    "label_runs",
    "read_metrics",
    "_records",
}


def record_readers(path: Path) -> set[str]:
    """The record readers of ``analysis`` that ``path`` names (called, imported or reached as an attribute)."""
    nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
    names = {getattr(n, "id", None) or getattr(n, "attr", None) for n in nodes}
    names |= {a.name for n in nodes if isinstance(n, ast.ImportFrom) for a in n.names}
    return names & RECORD_READERS


def test_benchmarks_hold_benchmarks_only():
    """A benchmark times or measures something; a script that reads run records only is a study analysis
    and lives in ``analysis/``. None of the analyses moved out is back in ``benchmarks/``, and no
    benchmark that imports ``analysis`` reads records through it (a benchmark may use its statistics,
    e.g. to measure an interval's coverage on simulated data)."""
    bench = ROOT / "benchmarks"
    assert [n for n in STUDY_ANALYSES if (bench / f"{n}.py").exists()] == []
    assert [n for n in STUDY_ANALYSES if not (ROOT / "analysis" / f"{n}.py").is_file()] == []
    users = [f for f, ms in imports("benchmarks").items() if any(m.startswith("analysis") for m in ms)]
    assert [f"{f}: {sorted(record_readers(ROOT / f))}" for f in users if record_readers(ROOT / f)] == []


def test_the_benchmark_check_sees_a_record_reader():
    defined = {
        n.name
        for path in (ROOT / "analysis").rglob("*.py")
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(n, ast.FunctionDef)
    }
    assert RECORD_READERS <= defined  # every name is one of analysis's readers today
    assert record_readers(ROOT / "analysis" / "study_summary.py") == {
        "load_runs",
        "load_failed",
        "load_problem_outcomes",
    }
    assert record_readers(ROOT / "analysis" / "isocompute_summary.py") == {"load_curves"}
