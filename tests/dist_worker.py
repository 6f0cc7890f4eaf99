"""Train a few steps and save the flattened parameters (run by test_distributed.py, under torchrun or not).

usage: dist_worker.py MODEL_DIR METHOD ZERO_STAGE BATCH GRAD_ACCUM STEPS OUT.pt

With ``CURVE_EVERY`` set, an online run also takes learning-curve points every that many rollouts; each
point's "metrics" are the evaluated weights' checksum (the sum of their absolute values), so that what
the curve evaluated can be compared across ZeRO stages and ranks.

With ``CKPT_DIR`` set, the run checkpoints there (and resumes from it); with ``STOP_AT`` too, rank 0's
logger raises the pre-emption flag at that step (the other ranks learn of it through the collective
check), and the worker exits with code 4 once the checkpoint is written.

usage: dist_worker.py --jobs JOBS.json runs several such runs one after another in one process group
(one launch instead of one per run): JOBS.json is a list of ``{"args": [MODEL_DIR, ..., OUT.pt], "env":
{...}}``, each run's settings above in its ``env``. It exits with code 4 if any run was pre-empted.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from unittest import mock

import torch
from helpers import cfg_for, length_parity_reward, rows_for, train_offline, train_online

import losses
from oxbench.engine import checkpoint as C
from oxbench.engine import distributed as D
from oxbench.engine import universal as U
from oxbench.engine.model import full_state_dict
from oxbench.models.loading import load_model


def main(argv: list[str]) -> None:
    D.init_distributed()
    jobs = json.loads(Path(argv[1]).read_text()) if argv[0] == "--jobs" else [{"args": argv, "env": {}}]
    preempted = False
    for job in jobs:
        with mock.patch.dict(os.environ, job["env"]):  # this run's settings, restored after it
            preempted |= run(*job["args"])
    D.shutdown()
    D.exit_process(4 if preempted else 0)


def run(model_dir, method, zero, batch, accum, steps, out) -> bool:
    """One run; whether it was pre-empted (``STOP_AT``)."""
    spec = losses.get(method)
    cfg = cfg_for(
        model_dir,
        method,
        batch_size=int(batch),
        grad_accum=int(accum),
        max_steps=int(steps),
        zero_stage=int(zero),
        lr=1e-3,
    )
    lag = int(os.environ.get("DELAYED_S", -1))  # >= 0: the delayed source at that lag
    source = {"source": "delayed", "staleness": lag} if lag >= 0 else {}
    if os.environ.get("SHARE_PROMPT") == "1":
        source["share_prompt"] = True
    cfg = cfg.model_copy(
        update={
            "online": cfg.online.model_copy(update={"rounds": int(steps), "prompts_per_batch": 4, **source})
        }
    )
    if os.environ.get("DTYPE"):  # the model's dtype (bf16: DeepSpeed's fp32 masters beside it)
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"dtype": os.environ["DTYPE"]})})
    model, tok = load_model(model_dir, cfg, init_seed=0)
    curve = None
    if os.environ.get("CURVE_EVERY"):
        from oxbench.engine import curves

        def checksum(model, *args, **kwargs):
            return {"checksum": float(sum(p.detach().abs().sum() for p in model.parameters()))}

        curves.validation_metrics = checksum
        cfg.eval.every = int(os.environ["CURVE_EVERY"])
        curve = curves.Curve(cfg, model, tok, [], Path(out).with_suffix(".curve.jsonl"), seed=0)
    stop_at = int(os.environ.get("STOP_AT", -1))

    def logger(row):
        if row["step"] == stop_at:
            C._requested = "SIGTERM"

    extra = {}
    if os.environ.get("CKPT_DIR"):
        extra = {
            "ckpt": C.Checkpointer(Path(os.environ["CKPT_DIR"])),
            "logger": logger if D.is_main() else None,
        }
    try:
        engine, res = _train(cfg, spec, model, tok, method, curve, extra)
    except C.Preempted:
        C._requested = None  # the next run starts unflagged
        return True
    state = full_state_dict(engine)
    shares, adam_step = U.full_state(engine)  # the optimiser's state, by parameter (every rank's share)
    optim = {k: v for part in D.all_gather_objects(shares) for k, v in part.items()}
    if D.is_main():
        torch.save(
            {
                "params": {k: v for k, v in state.items()},
                "steps": res.optimizer_steps,
                "world": D.world_size(),
                "history": res.history,
                "resumed_from": res.resumed_from,
                "optim": optim,
                "adam_step": adam_step,
                "order": res.data_order_sha,
            },
            out,
        )
    return False


def _train(cfg, spec, model, tok, method, curve, extra):
    if spec.data == "online":
        return train_online(
            cfg,
            spec,
            spec.resolve_hparams(),
            model,
            tok,
            rows_for("online", 8),
            run=method,
            reward_fn=length_parity_reward,
            curve=curve,
            **extra,
        )
    return train_offline(
        cfg, spec, spec.resolve_hparams(), model, tok, rows_for(spec.data), run=method, **extra
    )


if __name__ == "__main__":
    main(sys.argv[1:])
