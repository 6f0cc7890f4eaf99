"""A run's components, assembled from its config and loss spec, and handed to the one loop.

:func:`train_offline` (a dataset source) and :func:`train_online` (a rollout source) differ only in
what they build: the source, the engine's schedule length, the reference (cached or live) and, online,
the rollout worker and the collapse detector. Both then run :class:`~oxbench.engine.loop.Loop`. They
read the loss's declared capabilities (``data``, ``needs_reference``, ``needs_value_model``,
``needs_full_logits``, ``updates_reference``, ``generates_own_pairs``, ``pairs_from_iterate``...) and
never its name or a hyper-parameter's name.
"""

from __future__ import annotations

import math
import time

from losses import LossSpec
from oxbench.config import RunConfig, micro_batches_per_rank
from oxbench.engine import checkpoint as C
from oxbench.engine import distributed as D
from oxbench.engine.batches import encode_examples
from oxbench.engine.collapse import CollapseDetector
from oxbench.engine.learner import Learner
from oxbench.engine.loop import Loop, TrainResult
from oxbench.engine.model import build_engine, online_policy, policy_weights
from oxbench.engine.reference import LiveReference
from oxbench.engine.rollout import RolloutWorker, vllm_options
from oxbench.engine.sources import DatasetSource, Rounds, make_source
from oxbench.tasks.grading import is_correct
from oxbench.text import decode


def train_offline(cfg: RunConfig, spec: LossSpec, hparams: dict, model, tokenizer, rows: list[dict], *,
                  run: str, logger=None, ref_key: dict | None = None,
                  ckpt: C.Checkpointer | None = None) -> tuple[object, TrainResult]:  # fmt: skip
    """Train on a fixed dataset (``spec.data`` in sft/pairs/unpaired). Returns (engine, result).

    A reference that moves, or whose full logits the loss reads, is a frozen live copy; a fixed one is
    the initial policy's log-probs, cached once. With ``ckpt`` the run resumes from its latest
    checkpoint and offers one at every step boundary (:mod:`oxbench.engine.checkpoint`)."""
    t, start = cfg.train, time.time()
    accum = resumed_accum(ckpt, t.grad_accum, run)
    examples = encode_examples(spec.data, rows, tokenizer, cfg.data.max_len, kl_seed=cfg.seeds()["data"])
    if not examples:
        raise RuntimeError(f"run {run}: no training examples for data kind {spec.data!r}")
    source = DatasetSource(examples, spec.data, seed=cfg.seeds()["data"], batch_size=t.batch_size,
                           grad_accum=accum, epochs=t.epochs, max_steps=t.max_steps, run=run)  # fmt: skip
    live = spec.needs_reference and (spec.updates_reference or spec.needs_full_logits)
    live_ref = LiveReference(model) if live else None
    engine = build_engine(model, cfg, source.total_steps, grad_accum=accum)
    if spec.needs_reference and not live:
        source.cache_reference(engine.module, tokenizer.pad_token_id, ref_key or {"run": run})
    learner = Learner(spec=spec, hparams=hparams, engine=engine, tokenizer=tokenizer, live_ref=live_ref,
                      max_len=cfg.data.max_len, max_new_tokens=cfg.data.max_new_tokens,
                      micro_batches=accum, run=run, check_reference=t.check_reference)  # fmt: skip
    loop = Loop(learner, source, run, log_every=t.log_every, logger=logger, ckpt=ckpt, start=start)
    return engine, loop.run_all()


def resumed_accum(ckpt: C.Checkpointer | None, grad_accum: int, run: str) -> int:
    """Micro-batches per rank and optimiser step: ``grad_accum``, or, resuming a checkpoint written at
    another world size, as many as keep its global batch (micro-batches x ranks); a global batch the
    ranks cannot share evenly is an error naming both layouts."""
    layout = ckpt.layout() if ckpt is not None else None
    if not layout or layout.get("grad_accum") is None or layout["world_size"] == D.world_size():
        return grad_accum
    micro = layout["grad_accum"] * layout["world_size"]
    if micro % D.world_size():
        raise RuntimeError(
            f"run {run}: its checkpoint was written by {layout['world_size']} rank(s) x {layout['grad_accum']} "
            f"micro-batch(es) per step; {micro} micro-batches cannot be shared by {D.world_size()} ranks"
        )
    return micro // D.world_size()


def fast_paths(online, spec: LossSpec, lm) -> dict:
    """The rollout backend and learner forward an online run takes: ``online.backend`` and
    ``online.share_prompt``, except where the method or model cannot use them (the defaults are the fast
    paths): ``lean`` on a model its loop cannot decode (LoRA, another architecture) samples with HF
    generate, and a method with a value head or pairs takes the full forward. Recorded in the run."""
    share = online.share_prompt and not (spec.needs_value_model or spec.generates_own_pairs)
    return {"online.backend": decode.backend_for(online.backend, lm), "online.share_prompt": share}


