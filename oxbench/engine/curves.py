"""Learning curves inside an online run (``eval.every``): the policy on a validation split, with the
compute spent so far, one row per point in ``<run_dir>/curve.jsonl``.

The points fall at 0 rollouts (the base) and at the first round that reaches each multiple of
``eval.every`` rollouts; the final point is always taken. Each row holds the compute ledger's
cumulative totals at that point (``rollouts``, ``generated_tokens``, ``trained_tokens``,
``gen_seconds``, ``train_seconds``), the optimiser step, and the metrics of
:func:`~oxbench.eval.evaluate.validation_metrics`. Every rank calls :meth:`Curve.maybe` (gathering the
weights is collective under ZeRO-3); rank 0 evaluates and writes.
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path

import torch

from oxbench.config import RunConfig
from oxbench.engine import distributed as D
from oxbench.engine.loop import LEDGER
from oxbench.eval.evaluate import validation_metrics
from oxbench.utils import write_text_atomic


class Curve:
    def __init__(self, cfg: RunConfig, lm, tokenizer, rows: list[dict], path: Path | None, *, seed: int):
        self.cfg, self.rows, self.seed, self.tokenizer = cfg, rows, seed, tokenizer
        self.every, self.next, self.taken = cfg.eval.every, 0, None
        self.tracker = None  # the run's live trackers (rank 0), set by the runner
        self.path = path if D.is_main() else None
        self.model = copy.deepcopy(lm).eval() if D.is_main() else None
        if self.path is not None:
            self.path.write_text("")  # a re-run starts its curve afresh

    def state(self) -> dict:
        """Where the curve is, with its points so far (rank 0 holds them): for a checkpoint."""
        rows = self.path.read_text().splitlines() if self.path is not None else []
        return {"next": self.next, "taken": self.taken, "rows": rows}

    def restore(self, state: dict) -> None:
        """Back to a checkpoint's :meth:`state`: points taken after it are dropped from the file."""
        self.next, self.taken = state["next"], state["taken"]
        if self.path is not None:
            write_text_atomic(self.path, "".join(line + "\n" for line in state["rows"]))

    def maybe(self, ledger: dict, weights, *, step: int, last: bool = False) -> dict | None:
        """Evaluate if the ledger's rollouts reached the next point (or ``last``). ``weights()`` returns
        the policy's full state dict (called on every rank)."""
        done = ledger.get("rollouts", 0)
        if done < self.next and not (last and done != self.taken):
            return None
        self.taken = done
        while self.next <= done:
            self.next += self.every
        state = weights()
        row = None
        if D.is_main():
            start = time.time()
            self.model.load_state_dict(state, strict=False)
            with torch.no_grad():
                metrics = validation_metrics(self.model, self.tokenizer, self.rows, self.cfg, seed=self.seed)
            row = {
                "step": step,
                **{k: ledger.get(k, 0) for k in LEDGER},
                **metrics,
                "n_val": len(self.rows),
                "eval_seconds": time.time() - start,
            }
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")
                f.flush()
                os.fsync(f.fileno())
            if self.tracker is not None:
                self.tracker.log("curve", row, done)
        D.barrier()
        return row
