"""Run one grid cell end to end: base model -> shared data -> train -> evaluate -> ``run.json``.

Works in a single process or under ``torchrun``/``deepspeed`` (every rank calls
:func:`run_cell`; rank 0 pre-trains, generates the shared data, evaluates and writes).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from oxbench.config import RunConfig
from oxbench.engine import distributed as D
from oxbench.engine.checkpoint import Preempted
from oxbench.engine.memory import gpu_peak_gib, oom_line, reset_gpu_peak
from oxbench.engine.plan import RunPlan, resolve
from oxbench.grid.record import RunRecord
from oxbench.grid.runs import REPLACED, new_record, run_dir, write_record
from oxbench.grid.stages import CellWork


def _one_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}"


def run_cell(cfg: RunConfig, out: Path, *, verbose: bool = True) -> dict:
    """Train and evaluate one configuration; returns its record (``status`` finished, preempted or
    failed: a failure is recorded with its one-line cause, never swallowed)."""
    D.init_distributed(cfg.faults.collective_timeout_s)
    reset_gpu_peak()
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", 1))
    record = new_record(cfg, world_size=D.world_size(), nodes=nodes)
    cell = _Cell(cfg, CellWork(cfg, run_dir(out, cfg.grid, cfg.run_id()), verbose), record)
    cell.record.rerun = (cell.dir / REPLACED).is_file()
    try:
        try:
            if D.is_main():
                write_record(cell.dir, cell.record)  # OSError (a full disk): failed, the file named
            cell.run(resolve(cfg, D.world_size()))
        except Preempted:
            raise
        except Exception as exc:  # recorded, never swallowed: the caller sees status=failed
            cell.end("failed", _with_peer_cause(oom_line(exc, cfg.run_id(), cfg) or _one_line(exc)))
            cell.record.traceback = traceback.format_exc(limit=20)
    except Preempted as exc:  # a signal, also one that lands while a failure is being recorded
        _stopped(cell, exc)
    return cell.close()


def _stopped(cell: _Cell, exc: Preempted) -> None:
    """A signal stopped the cell. When a peer rank failed first (its error in the store), the signal
    is torchrun stopping the world because of it: the cell failed, with that rank's error as its cause.
    Otherwise it was pre-empted: the latest checkpoint (if any) holds the run; a rerun resumes it."""
    if cell.record.status == "failed":  # the signal came while this rank's own failure was recorded
        return
    cause = D.peer_failure()
    if cause is not None and not cause.startswith(f"rank {D.rank()}:"):
        cell.end("failed", f"{cause} (then rank {D.rank()} was stopped: {exc})")
    else:
        cell.end("preempted", f"Preempted: {exc}")


@dataclass
class _Cell:
    """One cell's life: its record, filled in as its stages load, train and evaluate."""

    cfg: RunConfig
    work: CellWork
    record: RunRecord
    t0: float = field(default_factory=time.time)

    @property
    def dir(self) -> Path:
        return self.work.dir

    def run(self, plan: RunPlan) -> None:
        rec, spec, work = self.record, plan.spec, self.work
        rec.paradigm, rec.data_kind, rec.loss_version = spec.paradigm, plan.caps.data, spec.version
        rec.loss_hparams, rec.loss_paper = plan.hparams, spec.paper
        model, tok = work.load(plan, rec)
        t_data = time.time()
        rows = work.rows(plan, model, tok, rec)
        t_train = time.time()
        engine, res = work.train(plan, model, tok, rows)
        rec.resumed_from_step, rec.data_order_sha = res.resumed_from, res.data_order_sha
        rec.optimizer_steps, rec.loss_state = res.optimizer_steps, res.loss_state
        rec.compute, rec.collapse = res.compute or None, res.collapse
        t_eval = time.time()
        work.evaluate(engine, model, tok, res, rec)
        rec.timing = {
            "data_s": round(t_train - t_data, 1),
            "train_s": round(t_eval - t_train, 1),
            "eval_s": round(time.time() - t_eval, 1),
            "total_s": round(time.time() - self.t0, 1),
        }
        rec.status = "finished"

    def end(self, status: str, error: str) -> None:
        self.record.status, self.record.error = status, error
        self.record.timing = {"total_s": round(time.time() - self.t0, 1)}

    def close(self) -> dict:
        """Write the record (rank 0), drop a finished cell's checkpoints, and leave: a failed rank of
        several leaves its process at once (its peers may never reach a barrier)."""
        rec = self.record
        if (
            peak := gpu_peak_gib()
        ) is not None:  # this process's peak on its GPU (vLLM's server: not counted)
            rec.timing = {**(rec.timing or {}), "peak_gpu_gib": peak}
        if D.is_main():
            self.work.close_tracker(rec)
            self._write_record()
            if rec.status == "finished":
                self.work.drop_checkpoints()
        if rec.status == "failed" and D.world_size() > 1:
            _leave_the_world()
        D.barrier()
        return rec.model_dump(mode="json")

    def _write_record(self) -> None:
        """Rank 0: write the record. One that cannot be written (a full disk) never says finished: the
        cell fails with a line naming the file (kept in the record returned), and that record is
        written if it can be (a rerun runs the cell again, from its checkpoints)."""
        rec = self.record
        try:
            write_record(self.dir, rec)
        except OSError as exc:
            why = f"its record could not be written: {_one_line(exc)}"
            if rec.status != "failed" or not rec.error:
                rec.error = why
            elif _one_line(exc) not in rec.error:  # the cell failed of something else first
                rec.error = f"{rec.error} (then {why})"
            rec.status = "failed"
            with contextlib.suppress(OSError):
                write_record(self.dir, rec)


def _with_peer_cause(error: str) -> str:
    """A rank's error in a world of several: when another rank failed first (its error published in the
    store), that rank's error is the cause and this one's (a reset connection, a timed-out collective)
    follows it; otherwise this rank's error is published for its peers."""
    if D.world_size() <= 1:
        return error
    cause = D.peer_failure()
    if cause is not None and not cause.startswith(f"rank {D.rank()}:"):
        return f"{cause} (then rank {D.rank()}: {error})"
    D.publish_failure(error)
    return f"rank {D.rank()}: {error}"


def _leave_the_world() -> None:
    """A failed rank of a multi-rank cell ends its process at once, after its record (rank 0) is
    written: its peers, blocked in a collective or about to enter one, see the connection close and
    fail within seconds, instead of waiting at a barrier this rank would never pass (or it at theirs)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)
