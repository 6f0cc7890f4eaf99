"""Every committed study still plans as finished: ``oxbench run --grid recipes/<study>.yaml --out results
--plan`` finds each cell's record under ``results/<study>/<run_id>/`` (a tuned grid's: its tuning cells
under ``results/<study>_tune/`` and its final cells at the picks its tuning records give), so its run_ids
are the ones the records were written under. Planned as the CLI plans, through the loss registry's index (no torch): the
index must give the run_ids the live registry gave when the studies ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# each recipe with a committed results/<name>/: its cell count and the cells whose record is not
# finished, by the CLI's own status check; and whether planning imported torch
PROBE = """
import json, sys
from pathlib import Path
from oxbench.grid.spec import expand, load_grid, tune_plan, tuned_cells, tuning_cells
from oxbench_cli import _status
out = {}
for path in sorted(Path("recipes").glob("*.yaml")):
    grid = load_grid(path)
    if (Path("results") / grid.name).is_dir():
        if grid.tune is None:
            cells = expand(grid, str(path))
        else:  # a tuned grid, as the CLI plans it: its tuning cells, then its final cells at their picks
            tp = tune_plan(grid, str(path))
            final, state, waiting = tuned_cells(grid, Path("results"), str(path), tp)
            cells = tuning_cells(grid, str(path), tp) + final + waiting
        out[grid.name] = [len(cells), [c.run_id() for c in cells if _status(c, Path("results")) != "finished"]]
print(json.dumps({"studies": out, "torch": "torch" in sys.modules}))
"""


def test_every_committed_study_plans_as_finished_without_torch():
    env = {k: v for k, v in os.environ.items() if k != "OXBENCH_PLUGINS"}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    studies = got["studies"]
    assert len(studies) >= 14 and sum(n for n, _ in studies.values()) > 400, studies.keys()
    assert {name: todo for name, (_, todo) in studies.items() if todo} == {}
    assert got["torch"] is False, "planning imported torch: is losses/index.json stale? (python -m losses)"
