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

import torch

from oxbench.config import RunConfig, zero_stage
from oxbench.data.selection import validation_rows
from oxbench.engine import distributed as D
from oxbench.engine.build import train
from oxbench.engine.checkpoint import Checkpointer, Preempted
from oxbench.engine.curves import Curve
from oxbench.engine.memory import check_run, gpu_peak_gib, oom_line, reset_gpu_peak
from oxbench.engine.model import policy_weights
from oxbench.engine.plan import RunPlan, resolve
from oxbench.eval.evaluate import eval_backend, evaluate
from oxbench.grid.prepare import base_metrics, measured_difficulty, on_main_first, prepare_data
from oxbench.grid.record import RunRecord, arm_label
from oxbench.grid.runs import REPLACED, MetricsLog, data_fingerprint, git_sha, packages, run_dir, write_record
from oxbench.models.loading import base_model_path, count_parameters, load_model
from oxbench.tasks.rewards import reward_function
from oxbench.tracking import Tracker
from oxbench.utils import content_hash, write_jsonl_atomic


def _curve(cfg: RunConfig, model, tok, base_key: dict, d: Path, tracker: Tracker | None) -> Curve | None:
    if cfg.eval.every is None:
        return None
    correct = measured_difficulty(cfg, model, tok, base_key, False) if cfg.data.subset is not None else None
    rows = validation_rows(cfg, correct)
    curve = Curve(cfg, model, tok, rows, d / "curve.jsonl", seed=cfg.seeds()["eval"])
    curve.tracker = tracker if D.is_main() else None
    return curve


def _tracker(cfg: RunConfig, d: Path) -> Tracker:
    """The run's live trackers: project = grid, run = "<arm> s<seed>", group = arm."""
    arm = arm_label(cfg.arm(), cfg.method)
    return Tracker.start(
        cfg.track,
        run_dir=d,
        project=cfg.grid,
        name=f"{arm} s{cfg.seed}",
        group=arm,
        config=cfg.model_dump(mode="json"),
    )


def _one_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}"


def run_cell(cfg: RunConfig, out: Path, *, verbose: bool = True) -> dict:
    """Train and evaluate one configuration; returns its record (``status`` finished, preempted or
    failed: a failure is recorded with its one-line cause, never swallowed)."""
    cell = _Cell(cfg, run_dir(out, cfg.grid, cfg.run_id()), _new_record(cfg), verbose)
    cell.record.rerun = (cell.dir / REPLACED).is_file()
    D.init_distributed(cfg.faults.collective_timeout_s)
    reset_gpu_peak()
    cell.record.world_size, cell.record.nodes = D.world_size(), int(os.environ.get("GROUP_WORLD_SIZE", 1))
    cell.record.zero_stage = zero_stage(cfg)
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


def _new_record(cfg: RunConfig) -> RunRecord:
    return RunRecord(
        run_id=cfg.run_id(),
        grid=cfg.grid,
        status="running",
        scale=cfg.model.name,
        method=cfg.method,
        seed=cfg.seed,
        lora=cfg.model.lora.enabled,
        arm=cfg.arm(),
        seeds=cfg.seeds(),
        config=cfg.model_dump(),
        config_hash=content_hash(cfg.identity()),
        git_sha=git_sha(),
        packages=packages(),
        data_files=data_fingerprint(cfg.task.model_dump()) or None,
    )


@dataclass
class _Cell:
    """One cell's run: its record, filled in as it trains and evaluates, and its tracker."""

    cfg: RunConfig
    dir: Path
    record: RunRecord
    verbose: bool
    tracker: Tracker = field(default_factory=Tracker)  # none until the run starts training
    t0: float = field(default_factory=time.time)

    def run(self, plan: RunPlan) -> None:
        cfg, rec, seeds = self.cfg, self.record, plan.seeds
        spec = plan.spec
        rec.paradigm, rec.data_kind, rec.loss_version = spec.paradigm, plan.caps.data, spec.version
        rec.loss_hparams, rec.loss_paper = plan.hparams, spec.paper
        base_path, base_key = on_main_first(
            lambda: base_model_path(cfg, verbose=self.verbose and D.is_main())
        )
        model, tok = load_model(base_path, cfg, init_seed=seeds["init"])
        rec.scale_params = count_parameters(model)
        check_run(plan, model, run=plan.run_id)  # one line if it cannot fit
        t_data = time.time()
        rows, rec.data = prepare_data(plan, model, tok, base_key, verbose=self.verbose)
        t_train = time.time()
        engine, res = self._train(plan, model, tok, rows, base_key)
        rec.resumed_from_step, rec.data_order_sha = res.resumed_from, res.data_order_sha
        rec.optimizer_steps, rec.loss_state = res.optimizer_steps, res.loss_state
        rec.compute, rec.collapse = res.compute or None, res.collapse
        rec.paths = {**res.paths, "eval.backend": eval_backend(cfg, model)}
        t_eval = time.time()
        state = policy_weights(engine)
        if D.is_main():
            self._evaluate(state, base_path, base_key, tok, res)
        rec.timing = {
            "data_s": round(t_train - t_data, 1),
            "train_s": round(t_eval - t_train, 1),
            "eval_s": round(time.time() - t_eval, 1),
            "total_s": round(time.time() - self.t0, 1),
        }
        rec.status = "finished"

    def _train(self, plan: RunPlan, model, tok, rows: list[dict], base_key: dict):
        cfg = self.cfg
        torch.manual_seed(plan.seeds["init"])
        if D.is_main():
            self.tracker = _tracker(cfg, self.dir)
        log = MetricsLog(self.dir / "metrics.jsonl", self.tracker) if D.is_main() else None
        ckpt = Checkpointer.from_config(self.dir, cfg)
        if plan.caps.online:
            curve = _curve(cfg, model, tok, base_key, self.dir, self.tracker)
            reward = reward_function(cfg.online.reward_grader)
            return train(plan, model, tok, rows, logger=log, ckpt=ckpt, reward_fn=reward, curve=curve)
        ref_key = {**base_key, "max_len": cfg.data.max_len, "lora": cfg.model.lora.hash_view()}
        return train(plan, model, tok, rows, logger=log, ckpt=ckpt, ref_key=ref_key)

    def _evaluate(self, state: dict, base_path: str, base_key: dict, tok, res) -> None:
        """Rank 0: the trained weights in a fresh copy of the base, evaluated; the model saved if asked."""
        cfg, rec = self.cfg, self.record
        eval_model, _ = load_model(base_path, cfg, init_seed=cfg.seeds()["init"])
        eval_model.load_state_dict(state)
        if cfg.train.save_model:
            eval_model.save_pretrained(self.dir / "model")
            tok.save_pretrained(self.dir / "model")
        metrics, outcomes = evaluate(
            eval_model, tok, cfg, seed=cfg.seeds()["eval"], label=f"{rec.run_id}: eval"
        )
        metrics["final_loss"] = (res.history[-1] if res.history else {}).get("loss")
        metrics.update(base_metrics(cfg, base_path, base_key))
        rec.metrics = metrics
        write_jsonl_atomic(self.dir / "eval.jsonl", outcomes)
        self.tracker.log("eval", metrics, res.optimizer_steps)

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
            self.tracker.close()
            rec.tracking = self.tracker.status or None
            self._write_record()
            if rec.status == "finished":
                Checkpointer.from_config(self.dir, self.cfg).finish()
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
