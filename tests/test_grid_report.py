"""The main job ends with its report (issue 26): a grid run writes report.html beside its records and
prints its path and how to open it; so does ``oxbench status``. ``--no-report`` keeps the options only.

The suite's other grids run with ``OXBENCH_REPORT=0`` (tests/conftest.py): a report costs each grid
about 2 s of CPU, and only the tests of the report read it. This one runs with the default."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from test_cli import grid

pytestmark = pytest.mark.slow


def test_a_grid_run_and_its_status_end_with_the_report(tmp_path, micro_model_dir):
    g, out = tmp_path / "g.yaml", tmp_path / "out"
    spec = grid(micro_model_dir, axes={"method": ["sft"], "seed": [0]})
    g.write_text(yaml.safe_dump({**spec, "report": {"metric": "accuracy_flexible", "baseline": "sft"}}))
    cmd = [sys.executable, "-m", "oxbench_cli"]
    env = {k: v for k, v in os.environ.items() if k != "OXBENCH_REPORT"}  # the default: a report
    run = subprocess.run([*cmd, "run", "--grid", str(g), "--out", str(out)], capture_output=True, text=True,
                         timeout=600, env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    report = out / "g" / "report.html"
    assert report.is_file() and "<html" in report.read_text()[:500].lower()
    assert f"report: {report}" in run.stdout and "python -m webbrowser" in run.stdout, run.stdout[-2000:]
    assert "accuracy_flexible (%)" in report.read_text()  # the grid's report.metric, ranked
    saved = json.loads((out / "g" / "report.json").read_text())  # kept for status and report
    assert saved == {"metric": "accuracy_flexible", "baseline": "sft"}
    report.unlink()
    again = subprocess.run([*cmd, "run", "--grid", str(g), "--out", str(out), "--no-report"],
                           capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert again.returncode == 0 and not report.exists(), again.stderr[-2000:]
    assert f"report: not written (--no-report); write it with: oxbench report {out / 'g'}" in again.stdout
    assert json.loads((out / "g" / "report.json").read_text()) == saved
    status = subprocess.run([*cmd, "status", str(out / "g")], capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stderr
    assert report.is_file() and f"report: {out / 'g'}/report.html" in status.stdout, status.stdout[-2000:]
    assert "accuracy_flexible (%)" in report.read_text()
