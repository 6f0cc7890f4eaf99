"""The one training loop: every method runs here, on DeepSpeed, and differs only in its loss.

The trainer reads the loss's declared capabilities (``data``, ``needs_reference``,
``needs_value_model``, ``needs_full_logits``, ``updates_reference``,
``generates_own_pairs``) and never its name:

* offline data (``sft``, ``pairs``, ``unpaired``): a seeded ``DistributedSampler`` order,
  micro-batches, reference log-probs from a cache built once at step 0;
* experience from the current policy (``online`` rollouts, or pairs for methods that
  generate their own): rounds of rollout -> reward -> loss, with ``n`` rollouts per prompt,
  ``B_p`` prompts per round and ``M`` rounds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from losses import LossInputs, LossSpec
from oxbench.config import RunConfig
from oxbench.data.batching import encode_pair, logps_from_output
from oxbench.data.formatting import format_completion, format_prompt
from oxbench.data.sampler import epoch_indices, make_sampler, order_sha
from oxbench.engine import distributed as D
from oxbench.engine.batches import ROLES, build_offline_inputs, encode_examples
from oxbench.engine.reference import LiveReference, RefCache
from oxbench.engine.rollout import RolloutWorker, collate_rollouts
from oxbench.tasks.grading import is_correct
from oxbench.utils import progress


class NonFiniteLoss(RuntimeError):
    pass


@dataclass
class TrainResult:
    steps: int = 0
    data_order_sha: str = ""
    history: list[dict] = field(default_factory=list)
    data_stats: dict = field(default_factory=dict)
    seconds: float = 0.0


# --------------------------------------------------------------------------- model + engine


class PolicyWithValue(nn.Module):
    """A causal LM plus a scalar value head on its last hidden state (for ``needs_value_model``)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        self.value_head = nn.Linear(lm.config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, attention_mask):
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return {"logits": out.logits, "value": self.value_head(out.hidden_states[-1].float()).squeeze(-1)}

    def generate(self, *args, **kwargs):
        return self.lm.generate(*args, **kwargs)

    @property
    def device(self):
        return self.lm.device


def warmup_cosine(total: int, warmup_ratio: float, min_ratio: float = 0.0, *, constant: bool = False):
    """Linear warm-up, then cosine decay to ``min_ratio`` (or a flat 1 with ``constant``)."""
    warmup = int(round(total * warmup_ratio))

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if constant:
            return 1.0
        frac = (step - warmup) / max(1, total - warmup)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))

    return f


def build_engine(model, cfg: RunConfig, total_steps: int):
    import deepspeed

    t = cfg.train
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay, betas=(0.9, 0.999))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, warmup_cosine(total_steps, t.warmup_ratio, t.min_lr_ratio, constant=t.schedule == "constant")
    )
    ds_config = {
        "train_micro_batch_size_per_gpu": t.batch_size,
        "gradient_accumulation_steps": t.grad_accum,
        "train_batch_size": t.batch_size * t.grad_accum * D.world_size(),
        "gradient_clipping": t.max_grad_norm,
        "zero_optimization": {"stage": t.zero_stage},
        "bf16": {"enabled": cfg.model.dtype == "bf16"},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=sched, config=ds_config)
    return engine


def full_state_dict(engine) -> dict[str, torch.Tensor]:
    """The policy's full weights on every rank (gathered under ZeRO-3), detached CPU copies."""
    module = engine.module
    if engine.zero_optimization_stage() == 3:
        import deepspeed

        params = list(module.parameters())
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            return {k: v.detach().clone().cpu() for k, v in module.state_dict().items()}
    return {k: v.detach().clone().cpu() for k, v in module.state_dict().items()}


