"""A damaged results tree (issue 37): ``status`` and ``report`` read only regular files inside the tree,
bounded in size and nesting, skip and count the bad lines of a ``metrics.jsonl``, name every malformed
record in one line, and still answer for the rest: no hang on a named pipe, no read of ``/dev/zero``, no
RecursionError, no traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

QUICKSTART = Path(__file__).parent.parent / "results" / "quickstart"
GOOD = ["tiny-s-sft-s0-5ad072e581", "tiny-s-sft-s1-bf8448ee77", "tiny-s-dpo-s0-71ac3f9414"]


def _copy_run(src: str, dest: Path, **record) -> Path:
    d = dest / src
    shutil.copytree(QUICKSTART / src, d)
    if record:
        rec = json.loads((d / "run.json").read_text())
        (d / "run.json").write_text(json.dumps(rec | record))
    return d


def damaged_tree(root: Path) -> dict[str, str]:
    """The results tree, and for each damaged cell the words its one line must carry."""
    g = root / "quickstart"
    g.mkdir(parents=True)
    _copy_run(GOOD[0], g)
    for name in ("fifo", "zero", "deep", "null-accuracy", "string-accuracy"):
        (g / name).mkdir()
    os.mkfifo(g / "fifo" / "run.json")
    os.symlink("/dev/zero", g / "zero" / "run.json")
    (g / "deep" / "run.json").write_text("[" * 200_000 + "]" * 200_000)
    rec = json.loads((g / GOOD[0] / "run.json").read_text())
    for name, acc in (("null-accuracy", None), ("string-accuracy", "high")):
        bad = rec | {"run_id": name, "metrics": rec["metrics"] | {"accuracy": acc}}
        (g / name / "run.json").write_text(json.dumps(bad))
    running = {"status": "running"}
    for name, tail in (("cut", b'{"step": 9, "lo'), ("nul", b"\x00" * 64), ("latin", b'{"step": "\xe9"}\n')):
        d = _copy_run(GOOD[1] if name == "cut" else GOOD[2], g, run_id=name, **running)
        d.rename(g / name)
        with open(g / name / "metrics.jsonl", "ab") as f:
            f.write(tail)
    return {
        "fifo": "named pipe",
        "zero": "link out of the tree",
        "deep": "nested deeper",
        "null-accuracy": "None, not a number",
        "string-accuracy": "'high', not a number",
    }


def _oxbench(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "oxbench_cli", *args], capture_output=True, text=True, timeout=120
    )
    return proc, time.monotonic() - t0


@pytest.mark.skipif(not QUICKSTART.is_dir(), reason="the committed quickstart records are not here")
def test_status_and_report_answer_for_a_damaged_tree(tmp_path):
    words = damaged_tree(tmp_path)
    g = tmp_path / "quickstart"
    status, _ = _oxbench("status", str(g))
    out = status.stdout + status.stderr
    assert status.returncode == 0 and "Traceback" not in out, out
    flat = re.sub(r"[\s\u2500-\u257f]", "", out)  # the table may fold long cells over lines: compare unfolded
    for name, why in words.items():
        assert f"{name}/run.json" in flat and why.replace(" ", "") in flat, (name, out)
    assert "1 finished" in out and "5 corrupt" in out and "3 killed" in out, out
    assert flat.count("badline(s)ofmetrics.jsonlskipped") == 3, out
    report, _ = _oxbench("report", str(g))
    out = report.stdout + report.stderr
    assert report.returncode == 0 and "Traceback" not in out, out
    assert (g / "report.html").is_file()
    for name in words:
        assert f"{name}/run.json" in out, (name, out)
