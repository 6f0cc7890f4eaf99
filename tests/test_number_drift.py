"""Numbers in the docs and results/README.md come from committed scripts, and stay what those scripts
say (issue 40, item 8): each quoted table is regenerated here, from the committed records or the
committed benchmark results, by the script that made it, and must equal the page, character for
character. A quoted number that drifts from its script fails here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


@pytest.mark.parametrize("seeds", [(3, 5), (2,)])
def test_the_two_way_validation_tables_are_the_benchmarks(seeds):
    rows = json.loads((ROOT / "benchmarks/results/twoway_coverage.json").read_text())["rows"]
    assert _benchmark("twoway_coverage").markdown(rows, seeds) in _page("docs/twoway_validation.md")


def test_the_sample_stream_table_is_the_benchmarks():
    rows = json.loads((ROOT / "benchmarks/results/sample_stream.json").read_text())["rows"]
    assert _benchmark("sample_stream").markdown(rows) in _page("docs/measurements.md")


def _regenerated(module: str, tmp_path: Path, *args: str) -> str:
    """The README ``python -m analysis.<module>`` writes from the committed records, into ``tmp_path``."""
    cmd = [sys.executable, "-m", f"analysis.{module}", *args, "--out", str(tmp_path)]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return (tmp_path / "README.md").read_text(encoding="utf-8")


def test_the_staleness_model_is_what_its_records_give(tmp_path):
    committed = ROOT / "results/staleness_model/README.md"
    if not committed.exists():
        pytest.fail("results/staleness_model/README.md: run python -m analysis.staleness_model results")
    assert _regenerated("staleness_model", tmp_path, "results") == committed.read_text(encoding="utf-8")
