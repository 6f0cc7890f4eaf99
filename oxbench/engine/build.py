"""A run's components, assembled from its plan, and handed to the one loop.

:func:`train` is the one builder. It reads the run's :class:`~oxbench.engine.plan.RunPlan`: its
capabilities (online or offline, the reference cached or live, a value head, the shared-prompt
forward, self-sampled pairs), its source and its micro-batch layout, never the loss's name, a
hyper-parameter's name or the spec's flags. Offline and online differ only in what it builds: the
source (a dataset, or rollouts that are synchronous, delayed or asynchronous), the schedule's length,
the reference and, online, the rollout worker and the collapse detector. Both then run
:class:`~oxbench.engine.loop.Loop`.
"""

from __future__ import annotations

import math
import time

from oxbench.config import RunConfig
from oxbench.engine import checkpoint as C
from oxbench.engine import distributed as D
from oxbench.engine.batches import encode_examples
from oxbench.engine.collapse import CollapseDetector
from oxbench.engine.learner import Learner
from oxbench.engine.loop import Loop, TrainResult
from oxbench.engine.model import build_engine, online_policy, policy_weights
from oxbench.engine.plan import Capabilities, RunPlan
from oxbench.engine.reference import LiveReference
from oxbench.engine.rollout import RolloutWorker, vllm_options
from oxbench.engine.sources import Rounds, make_source
from oxbench.tasks import get_task
from oxbench.tasks.grading import is_correct
from oxbench.text import decode


def train(
    plan: RunPlan,
    model,
    tokenizer,
    data: list[dict],
    *,
    logger=None,
    ckpt: C.Checkpointer | None = None,
    ref_key: dict | None = None,
    reward_fn=is_correct,
    curve=None,
) -> tuple[object, TrainResult]:
    """Train ``model`` as ``plan`` says on ``data`` (an offline method's examples, an online method's
    prompts). Returns (engine, result). ``logger`` takes each metrics row; with ``ckpt`` the run resumes
    from its latest checkpoint and offers one at every step boundary (:mod:`oxbench.engine.checkpoint`).
    Offline, ``ref_key`` keys the cached reference; online, ``reward_fn(completion, answer)`` grades
    the rollouts (default: the strict grader) and ``curve`` takes learning-curve points."""
    if plan.caps.online:
        return _online(
            plan, model, tokenizer, data, logger=logger, reward_fn=reward_fn, curve=curve, ckpt=ckpt
        )
    return _offline(plan, model, tokenizer, data, logger=logger, ref_key=ref_key, ckpt=ckpt)


def _offline(
    plan: RunPlan,
    model,
    tokenizer,
    rows: list[dict],
    *,
    logger,
    ref_key: dict | None,
    ckpt: C.Checkpointer | None,
) -> tuple[object, TrainResult]:
    """A fixed dataset (``caps.data`` sft, pairs or unpaired). A reference that moves, or whose full logits
    the loss reads, is a frozen live copy; a fixed one is the initial policy's log-probs, cached once."""
    cfg, caps, run, t, start = plan.cfg, plan.caps, plan.run_id, plan.cfg.train, time.time()
    accum = resumed_accum(ckpt, plan.micro_batches, run)
    prompt = get_task(cfg.task.name).prompt
    examples = encode_examples(
        caps.data, rows, tokenizer, cfg.data.max_len, kl_seed=plan.seeds["data"], prompt=prompt
    )
    if not examples:
        raise RuntimeError(f"run {run}: no training examples for data kind {caps.data!r}")
    source = make_source(plan, examples=examples, grad_accum=accum)
    live_ref = LiveReference(model) if caps.reference == "live" else None
    engine = build_engine(model, cfg, source.total_steps, grad_accum=accum)
    if caps.reference == "cached":
        source.cache_reference(engine.module, tokenizer.pad_token_id, ref_key or {"run": run})
    learner = Learner(
        spec=plan.spec,
        hparams=plan.hparams,
        engine=engine,
        tokenizer=tokenizer,
        live_ref=live_ref,
        max_len=cfg.data.max_len,
        max_new_tokens=cfg.data.max_new_tokens,
        micro_batches=accum,
        run=run,
        check_reference=t.check_reference,
        caps=caps,
    )
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


def fast_paths(online, caps: Capabilities, lm) -> dict:
    """The rollout backend and learner forward an online run takes: ``online.backend`` and
    ``online.share_prompt``, except where the method or model cannot use them (the defaults are the fast
    paths): ``lean`` on a model its loop cannot decode (LoRA, another architecture) samples with HF
    generate, and a method with a value head or pairs takes the full forward. Recorded in the run."""
    share = online.share_prompt and caps.shared_prompt
    return {"online.backend": decode.backend_for(online.backend, lm), "online.share_prompt": share}