def lm_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Strip a :class:`PolicyWithValue` prefix so the state loads into the bare LM."""
    if any(k.startswith("lm.") for k in state):
        return {k[3:]: v for k, v in state.items() if k.startswith("lm.")}
    return state


def _check_finite(out, run: str, step: int) -> None:
    if not torch.isfinite(out.loss).all():
        raise NonFiniteLoss(f"run {run}: non-finite loss ({out.loss.item()}) at step {step}")


def _mean_metrics(items: list[dict]) -> dict:
    keys = {k for d in items for k in d}
    return {k: sum(d[k] for d in items if k in d) / sum(1 for d in items if k in d) for k in sorted(keys)}


def _grad_norm(engine) -> float | None:
    """The pre-clipping global gradient norm, read just before ``engine.step()`` at a boundary.

    DeepSpeed reports it on its ZeRO paths but returns ``None`` on the fp32 ZeRO-0 path, so there it
    is computed from the gradients (already averaged over ranks and accumulation steps)."""
    if engine.zero_optimization_stage() != 0:
        return None
    sq = sum(p.grad.detach().float().pow(2).sum() for p in engine.module.parameters() if p.grad is not None)
    return float(sq) ** 0.5


def _log(history, logger, engine, step, micro_metrics, extra, grad_norm=None):
    row = {"step": step, "lr": engine.get_lr()[0], **_mean_metrics(micro_metrics), **extra}
    gn = engine.get_global_grad_norm()
    gn = grad_norm if gn is None else gn
    if gn is not None:
        row["grad_norm"] = float(gn)
    history.append(row)
    if logger is not None:
        logger(row)


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
) -> tuple[object, TrainResult]:
    """Train on a fixed dataset (``spec.data`` in sft/pairs/unpaired). Returns (engine, result)."""
    t, seeds, res = cfg.train, cfg.seeds(), TrainResult()
    start = time.time()
    examples = encode_examples(spec.data, rows, tokenizer, cfg.data.max_len, kl_seed=seeds["data"])
    if not examples:
        raise RuntimeError(f"run {run}: no training examples for data kind {spec.data!r}")
    ws, rk = D.world_size(), D.rank()
    sampler = make_sampler(len(examples), seed=seeds["data"], rank=rk, world_size=ws)
    micro = []  # (epoch, [example indices]) in the order consumed
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
    res.data_order_sha = order_sha(consumed)

    live_ref = ref_cache = None
    needs_live = spec.updates_reference or spec.needs_full_logits
    if spec.needs_reference and needs_live:
        live_ref = LiveReference(model)
    engine = build_engine(model, cfg, n_steps)
    if spec.needs_reference and not needs_live:
        ref_cache = RefCache.build(
            engine.module,
            examples,
            ROLES[spec.data],
            tokenizer.pad_token_id,
            key_parts=ref_key or {"run": run},
        )
    sync_every = int(hparams.get("ref_model_sync_steps", 0) or 0)
    mix = float(hparams.get("ref_model_mixup_alpha", 1.0))

    engine.train()
    step, micro_metrics = 0, []
    for i, (epoch, mb) in enumerate(progress(micro, f"{run}: train (micro-batches)", enabled=D.is_main())):
        chunk = [examples[j] for j in mb]
        inputs = build_offline_inputs(
            spec.data,
            engine,
            chunk,
            tokenizer.pad_token_id,
            ref_cache=ref_cache,
            live_ref=live_ref,
            needs_full_logits=spec.needs_full_logits,
        )
        if i == 0 and ref_cache is not None and t.check_reference:
            _check_reference_equal(inputs, spec.data, run)
        out = spec.fn(inputs, **hparams)
        _check_finite(out, run, step)
        engine.backward(out.loss)
        boundary = engine.is_gradient_accumulation_boundary()
        gn = _grad_norm(engine) if boundary else None
        engine.step()
        micro_metrics.append({"loss": out.loss.item(), **out.metrics})
        if boundary:
            step += 1
            if step % t.log_every == 0 or step == n_steps:
                _log(
                    res.history,
                    logger,
                    engine,
                    step,
                    micro_metrics,
                    {"epoch": epoch, "elapsed": time.time() - start},
                    gn,
                )
            micro_metrics = []
            if live_ref is not None and spec.updates_reference and sync_every and step % sync_every == 0:
                live_ref.refresh(full_state_dict(engine), mix)
    res.steps, res.seconds = step, time.time() - start
    return engine, res


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
) -> tuple[object, TrainResult]:
    """Rounds of rollout -> reward -> loss. Rollouts carry the policy version that made them.

    ``reward_fn(completion, reference_answer) -> float`` defaults to the strict grader.
    """
    o, t, seeds, res = cfg.online, cfg.train, cfg.seeds(), TrainResult()
    start = time.time()
    ws, rk = D.world_size(), D.rank()
    if o.prompts_per_batch % (ws * t.grad_accum):
        raise ValueError(
            f"run {run}: online.prompts_per_batch={o.prompts_per_batch} must be divisible by "
            f"world size x train.grad_accum = {ws * t.grad_accum}"
        )
    per_rank = o.prompts_per_batch // ws
    per_micro = per_rank // t.grad_accum
    if spec.needs_value_model:
        torch.manual_seed(seeds["init"])
        model = PolicyWithValue(model)
    lm = model.lm if isinstance(model, PolicyWithValue) else model
    worker = RolloutWorker(lm, tokenizer, max_len=cfg.data.max_len)
    # a KL-regularised variant (beta > 0) of a method that is reference-free by default needs one too
    wants_ref = spec.needs_reference or float(hparams.get("beta", 0.0) or 0.0) > 0
    live_ref = LiveReference(lm) if wants_ref else None
    n_updates = o.steps * o.inner_epochs
    engine = build_engine(model, cfg, n_updates)
    sampler = make_sampler(len(prompts), seed=seeds["data"], rank=rk, world_size=ws)
    sync_every_ref = hparams.get("ref_model_sync_steps", 0)
    if sync_every_ref is None:  # one iteration = one pass over the prompts (SPIN)
        sync_every_ref = max(1, math.ceil(len(prompts) / o.prompts_per_batch)) * o.inner_epochs
    sync_every_ref = int(sync_every_ref or 0)
    mix = float(hparams.get("ref_model_mixup_alpha", 1.0))
    consumed, version = [], 0
    engine.train()
    for rnd in progress(range(o.steps), f"{run}: online rounds", enabled=D.is_main()):
        rows = _round_prompts(prompts, rnd, per_rank, sampler)
        consumed += [r["id"] for r in rows]
        if rnd % o.sync_every == 0:
            worker.sync(lm_state(full_state_dict(engine)), version)
        experience = worker.rollouts(
            rows,
            n=o.n,
            temperature=o.temperature,
            max_new_tokens=o.max_new_tokens,
            seed=seeds["sampling"] * 100_003 + rnd * 1009 + rk,
            reward_fn=reward_fn,
            group_offset=rk * per_rank,
        )
        rewards = torch.tensor([r.reward for r in experience])
        stats = rollout_stats(experience, ws)
        old_values: dict[int, torch.Tensor] = {}  # value head at rollout time, per micro-batch
        for _ in range(o.inner_epochs):
            micro_metrics = []
            for m in range(t.grad_accum):
                part = experience[m * per_micro * o.n : (m + 1) * per_micro * o.n]
                diag, tied = {}, False
                if spec.generates_own_pairs:
                    inputs, tied = _pair_inputs(spec, engine, live_ref, part, tokenizer, worker.max_len)
                    diag = {"skipped_tied": float(tied)}
                else:
                    inputs, diag = _rollout_inputs(
                        spec,
                        engine,
                        live_ref,
                        part,
                        tokenizer.pad_token_id,
                        worker.max_len,
                        version,
                        o.max_new_tokens,
                    )
                    if inputs.values is not None:
                        inputs.old_values = old_values.setdefault(m, inputs.values.detach())
                out = spec.fn(inputs, **hparams)
                _check_finite(out, run, version)
                engine.backward(out.loss * 0.0 if tied else out.loss)
                gn = _grad_norm(engine) if m == t.grad_accum - 1 else None
                engine.step()
                micro_metrics.append(diag if tied else {"loss": out.loss.item(), **out.metrics, **diag})
            version += 1
            if (
                live_ref is not None
                and spec.updates_reference
                and sync_every_ref
                and version % sync_every_ref == 0
            ):
                live_ref.refresh(lm_state(full_state_dict(engine)), mix)
            if version % t.log_every == 0 or rnd == o.steps - 1:
                _log(
                    res.history,
                    logger,
                    engine,
                    version,
                    micro_metrics,
                    {
                        "round": rnd,
                        "reward_mean": rewards.mean().item(),
                        **stats,
                        "elapsed": time.time() - start,
                    },
                    gn,
                )
    res.data_order_sha = order_sha([i for part in D.all_gather_objects(consumed) for i in part])
    res.steps, res.seconds = version, time.time() - start
    return engine, res


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


@torch.no_grad()
def token_entropy(logits: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean entropy (nats) of the policy's next-token distribution over the completion tokens."""
    logp = logits.float().log_softmax(-1)
    ent = -(logp.exp() * logp).sum(-1)
    return float((ent * mask).sum() / mask.sum().clamp(min=1))


