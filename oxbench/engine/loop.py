"""The one training loop: every method runs here, on DeepSpeed, and differs only in its loss.

A source (:mod:`oxbench.engine.sources`: a dataset, or rollouts that are synchronous, delayed or
asynchronous) yields batches; :meth:`Learner.step <oxbench.engine.learner.Learner.step>` takes one
optimiser step per pass over each. Between them the loop keeps the run's books, in this order:

step → ledger (rollouts, tokens, seconds) → metrics row every ``train.log_every`` steps → collapse
check (``online.collapse``) → checkpoint (``checkpoint.every``).

Learning-curve points (``curve``, a :class:`~oxbench.engine.curves.Curve`) are taken before each
batch is drawn and at the end; their time counts in neither gen_seconds nor train_seconds. One
checkpoint holds the state of every component: the engine (model, optimiser, schedule), the RNGs, the
loop's (position, history, ledger, collapse), the learner's (loss state, previous gradient, live
reference), the source's and the curve's. A run resumes from it bit for bit.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch

from oxbench.engine import checkpoint as C
from oxbench.engine import distributed as D
from oxbench.engine.learner import Learner, NonFiniteLoss
from oxbench.engine.model import policy_weights
from oxbench.engine.sources import Batch, Source
from oxbench.utils import progress

LEDGER = ("rollouts", "generated_tokens", "trained_tokens", "gen_seconds", "train_seconds")


@dataclass
class TrainResult:
    optimizer_steps: int = 0
    data_order_sha: str = ""
    history: list[dict] = field(default_factory=list)
    data_stats: dict = field(default_factory=dict)
    seconds: float = 0.0
    loss_state: dict | None = None  # the loss's carried state at the end (stateful specs)
    compute: dict = field(default_factory=dict)  # the compute ledger's totals (LEDGER keys)
    collapse: dict | None = None  # online.collapse: {step, reason} of the first collapse seen
    resumed_from: int | None = None  # the checkpoint's step this run resumed from
    paths: dict = field(default_factory=dict)  # online: the fast paths taken, after the method's fallbacks


def add_to_ledger(ledger: dict, **amounts) -> dict:
    """Add to the cumulative ledger; the ``cum_*`` view of it, for a metrics row."""
    for k, v in amounts.items():
        ledger[k] = ledger.get(k, 0) + v
    return {f"cum_{k}": ledger.get(k, 0) for k in LEDGER}


def _mean_metrics(items: list[dict]) -> dict:
    keys = {k for d in items for k in d}
    return {k: sum(d[k] for d in items if k in d) / sum(1 for d in items if k in d) for k in sorted(keys)}


@dataclass
class Loop:
    """One run's loop over its source's batches (module docstring). ``detector`` (a
    :class:`~oxbench.engine.collapse.CollapseDetector`, None: detection off) watches the batches'
    rewards and the curve's verified accuracy; ``ckpt`` (None: no checkpoints) saves and resumes."""

    learner: Learner
    source: Source
    run: str
    log_every: int = 1
    logger: object | None = None
    detector: object | None = None
    curve: object | None = None
    ckpt: C.Checkpointer | None = None
    res: TrainResult = field(default_factory=TrainResult)
    version: int = 0  # optimiser steps taken
    next_round: int = 0
    start: float = field(default_factory=time.time)  # when the run began (its ``seconds`` count from here)

    def __post_init__(self):
        self.engine = self.learner.engine

    def weights(self) -> dict:
        return policy_weights(self.engine)

    def run_all(self) -> TrainResult:
        """Resume from the latest checkpoint if there is one, then train to the source's end."""
        res = self.res
        self.resume()
        self.engine.train()
        try:
            with C.checkpointable() if self.ckpt is not None else contextlib.nullcontext():
                self._batches()
            if self.curve is not None:
                self.curve.maybe(res.compute, self.weights, step=self.version, last=True)
        finally:
            self.source.close()  # an asynchronous producer process, a vLLM server
        res.data_order_sha = self.source.order_sha()
        res.optimizer_steps, res.seconds = self.version, time.time() - self.start
        res.loss_state = self.learner.state.as_dict()
        return res

    def _batches(self) -> None:
        batches = self.source.batches(self.next_round)
        rounds = range(self.next_round, self.source.rounds)
        for rnd in progress(rounds, f"{self.run}: rounds", enabled=D.is_main()):
            if (
                self.curve is not None
            ):  # a point before the round is drawn (0 rollouts, then every eval.every)
                row = self.curve.maybe(self.res.compute, self.weights, step=self.version)
                if self._collapsed(verified=(row or {}).get("accuracy_verified")):
                    break
            batch = next(batches)
            add_to_ledger(self.res.compute, **batch.compute)
            self._learn(batch)
            if (
                self.detector is not None
                and batch.rewards is not None
                and (  # off: no per-round gather
                    (self.res.collapse and self.detector.stop)
                    or self._collapsed(reward=_mean_over_ranks(batch.rewards))
                )
            ):
                break
            self.next_round = rnd + 1
            if self.ckpt is not None:
                self.ckpt.boundary(self.version, self.snapshot, last=batch.last)

    def _learn(self, batch: Batch) -> None:
        """``batch.passes`` optimiser steps on the batch, each booked and logged; a non-finite loss is a
        collapse when detection is on."""
        started = time.time()
        for _ in range(batch.passes):
            try:
                metrics, gn = self.learner.step(batch, self.version, self.version / self.source.total_steps)
            except NonFiniteLoss as exc:
                if self.detector is None:
                    raise
                self.res.collapse = self.res.collapse or {
                    "step": self.version,
                    "reason": str(exc).split(": ", 1)[-1],
                }
                return
            self.version += 1
            self.source.after_step(self.version)
            ledger = {"trained_tokens": batch.trained_tokens, "train_seconds": time.time() - started}
            cumulative = add_to_ledger(self.res.compute, **ledger)
            started = time.time()
            if self.version % self.log_every == 0 or batch.last:
                self._log(metrics, gn, {**batch.fields(time.time()), **ledger, **cumulative})

    def _log(self, micro_metrics: list[dict], grad_norm: float | None, fields: dict) -> None:
        mean = _mean_metrics(micro_metrics)
        if D.world_size() > 1:  # the step's, over every rank's micro-batches: the same at any world size
            mean = _mean_metrics(D.all_gather_objects(mean))
        row = {
            "step": self.version,
            "lr": self.engine.get_lr()[0],
            **mean,
            **fields,
            **self.learner.diagnostics,
            **self.source.stats,
            "elapsed": time.time() - self.start,
        }
        gn = self.engine.get_global_grad_norm()
        gn = grad_norm if gn is None else gn
        if gn is not None:
            row["grad_norm"] = float(gn)
        self.res.history.append(row)
        if self.logger is not None:
            self.logger(row)

    def _collapsed(self, *, reward=None, verified=None) -> bool:
        """Whether to stop: the detector saw a collapse in this round's ``reward`` or a curve point's
        ``verified`` accuracy (rank 0's decision, which holds the curve, binds every rank). The first
        collapse is recorded in ``res.collapse``."""
        if self.detector is None:
            return False
        d = self.detector
        reason = d.observe_reward(reward) if reward is not None else d.observe_verified(verified)
        reason = D.all_gather_objects(reason)[0]
        if reason and self.res.collapse is None:
            self.res.collapse = {"step": self.version, "reason": reason}
        return bool(reason) and d.stop

    def snapshot(self) -> dict:
        """Everything the run carries from one round to the next: one checkpoint, a part per component."""
        d, res = self.detector, self.res
        loop = {
            "round": self.next_round,
            "version": self.version,
            "history": res.history,
            "compute": res.compute,
            "collapse": res.collapse,
            "detector": None if d is None else {"rewards": d.rewards, "best_verified": d.best_verified},
        }
        return {
            "engine": C.engine_state(self.engine),
            "rng": C.rng_state(),
            "loop": loop,
            "learner": self.learner.state_dict(),
            "source": self.source.state_dict(),
            "curve": None if self.curve is None else self.curve.state(),
        }

    def resume(self) -> None:
        """Load the latest checkpoint, if there is one, into every component (``metrics.jsonl`` is
        rewritten to its rows), the RNGs last."""
        found = self.ckpt.latest() if self.ckpt is not None else None
        if found is None:
            return
        self.res.resumed_from, saved = found
        C.load_engine_state(self.engine, saved["engine"])
        loop = saved["loop"]
        self.next_round, self.version = loop["round"], loop["version"]
        self.res.history, self.res.compute, self.res.collapse = (
            loop["history"],
            loop["compute"],
            loop["collapse"],
        )
        if hasattr(self.logger, "restart"):  # a MetricsLog: back to the checkpoint's rows
            self.logger.restart(self.res.history)
        if self.detector is not None:
            self.detector.rewards = loop["detector"]["rewards"]
            self.detector.best_verified = loop["detector"]["best_verified"]
        self.learner.load_state_dict(saved["learner"])
        self.source.load_state_dict(saved["source"])
        if self.curve is not None:
            self.curve.restore(saved["curve"])
        C.set_rng_state(saved["rng"])


def _mean_over_ranks(values: torch.Tensor) -> float:
    parts = D.all_gather_objects((float(values.sum()), values.numel()))
    return sum(s for s, _ in parts) / max(1, sum(n for _, n in parts))
