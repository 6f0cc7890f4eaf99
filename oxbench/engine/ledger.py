"""A cell's compute ledger before it runs, and the time it should take on GPUs.

The trainer's ledger (:data:`oxbench.engine.loop.LEDGER`) records what a cell did: rollouts, generated
tokens, trained tokens, generation and training seconds. :func:`expected_ledger` gives the same counts from
a config, as upper bounds (every completion as long as ``max_new_tokens``, every trained sequence its
prompt plus that), and :func:`expected_seconds` turns them into time at stated per-GPU rates:

* training: 6 FLOPs per parameter per trained token (8 with gradient checkpointing, which recomputes the
  forward) at :attr:`Rates.mfu` of the bf16 matrix rate (an H200 measured 790 TFLOP/s);
* generation: decoding is bound by reading the weights once per step, so a step of :attr:`Rates.batch`
  sequences takes the weights' bytes over half the HBM bandwidth (H200: 4.3 TB/s measured), and no less
  than :attr:`Rates.step_floor_s` (kernel launches); steps spread over the GPUs (data-parallel engines).

Both rates are assumptions until the GPU smoke's measured tokens/s (``scripts/gpu_smoke.sh``) replace them;
the table in the docs says so (:func:`oxbench.grid.estimates.ledger_table`, ``python -m oxbench.grid.estimates``).
"""

from __future__ import annotations

from dataclasses import dataclass

from oxbench.engine.memory import ModelShape

GSM8K_PROMPT_TOKENS = 200  # a GSM8K question in the chat template, Qwen2.5 tokenizer (about; upper side)


@dataclass(frozen=True)
class Rates:
    """Per-GPU speeds the expected times assume (module docstring)."""

    matmul_flops: float = 790e12  # bf16, H200 (measured on the lent machine: 769-798 TFLOP/s)
    mfu: float = 0.35  # share of it a training step reaches
    hbm_bytes_per_s: float = 4.3e12  # H200 (measured device-to-device copy)
    batch: int = 256  # sequences per decode step
    step_floor_s: float = 0.010  # a decode step's least time (launches, sampling)


def expected_ledger(
    cfg, *, online: bool, pairs: bool = False, prompt_tokens: int = GSM8K_PROMPT_TOKENS
) -> dict:
    """The ledger's counts for ``cfg`` (upper bounds; offline: the self-play samples it prepares count as
    generated tokens)."""
    o, d, t = cfg.online, cfg.data, cfg.train
    if online:
        rollouts = o.prompts_per_batch * o.n * o.rounds
        seq = min(d.max_len, prompt_tokens + o.max_new_tokens)
        return {
            "rollouts": rollouts,
            "generated_tokens": rollouts * o.max_new_tokens,
            "trained_tokens": rollouts * seq * o.inner_epochs,
        }
    n = d.n_train or 7473
    seq = min(d.max_len, prompt_tokens + d.max_new_tokens)
    sampled = n * d.self_play_k if pairs or cfg.method in ("rft", "kto") else 0
    trained = n * t.epochs * seq * (2 if pairs else 1)
    if t.max_steps is not None:
        trained = min(trained, t.max_steps * t.batch_size * t.grad_accum * seq * (2 if pairs else 1))
    return {"rollouts": 0, "generated_tokens": sampled * d.max_new_tokens, "trained_tokens": trained}


def expected_seconds(
    ledger: dict, shape: ModelShape, gpus: int, *, checkpointing: bool = False, rates: Rates = Rates()
) -> dict:
    """Training and generation seconds of ``ledger`` on ``gpus`` GPUs at ``rates``."""
    params = shape.params()
    train = ledger["trained_tokens"] * (8 if checkpointing else 6) * params / (rates.matmul_flops * rates.mfu)
    step = max(2 * params / (0.5 * rates.hbm_bytes_per_s), rates.step_floor_s)
    gen = ledger["generated_tokens"] / rates.batch * step
    return {"train_s": train / gpus, "gen_s": gen / gpus, "total_s": (train + gen) / gpus}


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
