"""``python -m oxbench.cell CONFIG.json OUT``: run one cell (what every executor launches).

``python -m oxbench.cell --prepare CONFIG.json``: only pre-train its base model and make its
self-play data (the grid does this once per shared key before running cells).

Holds an exclusive lock on the run directory, so a cell never runs twice at once; exits
non-zero if the run failed.
"""

from __future__ import annotations

import fcntl
import json
import sys
from pathlib import Path

from oxbench.config import RunConfig
from oxbench.engine import distributed as D
from oxbench.plugins import load_env_plugins
from oxbench.runner import run_cell
from oxbench.runs import run_dir


def main(argv: list[str]) -> int:
    load_env_plugins()
    if argv[0] == "--prepare":
        from oxbench.runner import prepare_shared

        prepare_shared(RunConfig(**json.loads(Path(argv[1]).read_text())), verbose=True)
        return 0
    cfg = RunConfig(**json.loads(Path(argv[0]).read_text()))
    out = Path(argv[1])
    d = run_dir(out, cfg.grid, cfg.run_id())
    d.mkdir(parents=True, exist_ok=True)
    lock = open(d / ".lock", "w")
    if D.rank_from_env() == 0:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"run {cfg.run_id()} is already running elsewhere", file=sys.stderr)
            return 3
    rec = run_cell(cfg, out, verbose=False)
    D.shutdown()
    if rec["status"] != "finished":
        print(f"run {rec['run_id']} failed: {rec['error']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
