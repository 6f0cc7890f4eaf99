"""``python -m oxbench.grid.cell CONFIG.json OUT``: run one cell (what every executor launches).

``python -m oxbench.grid.cell --prepare CONFIG.json``: only pre-train its base model and make its
self-play data (the grid does this once per shared key before running cells).

Holds an exclusive lock on the run directory, so a cell never runs twice at once; exits
non-zero if the run failed or was pre-empted (SIGTERM, SIGUSR1, Ctrl-C: it checkpoints first, and
its record says ``preempted``).
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path

from oxbench.config import RunConfig
from oxbench.engine import distributed as D
from oxbench.engine.checkpoint import signals_handled
from oxbench.grid.prepare import prepare_shared
from oxbench.grid.runner import run_cell
from oxbench.grid.runs import LOCKED_EXIT, read_record, run_dir, run_lock, stale_data
from oxbench.plugins import load_env_plugins


def main(argv: list[str]) -> int:
    load_env_plugins()
    if argv[0] == "--prepare":
        prepare(Path(argv[1]))
        return 0
    rec = run_locked(RunConfig(**json.loads(Path(argv[0]).read_text())), Path(argv[1]))
    D.shutdown()
    if rec is None:
        return LOCKED_EXIT
    return 0 if rec["status"] == "finished" else 1


def prepare(cfg_file: Path) -> None:
    """The shared work of the cell whose config is ``cfg_file``, with its progress lines (``--prepare``,
    and the warm worker's ``prepare`` job)."""
    prepare_shared(RunConfig(**json.loads(Path(cfg_file).read_text())), verbose=True)


def run_locked(cfg: RunConfig, out: Path, *, say_failure: bool = True) -> dict | None:
    """Run the cell holding the exclusive lock on its run directory (rank 0 takes it,
    :func:`oxbench.grid.runs.run_lock`); None if another process holds it. A cell finished by then is
    not trained again: its record is returned. A failure is printed (``say_failure``), for the cell's
    ``train.log``."""
    d = run_dir(out, cfg.grid, cfg.run_id())
    d.mkdir(parents=True, exist_ok=True)
    with run_lock(d) if D.rank_from_env() == 0 else nullcontext(True) as held:
        if not held:
            print(f"run {cfg.run_id()} is already running elsewhere", file=sys.stderr)
            return None
        if D.rank_from_env() == 0:
            done = read_record(d)
            if done is not None and done["status"] == "finished" and stale_data(done) is None:
                return done  # another process finished it since this one planned: never train it twice
            (d / "train.log").open("w").close()  # this run's log starts afresh (opened for append)
        with signals_handled():  # SIGTERM, SIGUSR1, Ctrl-C: checkpoint, record "preempted", exit
            rec = run_cell(cfg, out, verbose=False)
    if rec["status"] != "finished" and say_failure:
        print(f"run {rec['run_id']} {rec['status']}: {rec['error']}", file=sys.stderr)
    return rec


if __name__ == "__main__":
    D.exit_process(main(sys.argv[1:]))