def _rollout_inputs(
    spec, engine, live_ref, part, pad_id: int, max_len: int, version: int, max_new_tokens: int
):
    """(LossInputs, diagnostics) for one micro-batch of rollouts: the sampled ids, and the behaviour
    log-probs captured when they were sampled as ``old_token_logps`` (no second forward, no re-tokenising)."""
    batch, old = collate_rollouts(part, pad_id, max_len)
    out = engine(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logp, mask, logits = logps_from_output(out, batch, return_logits=True)
    inp = LossInputs(
        token_logps=logp,
        mask=mask,
        logps=logp.sum(-1),
        old_token_logps=old.to(logp.device),
        rewards=torch.tensor([r.reward for r in part], dtype=torch.float32),
        group_ids=torch.tensor([r.group for r in part], dtype=torch.long),
        policy_versions=torch.tensor([r.policy_version for r in part], dtype=torch.long),
        current_version=version,
        max_completion_length=max_new_tokens,
    )
    if live_ref is not None:
        inp.ref_token_logps = live_ref.logps(batch)[0]
    if spec.needs_value_model:
        inp.values = out["value"][:, :-1] * mask
    return inp, {"entropy": token_entropy(logits, mask)}


def _pair_examples(spec, part, tokenizer, max_len: int) -> list[dict]:
    """One pair example per group with a preference, in sampled ids: best vs worst sample
    (``self_play``; a group whose rewards all tie has none) or gold vs a wrong sample (``gold``)."""
    by_group: dict[int, list] = {}
    for r in part:
        by_group.setdefault(r.group, []).append(r)
    examples = []
    for g, rs in by_group.items():
        if spec.chosen_source == "gold":
            gold = format_completion(tokenizer, rs[0].answer)
            chosen = encode_pair(tokenizer, format_prompt(tokenizer, rs[0].question), gold, max_len)
            rejected = next((r for r in rs if not r.reward), rs[0]).sequence(max_len)
        else:
            best, worst = max(rs, key=lambda r: r.reward), min(rs, key=lambda r: r.reward)
            if best.reward == worst.reward:
                continue
            chosen, rejected = best.sequence(max_len), worst.sequence(max_len)
        examples.append({"id": f"{rs[0].prompt_id}/{g}", "chosen": chosen, "rejected": rejected})
    return examples


def _pair_inputs(spec, engine, live_ref, part, tokenizer, max_len: int) -> tuple[LossInputs, bool]:
    """(LossInputs, tied) for one micro-batch of a method that makes its own pairs.

    ``tied``: no group has a preference (every reward equal). The forward still runs, on one sample
    paired with itself, so that every rank makes the same collective calls, and the trainer multiplies
    that loss by zero: the micro-batch adds no gradient (it still counts in DeepSpeed's average over
    micro-batches and ranks) and logs only ``skipped_tied: 1``. Skipping the optimizer step instead would
    need every micro-batch of every rank tied at once, or drop the pairs the others have.
    """
    examples = _pair_examples(spec, part, tokenizer, max_len)
    tied = not examples
    if tied:
        seq = part[0].sequence(max_len)
        examples = [{"id": "tied", "chosen": seq, "rejected": seq}]
    return build_offline_inputs("pairs", engine, examples, tokenizer.pad_token_id, live_ref=live_ref), tied
