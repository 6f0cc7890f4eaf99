"""GPU memory per rank, checked before training, and out-of-memory failures told in one line.

:func:`preflight` turns the estimate (:func:`oxbench.engine.cost.estimate`) into a one-line error before
training when a run's static memory (weights, gradients, optimiser state, the reference and the rollout
copy) cannot fit the GPU: the case of a 7B run under ZeRO-3 whose HF rollout copy is a full, unsharded
15.2 GB on every rank. :func:`oom_line` names the settings to lower when memory runs out anyway;
:func:`gpu_peak_gib` and :func:`cpu_peak_bytes` measure what a run really held.
"""

from __future__ import annotations

from oxbench.config import zero_stage
from oxbench.engine.cost import GIB, MemoryEstimate, ModelShape, Setup, estimate, setup_for_run


class PreflightError(RuntimeError):
    """A run whose static memory cannot fit its GPU; the message is one line naming what to change."""


def preflight(shape: ModelShape, setup: Setup, *, run: str, gpu_bytes: int | None) -> MemoryEstimate:
    """The estimate of ``run``; a :class:`PreflightError` (one line) when its static memory (weights,
    gradients, optimiser state, reference and rollout copies) exceeds ``gpu_bytes`` (None: no GPU, no check).
    Activations are left out of the check: they depend on lengths the estimate can only bound."""
    est = estimate(shape, setup)
    if gpu_bytes is None or est.static + est.cuda_context <= gpu_bytes:
        return est
    g = est.gib()
    need = (est.static + est.cuda_context) / GIB
    shards = g["weights"] + g["gradients"] + g["optimizer"]
    parts = f"ZeRO-{setup.zero_stage} shards and optimiser state {shards:.1f} GiB at world size {setup.world}"
    if est.reference:
        parts += f", reference copy {g['reference']:.1f} GiB"
    if setup.backend in ("hf", "lean"):
        raise PreflightError(
            f"run {run}: the {setup.backend} rollout copy needs {g['rollout_weights']:.1f} GiB per rank beside "
            f"the {parts} ({need:.1f} GiB before activations, the GPU has {gpu_bytes / GIB:.1f} GiB): use "
            "online.backend vllm with online.vllm_placement separate, model.lora.enabled, more GPUs with "
            "train.zero_stage 3, or a smaller model"
        )
    copy = f", vLLM share {g['rollout_weights']:.1f} GiB" if est.rollout_weights else ""
    raise PreflightError(
        f"run {run}: needs {need:.1f} GiB per rank before activations ({parts}{copy}), the GPU has "
        f"{gpu_bytes / GIB:.1f} GiB: use model.lora.enabled, more GPUs with train.zero_stage 3"
        f"{', a smaller online.vllm_memory' if copy else ''} or a smaller model"
    )


def gpu_bytes() -> int | None:
    """This process's GPU's total memory (None without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info()[1])


def check_run(plan, model, *, run: str) -> MemoryEstimate | None:
    """:func:`preflight` for a run (its :class:`~oxbench.engine.plan.RunPlan`) about to train ``model``
    (skipped without CUDA): raises before training when the run cannot fit. The estimate on a GPU, else
    None."""
    total = gpu_bytes()
    if total is None:
        return None
    online = plan.caps.online
    shape = ModelShape.from_config(getattr(model, "lm", model).config)
    setup = setup_for_run(
        plan.cfg,
        shape.vocab,
        online=online,
        pairs=plan.caps.data == "pairs",
        world=plan.world_size,
        gpu_bytes=total,
        reference=online and plan.caps.reference == "live",
    )
    return preflight(shape, setup, run=run, gpu_bytes=total)


OOM_MARKERS = ("CUDA out of memory", "DefaultCPUAllocator: can't allocate memory", "out of memory")


def oom_line(exc: BaseException, run: str, cfg) -> str | None:
    """One line for an out-of-memory failure (CUDA's ``torch.OutOfMemoryError``, a CPU ``MemoryError``
    or allocator error) naming the cell and the settings to lower, with their values; None otherwise."""
    text = str(exc)
    cuda = type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in text
    if not cuda and not isinstance(exc, MemoryError) and not any(m in text for m in OOM_MARKERS[1:]):
        return None
    m, t = cfg.model, cfg.train
    switches = [
        ("model.lora.enabled", m.lora.enabled, "true"),
        ("train.zero_stage", zero_stage(cfg) == 3, "3"),
        ("model.gradient_checkpointing", bool(getattr(m, "gradient_checkpointing", False)), "true"),
    ]
    turn = [f"{name} {value}" for name, done, value in switches if not done]
    advice = f"lower train.batch_size ({t.batch_size}) or data.max_len ({cfg.data.max_len})"
    advice += f", or set {', '.join(turn)}" if turn else ""
    return f"OutOfMemoryError ({'GPU' if cuda else 'CPU'}) in cell {run}: {advice}"


def reset_gpu_peak() -> None:
    """Start a cell's peak-memory count (a warm worker runs many cells in one process)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def gpu_peak_gib() -> float | None:
    """The most GPU memory this process's tensors held since :func:`reset_gpu_peak` (None without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / GIB, 2)


def cpu_peak_bytes(fn) -> tuple[object, int]:
    """``(fn(), peak)``: the most bytes of torch tensors the CPU allocator held at once while ``fn`` ran,
    above what it held before (the CPU's counterpart of ``torch.cuda.max_memory_allocated`` after
    a reset, which the CPU allocator lacks).

    It runs ``fn`` under ``torch.profiler`` with ``profile_memory``: every allocation and free of a tensor's
    storage through torch's CPU allocator is an event with its size; their running sum in time order is
    the memory held above the start, and its maximum the peak. Storage that existed before (the model's
    weights) is not in it (its frees are not reported either): add it. Only tensor storage counts, as on
    a GPU: not the Python heap, library workspaces (oneDNN's scratch) or the allocator's slack."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    held = peak = 0
    for _, e in sorted(enumerate(events), key=lambda ie: (ie[1].start_ns(), ie[0])):
        if e.device_type().name == "CPU":
            held += e.nbytes()
            peak = max(peak, held)
    return out, peak
