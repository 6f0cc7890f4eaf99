"""``python -m oxbench.grid.worker``: a warm worker that imports torch, transformers and DeepSpeed once and
then runs cell after cell (the local pool's default for single-process cells).

Protocol: one JSON job per line on stdin, ``{"config": CONFIG.json, "out": OUT, "log": LOG}``; one JSON
line back per job on the original stdout, ``{"status": ..., "rss_mb": ...}``. While a cell runs, file
descriptors 1 and 2 point at its ``LOG`` (its ``train.log``, C-level output included), exactly as a
cell process would write it. A job ``{"prepare": CONFIG.json, "log": LOG, "threads": N}`` makes what a
grid's cells share (what ``python -m oxbench.grid.cell --prepare`` makes) on ``N`` threads, its
progress lines in ``LOG``; it answers ``{"status": "prepared"}`` or ``"failed"`` with the last line. A cell holds the same exclusive lock on its run directory as
``python -m oxbench.grid.cell``. The worker keeps its process group (world size 1) between cells.

Isolation is the pool's job (:class:`oxbench.grid.executors.WarmWorker`): a worker that dies takes only its
current cell with it (recorded as failed) and is replaced; one whose memory grows is retired.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from pathlib import Path


def _rss_mb() -> float:
    """This process's current resident memory (MiB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def run_job(job: dict) -> dict:
    from oxbench.config import RunConfig
    from oxbench.grid.cell import run_locked

    rec = run_locked(RunConfig(**json.loads(Path(job["config"]).read_text())), Path(job["out"]))
    if rec is None:
        return {"status": "locked"}
    return {"status": rec["status"], "error": rec.get("error")}  # the error, for a record the disk refused


def run_prepare(job: dict) -> dict:
    """The shared preparation on ``job["threads"]`` threads (its share of the cores, as the process it
    replaces had); a failure leaves its traceback in the log and answers with its last line."""
    import torch

    from oxbench.grid.cell import prepare

    threads = torch.get_num_threads()
    torch.set_num_threads(int(job["threads"]))
    try:
        prepare(Path(job["prepare"]))
        return {"status": "prepared"}
    except Exception as exc:  # the grid goes on: the cells fail with the full error in their records
        traceback.print_exc()
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}".splitlines()[-1]}
    finally:
        torch.set_num_threads(threads)


def _redirected(log: str, job: dict) -> dict:
    """Run ``job`` with fds 1 and 2 sent to ``log``; restore them after."""
    saved = os.dup(1), os.dup(2)
    sys.stdout.flush(), sys.stderr.flush()
    with open(log, "a") as f:  # the cell truncates it once it holds the run's lock (oxbench.grid.cell)
        os.dup2(f.fileno(), 1), os.dup2(f.fileno(), 2)
        try:
            return run_prepare(job) if "prepare" in job else run_job(job)
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])


def main() -> int:
    # the pool reads replies on the original stdout and nothing else: from here on, fd 1 is stderr,
    # so what libraries print at import (DeepSpeed's accelerator warning) never reaches the pool
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    from oxbench.engine import distributed as D
    from oxbench.grid.runner import run_cell  # noqa: F401  (import the engine once, before the first job)
    from oxbench.plugins import load_env_plugins

    try:
        load_env_plugins()
        broken = None
    except Exception as exc:  # every job fails with the reason (this process's stderr is not read)
        broken = " ".join(f"in the worker: {exc}".split())[:500]
    D.init_distributed()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        result = {"status": "failed", "error": broken} if broken else _redirected(job["log"], job)
        reply.write(json.dumps({**result, "rss_mb": round(_rss_mb(), 1)}) + "\n")
    D.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