def _online_learner(cfg: RunConfig, spec: LossSpec, hparams: dict, engine, tokenizer, live_ref, worker,
                    micro: int, paths: dict, run: str) -> Learner:  # fmt: skip
    """The online learner: ``micro`` rollout micro-batches a step, the rollout worker's length limits, the
    importance-weight diagnostics and ESS learning rate of ``online``, and the forward ``paths`` took."""
    o = cfg.online
    return Learner(spec=spec, hparams=hparams, engine=engine, tokenizer=tokenizer, live_ref=live_ref,
                   max_len=worker.max_len, max_new_tokens=o.max_new_tokens, micro_batches=micro, run=run,
                   diagnostic_is_cap=o.diagnostic_is_cap, ess_lr=o.ess_lr, ess_lr_base=o.ess_lr_base,
                   share_prompt=paths["online.share_prompt"])  # fmt: skip


def _online_source(cfg: RunConfig, spec: LossSpec, prompts: list[dict], worker, engine, paths: dict, live_ref,
                   reward_fn):  # fmt: skip
    """The rounds' source (``online.source``): rollouts of ``prompts`` by ``worker`` with the engine's
    weights, graded by ``reward_fn``, seeded by the run's sampling and data seeds."""
    seeds = cfg.seeds()
    rounds = Rounds(online=cfg.online, prompts=prompts, worker=worker, weights=lambda: policy_weights(engine),
                    reward_fn=reward_fn, sampling_seed=seeds["sampling"], data_seed=seeds["data"])  # fmt: skip
    return make_source(rounds, backend=paths["online.backend"], live_ref=live_ref,
                       per_iteration=rounds_per_iteration(spec, len(prompts), cfg))  # fmt: skip


def rounds_per_iteration(spec: LossSpec, n_prompts: int, cfg: RunConfig) -> int | None:
    """For ``pairs_from_iterate`` (SPIN): rounds in one iteration, ``online.pair_refresh_every``
    passes over the prompts; None for every other method."""
    if not spec.pairs_from_iterate:
        return None
    o = cfg.online
    return max(1, math.ceil(n_prompts / o.prompts_per_batch)) * o.pair_refresh_every


def train_online(cfg: RunConfig, spec: LossSpec, hparams: dict, model, tokenizer, prompts: list[dict], *,
                 run: str, logger=None, reward_fn=is_correct, curve=None,
                 ckpt: C.Checkpointer | None = None) -> tuple[object, TrainResult]:  # fmt: skip
    """Train on the policy's own graded rollouts. Returns (engine, result).

    Each round samples ``n`` rollouts for each of ``B_p`` prompts with the rollout worker's weights
    (which ones is the source's choice: the learner's every ``online.sync_every`` rounds, or those of
    S versions ago, or a producer's running ahead; every rollout carries the version that made it),
    scores them with ``reward_fn(completion, reference_answer)`` (default: the strict grader), and the
    learner takes ``inner_epochs`` optimiser steps on them. SPIN-style methods (``pairs_from_iterate``)
    freeze an iterate for a whole iteration (``online.pair_refresh_every`` passes over the prompts): it
    samples every rejected answer of the iteration and is the reference.

    ``curve`` (a :class:`~oxbench.engine.curves.Curve`) takes learning-curve points at 0 rollouts and
    every ``eval.every``. With ``ckpt`` the run resumes from its latest checkpoint and offers one after
    every round."""
    o, seeds, start = cfg.online, cfg.seeds(), time.time()
    micro = micro_batches_per_rank(o.prompts_per_batch, cfg.train.batch_size, D.world_size(), run)
    model, lm, live_ref = online_policy(spec, hparams, model, seeds["init"])
    paths = fast_paths(o, spec, lm)
    # async: the producer samples on a copy of its own (its vLLM server too); the learner's copy never does
    backend = "hf" if o.source == "async" else paths["online.backend"]
    worker = RolloutWorker(lm, tokenizer, max_len=cfg.data.max_len, vllm=vllm_options(o), backend=backend)
    engine = build_engine(model, cfg, o.rounds * o.inner_epochs, grad_accum=micro)
    learner = _online_learner(cfg, spec, hparams, engine, tokenizer, live_ref, worker, micro, paths, run)
    source = _online_source(cfg, spec, prompts, worker, engine, paths, live_ref, reward_fn)
    detector = CollapseDetector(**o.collapse.model_dump()) if o.collapse is not None else None
    loop = Loop(learner, source, run, log_every=cfg.train.log_every, logger=logger, detector=detector,
                curve=curve, ckpt=ckpt, start=start)  # fmt: skip
    loop.res.paths = paths
    return engine, loop.run_all()
