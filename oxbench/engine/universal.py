"""The engine's state in a rank-free form: any world size, any ZeRO stage can resume from it.

A DeepSpeed engine keeps its fp32 master weights and Adam moments in flat partitions whose layout
depends on the world size and the ZeRO stage. A checkpoint of those partitions resumes only on the
layout that wrote it. Here the state is kept per parameter instead, by name and at full shape:

* ``fp32``, ``exp_avg``, ``exp_avg_sq``: the master weight and AdamW's two moments of every trainable
  parameter, read through DeepSpeed's tensor-fragment API (``safe_get_full_fp32_param``,
  ``safe_get_full_optimizer_state``: a collective under ZeRO) or, without ZeRO, from the torch
  optimizer itself;
* ``step``: AdamW's step count (one for every parameter: they all step together).

Each rank keeps the parameters it owns (the ``i``-th trainable parameter belongs to rank ``i % world``),
so no rank holds more than its share. Loading reads every rank's share, whatever the world that wrote it.

Loading into an engine of another layout uses the same API the other way (``safe_set_full_*``), after
DeepSpeed has made its optimiser state: a ZeRO optimiser makes (and links) it at its first step, so
an engine that has taken none first takes one step of zero gradients (:func:`_make_optimizer_state`),
whose results are then overwritten. The low-precision weights the model computes with are set from
the masters, as DeepSpeed's own step sets them. Nothing of DeepSpeed's partition layout is read or
written here.
"""

from __future__ import annotations

import torch

from oxbench.engine import distributed as D

KEYS = ("fp32", "exp_avg", "exp_avg_sq")


def trainable(engine) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in engine.module.named_parameters() if p.requires_grad]


def _zero(engine) -> bool:
    return engine.zero_optimization_stage() > 0


def _base_optimizer(engine) -> torch.optim.Optimizer:
    """The torch optimizer doing the updates (DeepSpeed's wrappers hold it as ``.optimizer``)."""
    opt = engine.optimizer
    return opt.optimizer if isinstance(getattr(opt, "optimizer", None), torch.optim.Optimizer) else opt


def _masters(engine) -> list[torch.Tensor]:
    """Without ZeRO: the fp32 tensors the torch optimizer updates, in the order of :func:`trainable`
    (the parameters themselves in fp32; DeepSpeed's fp32 copies of them in bf16)."""
    return [p for group in _base_optimizer(engine).param_groups for p in group["params"]]


def full_state(engine) -> tuple[dict[str, torch.Tensor], int]:
    """This rank's share of the rank-free state, ``{"<param name>/<key>": full tensor}`` on the host, and
    AdamW's step count. Every rank must call it (a collective under ZeRO)."""
    named, out = trainable(engine), {}
    masters = None if _zero(engine) else _masters(engine)
    base = _base_optimizer(engine)
    for i, (name, p) in enumerate(named):
        if _zero(engine):
            from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

            values = {"fp32": safe_get_full_fp32_param(p)}
            values |= {k: safe_get_full_optimizer_state(p, k) for k in KEYS[1:]}
        else:
            st = base.state[masters[i]]
            values = {"fp32": masters[i], "exp_avg": st["exp_avg"], "exp_avg_sq": st["exp_avg_sq"]}
        if i % D.world_size() == D.rank():
            out |= {f"{name}/{k}": v.detach().float().cpu().clone() for k, v in values.items()}
    return out, _step(base)


def _step(base: torch.optim.Optimizer) -> int:
    steps = {int(st["step"]) for st in base.state.values() if "step" in st}
    if len(steps) > 1:
        raise RuntimeError(f"the optimiser's parameters are at different steps {sorted(steps)}")
    return steps.pop() if steps else 0


def load_full_state(engine, state: dict[str, torch.Tensor], step: int) -> None:
    """Set the engine's masters, moments, step count and model weights from ``state`` (every
    parameter's full tensors, gathered from every rank's share). Every rank must call it."""
    named = trainable(engine)
    missing = [f"{n}/{k}" for n, _ in named for k in KEYS if f"{n}/{k}" not in state]
    if missing:
        raise RuntimeError(f"the checkpoint has no {missing[0]} ({len(missing)} tensors missing)")
    if _zero(engine):
        _load_zero(engine, named, state)
    else:
        _load_plain(engine, named, state, step)
    base = _base_optimizer(engine)
    for st in base.state.values():
        if "step" in st:
            st["step"] = torch.tensor(float(step)) if torch.is_tensor(st["step"]) else step
    _set_weights(engine, named, state)


def _load_plain(engine, named, state: dict, step: int) -> None:
    """No ZeRO: write the torch optimizer's masters and state directly (its documented layout)."""
    base = _base_optimizer(engine)
    for (name, _), master in zip(named, _masters(engine)):
        master.data.copy_(state[f"{name}/fp32"])
        st = base.state[master]
        for k in KEYS[1:]:
            value = state[f"{name}/{k}"].to(master.device)
            st[k] = st[k].copy_(value) if k in st else value.clone()
        st.setdefault("step", torch.tensor(float(step)))


def _load_zero(engine, named, state: dict) -> None:
    from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

    if not _base_optimizer(engine).state:
        _make_optimizer_state(engine)
    for name, p in named:
        dev = engine.device
        safe_set_full_fp32_param(p, state[f"{name}/fp32"].to(dev))
        for k in KEYS[1:]:
            safe_set_full_optimizer_state(p, state[f"{name}/{k}"].to(dev), k)


def _make_optimizer_state(engine) -> None:
    """One optimiser step of zero gradients through the engine's public API, so a ZeRO optimiser that
    has not stepped yet makes and links its state (overwritten next). Its scheduler and counters are
    put back by the caller (the checkpoint holds them)."""
    ids = torch.zeros((1, 1), dtype=torch.long, device=engine.device)
    for _ in range(engine.gradient_accumulation_steps()):
        out = engine(input_ids=ids, attention_mask=torch.ones_like(ids))
        values = out.values() if isinstance(out, dict) else [out.logits]
        loss = sum(v.float().sum() for v in values if torch.is_tensor(v)) * 0.0
        engine.backward(loss)
        engine.step()


@torch.no_grad()
def _set_weights(engine, named, state: dict) -> None:
    """The weights the model computes with, from the masters (in the model's dtype), as a step sets them;
    under ZeRO-3 through a gather whose changes DeepSpeed partitions again."""
    params = [p for _, p in named]
    if engine.zero_optimization_stage() == 3:
        from deepspeed import zero

        with zero.GatheredParameters(params, modifier_rank=0):
            if D.rank() == 0:
                for name, p in named:
                    p.data.copy_(state[f"{name}/fp32"].to(p.device, p.dtype).view_as(p))
        return
    for name, p in named:
        p.data.copy_(state[f"{name}/fp32"].to(p.device, p.dtype).view_as(p))