def _online_learner(plan: RunPlan, engine, tokenizer, live_ref, worker, paths: dict) -> Learner:
    """The online learner: the plan's rollout micro-batches a step, the rollout worker's length limits,
    the importance-weight diagnostics and ESS learning rate of ``online``, and the forward ``paths`` took."""
    o = plan.cfg.online
    return Learner(
        spec=plan.spec,
        hparams=plan.hparams,
        engine=engine,
        tokenizer=tokenizer,
        live_ref=live_ref,
        max_len=worker.max_len,
        max_new_tokens=o.max_new_tokens,
        micro_batches=plan.micro_batches,
        run=plan.run_id,
        diagnostic_is_cap=o.diagnostic_is_cap,
        ess_lr=o.ess_lr,
        ess_lr_base=o.ess_lr_base,
        share_prompt=paths["online.share_prompt"],
        caps=plan.caps,
        prompt=worker.prompt,
    )


def _online_source(plan: RunPlan, prompts: list[dict], worker, engine, paths: dict, live_ref, reward_fn):
    """The plan's source: rollouts of ``prompts`` by ``worker`` with the engine's weights, graded by
    ``reward_fn``, seeded by the run's sampling and data seeds."""
    seeds, cfg = plan.seeds, plan.cfg
    rounds = Rounds(
        online=cfg.online,
        prompts=prompts,
        worker=worker,
        weights=lambda: policy_weights(engine),
        reward_fn=reward_fn,
        sampling_seed=seeds["sampling"],
        data_seed=seeds["data"],
    )
    return make_source(
        plan,
        rounds=rounds,
        backend=paths["online.backend"],
        live_ref=live_ref,
        per_iteration=rounds_per_iteration(plan.caps, len(prompts), cfg),
    )


def rounds_per_iteration(caps: Capabilities, n_prompts: int, cfg: RunConfig) -> int | None:
    """For a method whose rejected answers come from a frozen iterate (SPIN): rounds in one iteration,
    ``online.pair_refresh_every`` passes over the prompts; None for every other method."""
    if not caps.iterate_pairs:
        return None
    o = cfg.online
    return max(1, math.ceil(n_prompts / o.prompts_per_batch)) * o.pair_refresh_every


def _online(
    plan: RunPlan,
    model,
    tokenizer,
    prompts: list[dict],
    *,
    logger,
    reward_fn,
    curve,
    ckpt: C.Checkpointer | None,
) -> tuple[object, TrainResult]:
    """The policy's own graded rollouts. Each round samples ``n`` rollouts for each of ``B_p`` prompts
    with the rollout worker's weights (which ones is the source's choice: the learner's every
    ``online.sync_every`` rounds, or those of S versions ago, or a producer's running ahead; every
    rollout carries the version that made it), grades them, and the learner takes ``inner_epochs``
    optimiser steps on them. A SPIN-style method freezes an iterate for a whole iteration
    (``online.pair_refresh_every`` passes over the prompts): it samples every rejected answer of the
    iteration and is the reference."""
    cfg, start = plan.cfg, time.time()
    o = cfg.online
    model, lm, live_ref = online_policy(plan, model)
    paths = fast_paths(o, plan.caps, lm)
    # async: the producer samples on a copy of its own (its vLLM server too); the learner's copy never does
    backend = "hf" if plan.source == "async" else paths["online.backend"]
    prompt = get_task(cfg.task.name).prompt
    worker = RolloutWorker(
        lm, tokenizer, max_len=cfg.data.max_len, vllm=vllm_options(o), backend=backend, prompt=prompt
    )
    engine = build_engine(model, cfg, o.rounds * o.inner_epochs, grad_accum=plan.micro_batches)
    learner = _online_learner(plan, engine, tokenizer, live_ref, worker, paths)
    source = _online_source(plan, prompts, worker, engine, paths, live_ref, reward_fn)
    detector = CollapseDetector(**o.collapse.model_dump()) if o.collapse is not None else None
    loop = Loop(
        learner,
        source,
        plan.run_id,
        log_every=cfg.train.log_every,
        logger=logger,
        detector=detector,
        curve=curve,
        ckpt=ckpt,
        start=start,
    )
    loop.res.paths = paths
    return engine, loop.run_all()
