"""What a cell does, stage by stage: load the base, prepare its rows, train, evaluate.

The runner (`runner.py`) keeps the cell's life — its record, status and failures — and calls these
stages in order. ``CellWork`` holds what the stages share: the configuration, the cell's directory,
the base it loaded and the live tracker (rank 0 only; a do-nothing tracker elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from oxbench.config import RunConfig
from oxbench.data.selection import validation_rows
from oxbench.engine import distributed as D
from oxbench.engine.build import train
from oxbench.engine.checkpoint import Checkpointer
from oxbench.engine.curves import Curve
from oxbench.engine.memory import check_run
from oxbench.engine.model import policy_weights
from oxbench.engine.plan import RunPlan
from oxbench.eval.evaluate import eval_backend, evaluate
from oxbench.grid.prepare import base_evaluation, measured_difficulty, on_main_first, prepare_data
from oxbench.grid.record import RunRecord, arm_label
from oxbench.grid.runs import MetricsLog
from oxbench.models.loading import base_model_path, count_parameters, load_model
from oxbench.tasks import get_task
from oxbench.tasks.rewards import online_reward
from oxbench.tracking import Tracker
from oxbench.utils import write_jsonl_atomic


@dataclass
class CellWork:
    """One cell's stages and what they share."""

    cfg: RunConfig
    dir: Path
    verbose: bool
    tracker: Tracker = field(default_factory=Tracker)  # none until the run starts training
    base_path: str = ""
    base_key: dict = field(default_factory=dict)

    def load(self, plan: RunPlan, rec: RunRecord):
        """The base model and tokenizer (rank 0 fetches or builds the base first); one line if the run
        cannot fit its device."""
        verbose = self.verbose and D.is_main()
        self.base_path, self.base_key = on_main_first(lambda: base_model_path(self.cfg, verbose=verbose))
        model, tok = load_model(self.base_path, self.cfg, init_seed=plan.seeds["init"])
        rec.scale_params = count_parameters(model)
        check_run(plan, model, run=plan.run_id)
        return model, tok

    def rows(self, plan: RunPlan, model, tok, rec: RunRecord) -> list[dict]:
        rows, rec.data = prepare_data(plan, model, tok, self.base_key, verbose=self.verbose)
        return rows

    def train(self, plan: RunPlan, model, tok, rows: list[dict]):
        """The one builder's engine and result, with this cell's checkpoints, metrics log and tracker."""
        cfg = self.cfg
        torch.manual_seed(plan.seeds["init"])
        if D.is_main():
            self.tracker = _tracker(cfg, self.dir)
        log = MetricsLog(self.dir / "metrics.jsonl", self.tracker) if D.is_main() else None
        ckpt = Checkpointer.from_config(self.dir, cfg)
        if plan.caps.online:
            curve = self._curve(model, tok)
            reward = online_reward(cfg.online, get_task(cfg.task.name), dtype=cfg.model.dtype)
            return train(plan, model, tok, rows, logger=log, ckpt=ckpt, reward_fn=reward, curve=curve)
        ref_key = {**self.base_key, "max_len": cfg.data.max_len, "lora": cfg.model.lora.hash_view()}
        return train(plan, model, tok, rows, logger=log, ckpt=ckpt, ref_key=ref_key)

    def _curve(self, model, tok) -> Curve | None:
        cfg = self.cfg
        if cfg.eval.every is None:
            return None
        subset = cfg.data.subset is not None
        correct = measured_difficulty(cfg, model, tok, self.base_key, False) if subset else None
        curve = Curve(
            cfg, model, tok, validation_rows(cfg, correct), self.dir / "curve.jsonl", seed=cfg.seeds()["eval"]
        )
        curve.tracker = self.tracker if D.is_main() else None
        return curve

    def evaluate(self, engine, model, tok, res, rec: RunRecord) -> None:
        """Every rank gathers the trained weights; rank 0 loads them into a fresh copy of the base,
        saves the model if asked, evaluates it and writes ``eval.jsonl`` and the base's ``base_eval.jsonl``."""
        cfg = self.cfg
        rec.paths = {**res.paths, "eval.backend": eval_backend(cfg, model)}
        state = policy_weights(engine)
        if not D.is_main():
            return
        eval_model, _ = load_model(self.base_path, cfg, init_seed=cfg.seeds()["init"])
        eval_model.load_state_dict(state)
        if cfg.train.save_model:
            eval_model.save_pretrained(self.dir / "model")
            tok.save_pretrained(self.dir / "model")
        metrics, outcomes = evaluate(
            eval_model, tok, cfg, seed=cfg.seeds()["eval"], label=f"{rec.run_id}: eval"
        )
        metrics["final_loss"] = (res.history[-1] if res.history else {}).get("loss")
        base = base_evaluation(cfg, self.base_path, self.base_key)
        rec.metrics = metrics | base["metrics"]
        write_jsonl_atomic(self.dir / "eval.jsonl", outcomes)
        write_jsonl_atomic(self.dir / "base_eval.jsonl", base["outcomes"])  # the paired reference
        self.tracker.log("eval", rec.metrics, res.optimizer_steps)

    def close_tracker(self, rec: RunRecord) -> None:
        """Rank 0: close the tracker; its status goes in the record."""
        self.tracker.close()
        rec.tracking = self.tracker.status or None

    def drop_checkpoints(self) -> None:
        """Rank 0, once the finished cell's record is written: its checkpoints go."""
        Checkpointer.from_config(self.dir, self.cfg).finish()


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
