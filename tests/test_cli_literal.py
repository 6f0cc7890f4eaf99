"""Every message the CLI prints is literal text (issue 28): an error holding torch's ``[rank0]:``
prefix, a bracketed path, markup-like tags or control characters neither restyles the line nor
ends the grid (a cell error once raised rich's MarkupError in the progress line and left the
remaining cells unrun)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

import oxbench_cli as cli

NASTY = "[rank0]: [/__w/pytorch/pair.cc:537] Connection reset [red]by[/red] [/bold] peer \x1b[31mX\r\x07"
SHOWN = "[rank0]: [/__w/pytorch/pair.cc:537] Connection reset [red]by[/red] [/bold] peer \\x1b[31mX\\x0d\\x07"

PLUGIN = f"""
from losses import LossInputs, LossOutput, LossSpec


def bracket_loss(inputs: LossInputs) -> LossOutput:
    raise RuntimeError({NASTY!r})


spec = LossSpec(name="bracket_error", fn=bracket_loss, paradigm="sft", data="sft", needs_reference=False,
                paper="none", description="raises an error full of brackets (tests only)")
"""


def _render(*renderables) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=400, markup=False, highlight=False, color_system=None)
    for r in renderables:
        console.print(r)
    return buf.getvalue()


def test_literal_shows_brackets_and_escapes_control_characters():
    assert cli.literal(NASTY) == SHOWN
    assert SHOWN in _render(cli.tagged("failed", "red", NASTY))


def test_the_consoles_take_no_markup():
    assert not cli.out_console._markup and not cli.err_console._markup


def test_summary_and_status_tables_print_record_text_as_is(tmp_path):
    rec = {"run_id": "x-[bold]-s0", "scale": "[red]tiny[/red]", "method": "[/x]", "status": "failed",
           "error": NASTY, "arm": None, "metrics": None}  # fmt: skip
    text = _render(cli.summary_table([rec], "[title] [/oops]"))
    assert "[red]tiny[/red]" in text and "[/x]" in text and "[title] [/oops]" in text


@pytest.mark.slow
def test_a_cell_error_full_of_brackets_leaves_the_grid_running(tmp_path, micro_model_dir):
    """Two cells: the first raises an error text full of brackets, tags and control characters; the
    second still runs and finishes; the progress line, the failure line and ``oxbench status`` print
    the text as it is (control characters escaped)."""
    (tmp_path / "bracket_plugin.py").write_text(PLUGIN)
    grid = {
        "name": "lit",
        "base": {
            "model": {"name": micro_model_dir},
            "data": {"n_train": 8, "max_new_tokens": 8},
            "train": {"batch_size": 4, "max_steps": 1, "lr": 1e-3},
            "eval": {"n_test": 4, "n_ood": 4, "k": 0, "max_new_tokens": 8},
        },
        "axes": {"method": ["bracket_error", "sft"]},
    }
    path, out = tmp_path / "g.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(grid))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(path), "--out", str(out)]
    proc = subprocess.run([*cmd, "--plugin", "bracket_plugin"], env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    recs = {p.parent.name: json.loads(p.read_text()) for p in Path(out).rglob("run.json")}
    statuses = sorted(r["status"] for r in recs.values())
    assert statuses == ["failed", "finished"], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "MarkupError" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 1
    assert proc.stderr.count("[/__w/pytorch/pair.cc:537]") >= 2  # the progress line and the failure line
    assert "\x1b" not in proc.stderr and "\\x1b[31mX" in proc.stderr
    status = subprocess.run([sys.executable, "-m", "oxbench_cli", "status", str(out / "lit")],
                            capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert "Traceback" not in status.stderr and "1 failed" in status.stdout
