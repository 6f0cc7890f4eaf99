"""The policy as a trainable model: an optional value head, the DeepSpeed engine with its optimiser and
learning-rate schedule, and the state dicts read from it (gathered under ZeRO-3).

Every method trains the same :func:`build_engine`; only the module differs (a value head for PPO-style
losses, :func:`online_policy`), and only the loss differs after that.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

import oxbench.device as placement
from oxbench.config import RunConfig, zero_stage
from oxbench.engine import distributed as D
from oxbench.engine.reference import LiveReference
from oxbench.utils import warmup_cosine as schedule


class PolicyWithValue(nn.Module):
    """A causal LM plus a scalar value head on its last hidden state (for ``needs_value_model``)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        self.value_head = nn.Linear(lm.config.hidden_size, 1, device=lm.device)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, attention_mask, use_cache=False):
        out = self.lm(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=use_cache
        )
        # the head's own dtype (DeepSpeed's bf16 casts it with the LM), its values in fp32 for the loss
        hidden = out.hidden_states[-1].to(self.value_head.weight.dtype)
        return {"logits": out.logits, "value": self.value_head(hidden).float().squeeze(-1)}

    def generate(self, *args, **kwargs):
        return self.lm.generate(*args, **kwargs)

    @property
    def device(self):
        return self.lm.device


def warmup_cosine(
    total: int,
    warmup_ratio: float,
    min_ratio: float = 0.0,
    *,
    constant: bool = False,
    warmup_steps: int | None = None,
):
    """Linear warm-up (``warmup_steps``, else ``warmup_ratio`` of ``total``), then cosine decay to
    ``min_ratio`` (or a flat 1 with ``constant``)."""
    warmup = int(round(total * warmup_ratio)) if warmup_steps is None else warmup_steps
    return schedule(total, warmup, min_ratio=min_ratio, constant=constant)


def build_engine(model, cfg: RunConfig, total_steps: int, grad_accum: int | None = None):
    """DeepSpeed engine; ``grad_accum``: micro-batches per optimiser step (default ``train.grad_accum``)."""
    deepspeed = D.import_deepspeed()
    placement.place(model)  # DeepSpeed would move it too; the frozen copies made from it follow the rank
    t = cfg.train
    accum = t.grad_accum if grad_accum is None else grad_accum
    params = [p for p in model.parameters() if p.requires_grad]
    # foreach: one kernel per op over all tensors, bitwise the per-parameter loop's result
    opt = torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay, betas=(0.9, 0.999), foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        warmup_cosine(
            total_steps,
            t.warmup_ratio,
            t.min_lr_ratio,
            constant=t.schedule == "constant",
            warmup_steps=t.warmup_steps,
        ),
    )
    ds_config = {
        "train_micro_batch_size_per_gpu": t.batch_size,
        "gradient_accumulation_steps": accum,
        "train_batch_size": t.batch_size * accum * D.world_size(),
        "gradient_clipping": t.max_grad_norm,
        "zero_optimization": {"stage": zero_stage(cfg)},
        "bf16": {"enabled": cfg.model.dtype == "bf16"},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=sched, config=ds_config)
    return engine


@contextlib.contextmanager
def gathered(module):
    """``module`` with its full parameters for the duration: under ZeRO-3 (its parameters partitioned) a
    gather, a collective every rank enters; otherwise nothing to do. The weight gather every sync, snapshot
    and evaluation takes (``sync_s`` counts it: tests slow it down through this name)."""
    params = list(module.parameters())
    if not any(hasattr(p, "ds_id") for p in params):  # DeepSpeed marks ZeRO-3's partitioned parameters
        yield module
        return
    deepspeed = D.import_deepspeed()
    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        yield module


def to_host(state: dict[str, torch.Tensor], *, copy: bool = True) -> dict[str, torch.Tensor]:
    """``state`` on the host: a tensor on a CUDA device goes through pinned memory (one asynchronous copy
    each, then one wait for them all); a host tensor is cloned (``copy``) or passed as it is. On a CPU-only
    build nothing is pinned (it would fail) and the copies are the plain clones they always were."""
    out, waits = {}, False
    for k, v in state.items():
        v = v.detach()
        if v.device.type == "cuda" and torch.cuda.is_available():
            out[k] = torch.empty(v.shape, dtype=v.dtype, device="cpu", pin_memory=True)
            out[k].copy_(v, non_blocking=True)
            waits = True
        else:
            out[k] = v.clone() if copy and v.device.type == "cpu" else v.to("cpu", copy=copy)
    if waits:
        torch.cuda.synchronize()  # the pinned copies are complete before anyone reads them
    return out


def full_state_dict(engine) -> dict[str, torch.Tensor]:
    """The policy's full weights on every rank (gathered under ZeRO-3): detached host copies, staged
    through pinned memory from a GPU (a snapshot that outlives the step: checkpoints, the delayed
    source's ring, evaluation)."""
    with gathered(engine.module) as module:
        return to_host(module.state_dict())


@torch.no_grad()
def copy_weights(source: nn.Module, target: nn.Module) -> int:
    """``source``'s weights (the live policy LM, gathered under ZeRO-3) into ``target``'s, a copy of the
    same architecture (a rollout copy), in place: device to device on a GPU, no host round trip and no
    intermediate copy. Bitwise what ``target.load_state_dict(full_state_dict(...))`` gives: both are one
    ``copy_`` per tensor. Keys ``target`` lacks are skipped, as ``load_state_dict(strict=False)`` does.
    Returns the bytes copied (a tied weight counts once per name, as it is copied)."""
    own, copied = target.state_dict(), 0
    with gathered(source) as module:
        for k, v in module.state_dict().items():
            if k in own:
                own[k].copy_(v)
                copied += own[k].numel() * own[k].element_size()
    return copied


def lm_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Strip a :class:`PolicyWithValue` prefix so the state loads into the bare LM."""
    if any(k.startswith("lm.") for k in state):
        return {k[3:]: v for k, v in state.items() if k.startswith("lm.")}
    return state


def policy_weights(engine) -> dict[str, torch.Tensor]:
    """The bare LM's full weights (no value head) on every rank: what a rollout copy, a reference or an
    evaluation loads (a collective under ZeRO-3)."""
    return lm_state(full_state_dict(engine))


def online_policy(plan, model):
    """``(model, lm, live_ref)`` for an online run of ``plan`` (a :class:`~oxbench.engine.plan.RunPlan`):
    the policy (with a value head, seeded, when its method has one), its bare LM, and a frozen reference
    copy when the run reads one (else None)."""
    if plan.caps.value_model:
        torch.manual_seed(plan.seeds["init"])
        model = PolicyWithValue(model)
    lm = model.lm if isinstance(model, PolicyWithValue) else model
    return model, lm, LiveReference(lm) if plan.caps.reference == "live" else None
