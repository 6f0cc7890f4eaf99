"""The one training loop: every method runs here, on DeepSpeed, and differs only in its loss.

The trainer reads the loss's declared capabilities (``data``, ``needs_reference``,
``needs_value_model``, ``needs_full_logits``, ``updates_reference`` with its
``reference_update``, ``generates_own_pairs``, ``pairs_from_iterate``, ``batch_stats``,
``initial_state``) and never its name or a hyper-parameter's name:

* offline data (``sft``, ``pairs``, ``unpaired``): a seeded ``DistributedSampler`` order,
  micro-batches, reference log-probs from a cache built once at step 0;
* experience from the policy (``online`` rollouts, or pairs for methods that generate their
  own): an experience source (rounds of rollout -> reward) plus the learner
  (:mod:`oxbench.engine.learner`), with ``n`` rollouts per prompt, ``B_p`` prompts per round
  and ``M`` rounds.

Both loops give every loss ``progress`` (the share of optimiser steps done) and carry its
state (:class:`~oxbench.engine.learner.LossState`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass, field

import torch

from losses import LossInputs, LossSpec
from oxbench.config import RunConfig, micro_batches_per_rank
from oxbench.data.sampler import epoch_indices, make_sampler, order_sha
from oxbench.engine import checkpoint as C
from oxbench.engine import distributed as D
from oxbench.engine.batches import ROLES, build_offline_inputs, encode_examples
from oxbench.engine.collapse import CollapseDetector
from oxbench.engine.learner import Learner, LossState, NonFiniteLoss, check_finite, grad_norm
from oxbench.engine.model import (  # noqa: F401  (the engine's model API, re-exported for callers)
    PolicyWithValue,
    build_engine,
    full_state_dict,
    lm_state,
    online_policy,
    warmup_cosine,
)
from oxbench.engine.reference import LiveReference, RefCache
from oxbench.engine.rollout import RolloutWorker
from oxbench.engine.sources import RoundPlan, make_source
from oxbench.tasks.grading import is_correct
from oxbench.text import decode
from oxbench.utils import progress


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


LEDGER = ("rollouts", "generated_tokens", "trained_tokens", "gen_seconds", "train_seconds")


def _ledger_round(experience: list, max_len: int) -> dict:
    """One round's generated tokens and trained tokens of one pass over them (prompt + completion, as
    collated), summed over every rank (its rollouts are :func:`rollout_stats`'s)."""
    mine = [
        sum(len(r.completion_ids) for r in experience),
        sum(min(max_len, len(r.prompt_ids) + len(r.completion_ids)) for r in experience),
    ]
    return dict(
        zip(("generated_tokens", "trained_tokens"), (sum(col) for col in zip(*D.all_gather_objects(mine))))
    )


def _add(ledger: dict, **amounts) -> dict:
    """Add to the cumulative ledger; the ``cum_*`` view of it, for a metrics row."""
    for k, v in amounts.items():
        ledger[k] = ledger.get(k, 0) + v
    return {f"cum_{k}": ledger.get(k, 0) for k in LEDGER}


# --------------------------------------------------------------------------- model + engine


def _mean_metrics(items: list[dict]) -> dict:
    keys = {k for d in items for k in d}
    return {k: sum(d[k] for d in items if k in d) / sum(1 for d in items if k in d) for k in sorted(keys)}


def _log(history, logger, engine, step, micro_metrics, extra, grad_norm=None):
    row = {"step": step, "lr": engine.get_lr()[0], **_mean_metrics(micro_metrics), **extra}
    gn = engine.get_global_grad_norm()
    gn = grad_norm if gn is None else gn
    if gn is not None:
        row["grad_norm"] = float(gn)
    history.append(row)
    if logger is not None:
        logger(row)


def _resume(ckpt, engine, res: TrainResult, logger, loss_state: LossState, live_ref) -> dict | None:
    """Load the run's latest checkpoint, if it has one, into the engine, the RNGs, the loss state, the
    reference and the metrics so far (``metrics.jsonl`` is rewritten to them); the saved state, or None."""
    found = ckpt.latest() if ckpt is not None else None
    if found is None:
        return None
    res.resumed_from, saved = found
    C.load_engine_state(engine, saved["engine"])
    loss_state.value = saved["loss_state"]
    if live_ref is not None:
        live_ref.model.load_state_dict(saved["live_ref"])
    res.history, res.compute = saved["history"], saved["compute"]
    if hasattr(logger, "restart"):  # a MetricsLog: back to the checkpoint's rows
        logger.restart(res.history)
    C.set_rng_state(saved["rng"])
    return saved


# --------------------------------------------------------------------------- offline


def train_offline(
    cfg: RunConfig,
    spec: LossSpec,
    hparams: dict,
    model,
    tokenizer,
    rows: list[dict],
    *,
    run: str,
    logger=None,
    ref_key: dict | None = None,
    ckpt: C.Checkpointer | None = None,
) -> tuple[object, TrainResult]:
    """Train on a fixed dataset (``spec.data`` in sft/pairs/unpaired). Returns (engine, result).

    With ``ckpt`` the run resumes from its latest checkpoint (the seed fixes the data order, so the
    step is the position) and offers one at every step boundary (:mod:`oxbench.engine.checkpoint`)."""
    t, res, start = cfg.train, TrainResult(), time.time()
    examples = encode_examples(spec.data, rows, tokenizer, cfg.data.max_len, kl_seed=cfg.seeds()["data"])
    if not examples:
        raise RuntimeError(f"run {run}: no training examples for data kind {spec.data!r}")
    micro, n_steps, res.data_order_sha = _offline_schedule(cfg, examples, run)
    engine, live_ref, ref_cache = _offline_models(
        cfg, spec, model, tokenizer, examples, n_steps, run, ref_key
    )
    state = LossState(spec)
    saved = _resume(ckpt, engine, res, logger, state, live_ref)
    step = saved["step"] if saved else 0

    def snapshot() -> dict:
        return {"engine": C.engine_state(engine), "rng": C.rng_state(), "loss_state": state.value,
                "live_ref": None if live_ref is None else live_ref.model.state_dict(), "step": step,
                "history": res.history, "compute": res.compute}  # fmt: skip

    engine.train()
    micro_metrics, tokens, step_start, first = [], 0, time.time(), step
    with C.checkpointable() if ckpt is not None else contextlib.nullcontext():
        todo = progress(micro[step * t.grad_accum :], f"{run}: train (micro-batches)", enabled=D.is_main())
        for i, (epoch, mb) in enumerate(todo):
            chunk = [examples[j] for j in mb]
            tokens += sum(len(ex[role][0]) for ex in chunk for role in ROLES[spec.data])
            inputs = build_offline_inputs(spec.data, engine, chunk, tokenizer.pad_token_id, ref_cache=ref_cache,
                                          live_ref=live_ref, needs_full_logits=spec.needs_full_logits)  # fmt: skip
            if i == first == 0 and ref_cache is not None and t.check_reference:
                _check_reference_equal(inputs, spec.data, run)
            gn, boundary = _offline_micro_step(spec, hparams, engine, inputs, state, step / n_steps, micro_metrics,
                                               run, step)  # fmt: skip
            if boundary:
                step += 1
                _offline_log(res, logger, engine, step, n_steps, t.log_every, micro_metrics, tokens, step_start,
                             {"epoch": epoch, "elapsed": time.time() - start}, gn)  # fmt: skip
                micro_metrics, tokens, step_start = [], 0, time.time()
                _maybe_update_reference(spec, hparams, live_ref, engine, step)
                if ckpt is not None:
                    ckpt.boundary(step, snapshot, last=step == n_steps)
    res.optimizer_steps, res.seconds = step, time.time() - start
    res.loss_state = state.as_dict()
    return engine, res


def _offline_schedule(cfg: RunConfig, examples: list[dict], run: str) -> tuple[list, int, str]:
    """The micro-batches in the order consumed (``(epoch, [example indices])``, this rank's), the
    optimiser steps they make (at most ``train.max_steps``) and the digest of every rank's order."""
    t, seed, ws = cfg.train, cfg.seeds()["data"], D.world_size()
    sampler = make_sampler(len(examples), seed=seed, rank=D.rank(), world_size=ws)
    micro = []
    for epoch in range(t.epochs):
        idx = epoch_indices(sampler, epoch)
        micro += [(epoch, idx[i : i + t.batch_size]) for i in range(0, len(idx), t.batch_size)]
    n_steps = len(micro) // t.grad_accum
    if t.max_steps is not None:
        n_steps = min(n_steps, t.max_steps)
    if n_steps == 0:
        raise RuntimeError(
            f"run {run}: {len(examples)} examples give no full optimizer step "
            f"(batch {t.batch_size} x accum {t.grad_accum} x world {ws})"
        )
    micro = micro[: n_steps * t.grad_accum]
    consumed = [
        examples[i]["id"] for part in D.all_gather_objects([i for _, m in micro for i in m]) for i in part
    ]
    return micro, n_steps, order_sha(consumed)


def _offline_models(cfg, spec: LossSpec, model, tokenizer, examples, n_steps: int, run: str, ref_key):
    """(engine, live reference or None, reference cache or None): a frozen copy for a reference that
    moves or whose full logits the loss reads, else the initial policy's log-probs cached once."""
    live_ref = ref_cache = None
    needs_live = spec.updates_reference or spec.needs_full_logits
    if spec.needs_reference and needs_live:
        live_ref = LiveReference(model)
    engine = build_engine(model, cfg, n_steps)
    if spec.needs_reference and not needs_live:
        ref_cache = RefCache.build(engine.module, examples, ROLES[spec.data], tokenizer.pad_token_id,
                                   key_parts=ref_key or {"run": run})  # fmt: skip
    return engine, live_ref, ref_cache


def _offline_micro_step(spec, hparams, engine, inputs, state: LossState, progress_: float, metrics: list,
                        run: str, step: int) -> tuple[float | None, bool]:  # fmt: skip
    """The loss on one micro-batch, its backward and DeepSpeed's step (an optimiser step at the
    accumulation boundary). Returns (the gradient norm at a boundary, whether it was one)."""
    inputs.progress, inputs.state = progress_, state.value
    out = spec.fn(inputs, **hparams)
    check_finite(out, run, step)
    state.offer(out.state)
    engine.backward(out.loss)
    boundary = engine.is_gradient_accumulation_boundary()
    gn = grad_norm(engine) if boundary else None
    engine.step()
    metrics.append({"loss": out.loss.item(), **out.metrics})
    if boundary:
        state.commit()
    return gn, boundary


def _offline_log(res, logger, engine, step, n_steps, log_every, micro_metrics, tokens, step_start, extra, gn):
    """An optimiser step's ledger (trained tokens over every rank, seconds), added to the run's compute;
    its metrics row every ``log_every`` steps and at the last."""
    ledger = {"trained_tokens": sum(D.all_gather_objects(tokens)), "train_seconds": time.time() - step_start}
    cumulative = _add(res.compute, **ledger)
    if step % log_every == 0 or step == n_steps:
        _log(res.history, logger, engine, step, micro_metrics, {**extra, **ledger, **cumulative}, gn)


def _check_reference_equal(inputs: LossInputs, kind: str, run: str) -> None:
    """At step 0 the policy *is* the reference: their log-probs must agree."""
    pairs = {
        "pairs": [("chosen_logps", "ref_chosen_logps"), ("rejected_logps", "ref_rejected_logps")],
        "unpaired": [("logps", "ref_logps")],
    }.get(kind, [])
    for pol, ref in pairs:
        a, b = getattr(inputs, pol).detach(), getattr(inputs, ref)
        if not torch.allclose(a, b, atol=1e-3, rtol=1e-4):
            raise RuntimeError(
                f"run {run}: step-0 {pol} differ from cached {ref} "
                f"(max abs diff {(a - b).abs().max().item():.2e}); stale reference cache?"
            )


# --------------------------------------------------------------------------- online


def _round_prompts(prompts: list[dict], step: int, per_round: int, sampler) -> list[dict]:
    """This rank's prompts for a round: consecutive slices of the seeded, sharded order."""
    per_epoch = len(sampler)
    start = step * per_round
    epoch, offset = divmod(start, per_epoch)
    idx = epoch_indices(sampler, epoch)
    out = idx[offset : offset + per_round]
    while len(out) < per_round:
        epoch += 1
        out += epoch_indices(sampler, epoch)[: per_round - len(out)]
    return [prompts[i] for i in out]


def fast_paths(online, spec: LossSpec, lm) -> dict:
    """The rollout backend and learner forward an online run takes: ``online.backend`` and
    ``online.share_prompt``, except where the method or model cannot use them (the defaults are the fast
    paths): ``lean`` on a model its loop cannot decode (LoRA, another architecture) samples with HF
    generate, and a method with a value head or pairs takes the full forward. Recorded in the run."""
    share = online.share_prompt and not (spec.needs_value_model or spec.generates_own_pairs)
    return {"online.backend": decode.backend_for(online.backend, lm), "online.share_prompt": share}


def vllm_options(online) -> dict:
    """The vLLM server's placement keywords (:class:`~oxbench.engine.vllm_client.VllmEngine`) from ``online``."""
    return {"placement": online.vllm_placement, "devices": online.vllm_devices, "memory": online.vllm_memory}


def rounds_per_iteration(spec: LossSpec, n_prompts: int, cfg: RunConfig) -> int | None:
    """For ``pairs_from_iterate`` (SPIN): rounds in one iteration, ``online.pair_refresh_every``
    passes over the prompts; None for every other method."""
    if not spec.pairs_from_iterate:
        return None
    o = cfg.online
    return max(1, math.ceil(n_prompts / o.prompts_per_batch)) * o.pair_refresh_every


def train_online(
    cfg: RunConfig,
    spec: LossSpec,
    hparams: dict,
    model,
    tokenizer,
    prompts: list[dict],
    *,
    run: str,
    logger=None,
    reward_fn=is_correct,
    curve=None,
    ckpt: C.Checkpointer | None = None,
) -> tuple[object, TrainResult]:
    """An experience source (:mod:`oxbench.engine.sources`) plus the
    :class:`~oxbench.engine.learner.Learner`.

    Each round samples ``n`` rollouts for each of ``B_p`` prompts with the rollout worker's weights
    (which ones is the source's choice: the trainer's every ``online.sync_every`` rounds, or those of
    S versions ago; every rollout carries the version that made it), scores them with
    ``reward_fn(completion, reference_answer)`` (default: the strict grader), and the learner takes
    ``inner_epochs`` optimiser steps on them.

    SPIN-style methods (``pairs_from_iterate``) instead freeze an iterate for a whole iteration
    (``online.pair_refresh_every`` passes over the prompts): it samples every rejected answer of the
    iteration and is the reference; then the trained policy becomes the next iterate.

    ``curve`` (a :class:`~oxbench.engine.curves.Curve`) takes learning-curve points between rounds, at 0
    rollouts and every ``eval.every``; their time counts in neither gen_seconds nor train_seconds.

    With ``ckpt`` the run resumes from its latest checkpoint and offers one after every round.
    """
    loop = OnlineLoop(cfg, spec, hparams, model, tokenizer, prompts, run, logger, reward_fn, ckpt)
    return loop.engine, loop.run_all(curve)


class OnlineLoop:
    """One online run's parts (engine, learner, rollout worker, experience source, collapse detector)
    and its loop, a method per phase: :meth:`sample` one round from the source, :meth:`learn` from it
    (``inner_epochs`` optimiser steps, each logged with the round's compute and the batch's
    diagnostics), stopping at a collapse when ``online.collapse`` asks."""

    def __init__(self, cfg, spec, hparams, model, tokenizer, prompts, run, logger, reward_fn, ckpt=None):
        o, seeds = cfg.online, cfg.seeds()
        self.cfg, self.spec, self.hparams, self.prompts, self.run, self.logger = (
            cfg,
            spec,
            hparams,
            prompts,
            run,
            logger,
        )
        self.reward_fn, self.res, self.start, self.version = reward_fn, TrainResult(), time.time(), 0
        self.ws, self.rk = D.world_size(), D.rank()
        if o.source == "async" and self.ws > 1:
            raise ValueError(f"run {run}: online.source 'async' runs at world size 1 (got {self.ws} ranks)")
        micro = micro_batches_per_rank(o.prompts_per_batch, cfg.train.batch_size, self.ws, run)
        self.per_rank, self.n_updates = o.prompts_per_batch // self.ws, o.rounds * o.inner_epochs
        model, lm, self.live_ref = online_policy(spec, hparams, model, seeds["init"])
        self.res.paths = fast_paths(o, spec, lm)
        # async: the producer samples on a copy of its own (its vLLM server too); the learner's copy never does
        backend = "hf" if o.source == "async" else self.res.paths["online.backend"]
        self.worker = RolloutWorker(
            lm, tokenizer, max_len=cfg.data.max_len, vllm=vllm_options(o), backend=backend
        )
        self.engine = build_engine(model, cfg, self.n_updates, grad_accum=micro)
        self.learner = Learner(spec=spec, hparams=hparams, engine=self.engine, tokenizer=tokenizer,
                               live_ref=self.live_ref, max_len=self.worker.max_len,
                               max_new_tokens=o.max_new_tokens, micro_batches=micro, run=run,
                               diagnostic_is_cap=o.diagnostic_is_cap,
                               ess_lr=o.ess_lr, ess_lr_base=o.ess_lr_base,
                               share_prompt=self.res.paths["online.share_prompt"])  # fmt: skip
        self.sampler = make_sampler(len(prompts), seed=seeds["data"], rank=self.rk, world_size=self.ws)
        self.detector = CollapseDetector(**o.collapse.model_dump()) if o.collapse is not None else None
        self.consumed: list[str] = []
        self.ckpt, self.first_round = ckpt, 0
        self.saved = _resume(ckpt, self.engine, self.res, logger, self.learner.state, self.live_ref)
        if self.saved is not None:
            self.restore(self.saved)
        per_iteration = rounds_per_iteration(spec, len(prompts), cfg)
        self.source = make_source(cfg, self.worker, per_iteration, self.live_ref, self.producer_job)
        if self.saved is not None:
            self.source.load_state_dict(self.saved["source"])

    def snapshot(self, next_round: int, curve) -> dict:
        """Everything the loop carries from one round to the next (a checkpoint's content)."""
        d = self.detector
        return {"engine": C.engine_state(self.engine), "rng": C.rng_state(), "history": self.res.history,
                "compute": self.res.compute, "collapse": self.res.collapse, **self.learner.state_dict(),
                "round": next_round, "version": self.version,
                "consumed": self.consumed, "source": self.source.state_dict(),
                "live_ref": None if self.live_ref is None else self.live_ref.model.state_dict(),
                "worker": {"weights": self.worker.model.state_dict(), "version": self.worker.version},
                "detector": None if d is None else {"rewards": d.rewards, "best_verified": d.best_verified},
                "curve": None if curve is None else curve.state()}  # fmt: skip

    def restore(self, saved: dict) -> None:
        """The loop's part of a checkpoint (:func:`_resume` loaded the engine's and the loss's). An
        asynchronous producer restarts from the learner's weights at the round it resumes."""
        self.first_round, self.version, self.consumed = saved["round"], saved["version"], saved["consumed"]
        self.res.collapse = saved["collapse"]
        self.learner.load_state_dict(saved)
        if self.cfg.online.source == "async":
            self.worker.sync(self.weights(), self.version)
        else:
            self.worker.sync(saved["worker"]["weights"], saved["worker"]["version"])
        if self.detector is not None:
            self.detector.rewards = saved["detector"]["rewards"]
            self.detector.best_verified = saved["detector"]["best_verified"]

    def weights(self) -> dict:
        return lm_state(full_state_dict(self.engine))

    def seed(self, rnd: int) -> int:
        return self.cfg.seeds()["sampling"] * 100_003 + rnd * 1009 + self.rk

    def producer_job(self) -> RoundPlan:
        """What the asynchronous producer needs to generate every round itself."""
        o = self.cfg.online
        return RoundPlan(rounds=[_round_prompts(self.prompts, r, self.per_rank, self.sampler) for r in range(o.rounds)],
                         seeds=[self.seed(r) for r in range(o.rounds)], n=o.n, temperature=o.temperature,
                         max_new_tokens=o.max_new_tokens, reward_fn=self.reward_fn, inner_epochs=o.inner_epochs,
                         staleness=o.staleness, max_len=self.cfg.data.max_len, backend=self.res.paths["online.backend"],
                         vllm=vllm_options(o), threads=max(1, torch.get_num_threads() // 2),
                         first_round=self.first_round)  # fmt: skip

    def run_all(self, curve) -> TrainResult:
        res, o = self.res, self.cfg.online
        if self.saved is not None and curve is not None:
            curve.restore(self.saved["curve"])
        self.engine.train()
        rounds = range(self.first_round, o.rounds)
        try:
            with C.checkpointable() if self.ckpt is not None else contextlib.nullcontext():
                self._rounds(rounds, curve)
            if curve is not None:
                curve.maybe(res.compute, self.weights, step=self.version, last=True)
        finally:
            self.source.close()  # an asynchronous producer process ends with its loop
            self.worker.close()  # a vLLM server process too
        res.data_order_sha = order_sha([i for part in D.all_gather_objects(self.consumed) for i in part])
        res.optimizer_steps, res.seconds = self.version, time.time() - self.start
        res.loss_state = self.learner.state.as_dict()
        return res

    def _rounds(self, rounds: range, curve) -> None:
        res = self.res
        for rnd in progress(rounds, f"{self.run}: online rounds", enabled=D.is_main()):
            if curve is not None:
                row = curve.maybe(res.compute, self.weights, step=self.version)
                if _collapsed(
                    res, self.detector, self.version, verified=(row or {}).get("accuracy_verified")
                ):
                    break
            experience, stats, gen_start = self.sample(rnd)
            rewards = torch.tensor([r.reward for r in experience], device="cpu")  # host bookkeeping
            self.learn(rnd, experience, stats, rewards, gen_start)
            if self.detector is not None and (  # off: no per-round gather of the rewards
                (res.collapse and self.detector.stop)
                or _collapsed(res, self.detector, self.version, reward=_mean_over_ranks(rewards))
            ):
                break
            if self.ckpt is not None:
                self.ckpt.boundary(
                    self.version, lambda r=rnd: self.snapshot(r + 1, curve), last=rnd == rounds[-1]
                )

    def sample(self, rnd: int) -> tuple[list, dict, float]:
        """This round's graded rollouts from the source, their statistics and compute."""
        o = self.cfg.online
        rows = _round_prompts(self.prompts, rnd, self.per_rank, self.sampler)
        self.consumed += [r["id"] for r in rows]
        gen_start = time.time()
        sample = functools.partial(self.worker.rollouts, rows, n=o.n, temperature=o.temperature,
                                   max_new_tokens=o.max_new_tokens, seed=self.seed(rnd), reward_fn=self.reward_fn,
                                   group_offset=self.rk * self.per_rank)  # fmt: skip
        experience = self.source.batch(rnd, self.version, self.weights, sample)
        stats = rollout_stats(experience, self.ws) | _ledger_round(experience, self.worker.max_len)
        stats["gen_seconds"] = time.time() - gen_start  # weight sync + sampling + grading, this rank
        stats |= self.worker.take_sync_seconds()  # of it, the weight sync (async: the source's publish)
        _add(self.res.compute, rollouts=stats["rollouts"], generated_tokens=stats["generated_tokens"],
             gen_seconds=stats["gen_seconds"])  # fmt: skip
        return experience, stats, gen_start

    def learn(self, rnd: int, experience: list, stats: dict, rewards: torch.Tensor, gen_start: float) -> None:
        """``inner_epochs`` optimiser steps on the round; a non-finite loss is a collapse when detection is on."""
        o, res, learner = self.cfg.online, self.res, self.learner
        train_start = time.time()
        prepared = learner.prepare(experience, self.version)
        for _ in range(o.inner_epochs):
            try:
                micro_metrics, gn = learner.update(
                    prepared, self.version, progress=self.version / self.n_updates
                )
            except NonFiniteLoss as exc:
                if self.detector is None:
                    raise
                res.collapse = res.collapse or {"step": self.version, "reason": str(exc).split(": ", 1)[-1]}
                return
            self.version += 1
            self.source.after_step(self.version, self.weights)
            _maybe_update_reference(self.spec, self.hparams, self.live_ref, self.engine, self.version)
            stats["train_seconds"], train_start = time.time() - train_start, time.time()
            cumulative = _add(
                res.compute, trained_tokens=stats["trained_tokens"], train_seconds=stats["train_seconds"]
            )
            if self.version % self.cfg.train.log_every == 0 or rnd == o.rounds - 1:
                extra = {"round": rnd, "reward_mean": rewards.mean().item(), **stats, **cumulative,
                         **learner.diagnostics, "rollouts_per_s": stats["rollouts"] / max(1e-9, time.time() - gen_start),
                         "policy_version": self.worker.version, "elapsed": time.time() - self.start,
                         **self.source.stats}  # fmt: skip
                _log(res.history, self.logger, self.engine, self.version, micro_metrics, extra, gn)


def _mean_over_ranks(values: torch.Tensor) -> float:
    parts = D.all_gather_objects((float(values.sum()), values.numel()))
    return sum(s for s, _ in parts) / max(1, sum(n for _, n in parts))


def _collapsed(res: TrainResult, detector, step: int, *, reward=None, verified=None) -> bool:
    """Whether to stop: ``detector`` (None: detection off) saw a collapse in this round's ``reward`` or a
    curve point's ``verified`` accuracy (rank 0's decision, which holds the curve, binds every rank).
    The first collapse is recorded in ``res.collapse``."""
    if detector is None:
        return False
    reason = detector.observe_reward(reward) if reward is not None else detector.observe_verified(verified)
    reason = D.all_gather_objects(reason)[0]
    if reason and res.collapse is None:
        res.collapse = {"step": step, "reason": reason}
    return bool(reason) and detector.stop


def _maybe_update_reference(spec, hparams, live_ref, engine, step: int) -> None:
    """Apply the spec's ``reference_update`` after optimiser step ``step`` (TR-DPO), if it asks for one."""
    if live_ref is None or spec.reference_update is None:
        return
    alpha = spec.reference_update(step, **hparams)
    if alpha is not None:
        live_ref.refresh(lm_state(full_state_dict(engine)), alpha)


def rollout_stats(experience: list, world_size: int = 1) -> dict:
    """What shows whether RL can learn from a rollout batch (this rank's): the share of groups whose
    rewards are all the same (they carry no group-relative signal) and the share of rollouts cut off
    at ``max_new_tokens`` (truncated)."""
    groups: dict[int, set] = {}
    for r in experience:
        groups.setdefault(r.group, set()).add(r.reward)
    return {
        "rollouts": len(experience) * world_size,
        "zero_variance_groups": sum(len(v) == 1 for v in groups.values()) / max(1, len(groups)),
        "truncated": sum(not r.finished for r in experience) / max(1, len(experience)),
    }
