"""Cost estimates, in one place: what a cell will hold in memory and how long it will take, before it runs.

Everything that predicts a cost lives here; ``oxbench costs`` prints the docs' tables from the recipes
(``oxbench_cli/costs.py``) and :mod:`oxbench.engine.memory` checks a run against its GPU before training.

**Memory per rank** (:func:`estimate`), a pure-Python accounting (no torch) from a model's shape
(:class:`ModelShape`) and the run's settings (:class:`Setup`), in bytes per rank:

* **weights**: every parameter in the model's dtype, divided by the world size under ZeRO-3;
* **gradients** of the trainable parameters (all of them, or LoRA's adapters only), divided under ZeRO-2/3;
* **optimiser**: AdamW's two moments, plus an fp32 master copy in bf16 (12 bytes per trainable
  parameter; 8 in fp32), divided under ZeRO-1/2/3 (the ZeRO paper's accounting);
* **zero3_working**: under ZeRO-3 the gathered parameters in flight: the largest module (a layer or the
  embedding) plus DeepSpeed's default prefetch bucket (5e7 parameters);
* **reference**: a frozen full copy of the policy (online methods with a reference: ``LiveReference``);
* **rollout_weights**: the online ``hf``/``lean`` backends generate on a full copy of the policy in the
  model's dtype on every rank, *not* sharded by ZeRO-3; ``vllm`` colocated takes its memory share of the
  GPU instead (``gpu_memory_utilization``), and on separate GPUs nothing on the training GPUs;
* **rollout_kv**: the generation batch's KV cache and the per-step fp32 logits it keeps (``hf``/``lean``);
* **activations** of one training micro-batch (all layers, or with gradient checkpointing each layer's
  input plus one layer's intermediates) and **logits** (the dtype logits; in bf16 their fp32 copy, made by
  ``logps_from_output``'s ``.float()`` or, with ``share_prompt``, the shared-prompt forward's fp32 output,
  a view in fp32; the fp32 log-softmax and its gradient);
* **step_temp**: AdamW's (``foreach``) temporary at the optimiser step, one fp32 tensor the size of the
  trainable parameters (``sqrt`` of the second moment), divided under ZeRO-1/2/3;
* **grad_sketch**: the gradient cosine's kept sketch (online, ZeRO-0): the last gradient, at most
  ``GRAD_SKETCH`` floats (``oxbench.engine.diagnostics.SKETCH``), and this step's beside it at the step;
* **cuda_context**: the CUDA context and allocator slack, a constant.

The parts are not all held at once. :attr:`MemoryEstimate.total`, the peak, is what the run always holds
(weights, optimiser state, copies, the kept sketch, the context; the gradients too, except in fp32 ZeRO-0
with one micro-batch a step, where ``zero_grad`` frees them between steps and backward starts without them)
plus the largest of its phases: the training forward and backward (activations, logits, ZeRO-3's gathered
parameters), the optimiser step (its temporary, this step's sketch, and gradients not held throughout),
and generation (the rollout KV cache and logits). On the CPU it is checked against the measured peak of
the tiny rungs (``tests/test_memory.py``, :func:`oxbench.engine.memory.cpu_peak_bytes`).

The Qwen2.5 shapes (0.5B to 7B) are written down from their released ``config.json`` files. The
estimate is an accounting, not a measurement: ``scripts/gpu_smoke.sh`` records the peak a GPU really
reached beside it (``timing.peak_gpu_gib`` in ``run.json``).

**Time on GPUs** (:func:`expected_ledger`, :func:`expected_seconds`). The trainer's ledger
(:data:`oxbench.engine.loop.LEDGER`) records what a cell did: rollouts, generated tokens, trained tokens,
generation and training seconds. :func:`expected_ledger` gives the same counts from
a config, as upper bounds (every completion as long as ``max_new_tokens``, every trained sequence its
prompt plus that), and :func:`expected_seconds` turns them into time at stated per-GPU rates:

* training: 6 FLOPs per parameter per trained token (8 with gradient checkpointing, which recomputes the
  forward) at :attr:`Rates.mfu` of the bf16 matrix rate (an H200 measured 790 TFLOP/s);
* generation: decoding is bound by reading the weights once per step, so a step of :attr:`Rates.batch`
  sequences takes the weights' bytes over half the HBM bandwidth (H200: 4.3 TB/s measured), and no less
  than :attr:`Rates.step_floor_s` (kernel launches); steps spread over the GPUs (data-parallel engines).

Both rates are assumptions until the GPU smoke's measured tokens/s (``scripts/gpu_smoke.sh``) replace them;
the table in the docs says so (``oxbench costs``).

**Time on the CPU** (:func:`cpu_seconds`): the ``--plan`` estimate, a fit to measured cells.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from oxbench.config import zero_stage

GIB = 2**30
CUDA_CONTEXT = 1 * GIB  # the CUDA context, cuBLAS workspaces and allocator slack, per process
PREFETCH_PARAMS = 50_000_000  # DeepSpeed's default stage3_prefetch_bucket_size
LOGITS_BUDGET = 4 * GIB  # = oxbench.engine.rollout.LOGITS_BUDGET (the per-step logits generation keeps)
GRAD_SKETCH = 2**21  # = oxbench.engine.diagnostics.SKETCH (floats the gradient cosine keeps of a gradient)
BYTES = {"bf16": 2, "fp32": 4}
ADAM = {"bf16": 12, "fp32": 8}  # bytes of optimiser state per trainable parameter (bf16: fp32 master too)
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelShape:
    """What memory depends on in a Qwen2/Llama-style decoder."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tie_embeddings: bool
    qkv_bias: bool = True

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def module_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear module of one layer."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        return {
            "q_proj": (h, h),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (h, h),
            "gate_proj": (h, self.intermediate),
            "up_proj": (h, self.intermediate),
            "down_proj": (self.intermediate, h),
        }

    def layer_params(self) -> int:
        linear = sum(i * o for i, o in self.module_shapes().values())
        bias = (self.hidden + 2 * self.kv_heads * self.head_dim) if self.qkv_bias else 0
        return linear + bias + 2 * self.hidden  # two RMSNorm weights

    def params(self) -> int:
        embed = self.vocab * self.hidden
        return embed * (1 if self.tie_embeddings else 2) + self.layers * self.layer_params() + self.hidden

    def lora_params(self, r: int, targets: list[str]) -> int:
        shapes = self.module_shapes()
        return self.layers * sum(r * (shapes[t][0] + shapes[t][1]) for t in targets if t in shapes)

    @classmethod
    def from_config(cls, config) -> ModelShape:
        """From a Hugging Face model config (Qwen2, Llama and alike)."""
        return cls(
            hidden=config.hidden_size,
            layers=config.num_hidden_layers,
            heads=config.num_attention_heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
            intermediate=config.intermediate_size,
            vocab=config.vocab_size,
            tie_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            qkv_bias=getattr(config, "model_type", "qwen2") == "qwen2",
        )


# The released Qwen2.5(-Instruct) configs: hidden, layers, heads, kv heads, intermediate, vocab, tied
QWEN25 = {
    "0.5B": ModelShape(896, 24, 14, 2, 4864, 151936, True),
    "1.5B": ModelShape(1536, 28, 12, 2, 8960, 151936, True),
    "3B": ModelShape(2048, 36, 16, 2, 11008, 151936, True),
    "7B": ModelShape(3584, 28, 28, 4, 18944, 152064, False),
}


@dataclass(frozen=True)
class Setup:
    """The settings memory depends on, as one rank sees them."""

    world: int = 1
    zero_stage: int = 0
    dtype: str = "bf16"
    lora_r: int | None = None  # None: full fine-tuning
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    backend: str | None = None  # None: offline; else online.backend (hf, lean, vllm)
    vllm_placement: str = "colocate"  # colocate: vLLM takes vllm_share of this GPU; separate: none of it
    vllm_share: float = 0.3
    gpu_bytes: int = 80 * GIB
    reference: bool = False  # a frozen full copy of the policy (online methods with a reference)
    micro_seqs: int = 8  # sequences in one training micro-batch
    seq_len: int = 1024  # tokens per training sequence (padded)
    gradient_checkpointing: bool = False
    gen_seqs: int = 64  # sequences in one generation batch (hf, lean)
    gen_len: int = 1024  # prompt + new tokens of a generation batch
    gen_new: int = 512  # new tokens per generated sequence
    accum: int = 1  # micro-batches per optimiser step (gradients held across them)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per rank, by part (module docstring); ``total`` is the peak."""

    weights: int
    gradients: int
    optimizer: int
    zero3_working: int
    reference: int
    rollout_weights: int
    rollout_kv: int
    activations: int
    logits: int
    step_temp: int
    grad_sketch: int
    cuda_context: int
    gradients_held: bool = True  # held through the forward and backward (not freed between steps)

    @property
    def static(self) -> int:
        """What the run holds whatever its batch: weights, gradients, optimiser state, copies."""
        return self.weights + self.gradients + self.optimizer + self.reference + self.rollout_weights

    @property
    def held(self) -> int:
        """What the run holds in every phase."""
        grads = self.gradients if self.gradients_held else 0
        return self.static - self.gradients + grads + self.grad_sketch + self.cuda_context

    @property
    def phases(self) -> dict[str, int]:
        """What each phase adds to :attr:`held` at its height."""
        return {
            "train": self.zero3_working + self.activations + self.logits,
            "step": (0 if self.gradients_held else self.gradients) + self.step_temp + self.grad_sketch,
            "generate": self.rollout_kv,
        }

    @property
    def total(self) -> int:
        """The peak: :attr:`held` plus the largest phase."""
        return self.held + max(self.phases.values())

    def gib(self) -> dict[str, float]:
        parts = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "gradients_held"}
        return {k: round(v / GIB, 2) for k, v in parts.items()} | {"total": round(self.total / GIB, 2)}


def _activations(shape: ModelShape, s: Setup, w: int) -> tuple[int, int]:
    """(activations, logits) of one training micro-batch: every layer's saved tensors (with gradient
    checkpointing each layer's input plus one layer's), and the logits (dtype; in bf16 their fp32 copy,
    in fp32 a view; the fp32 log-softmax and its gradient)."""
    tokens = s.micro_seqs * s.seq_len
    per_layer = (8 * shape.hidden + 4 * shape.intermediate + 4 * shape.kv_heads * shape.head_dim) * w
    if s.gradient_checkpointing:
        activations = tokens * (shape.layers * shape.hidden * w + per_layer)
    else:
        activations = tokens * shape.layers * per_layer
    return activations, tokens * shape.vocab * (w + 8 + (4 if w < 4 else 0))


def _rollout(shape: ModelShape, s: Setup, w: int, p: int) -> tuple[int, int]:
    """(rollout weights, generation KV cache + logits) of the online backend."""
    if s.backend in ("hf", "lean"):
        kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * w
        logits = min(LOGITS_BUDGET, s.gen_seqs * s.gen_new * shape.vocab * 4)
        return p * w, s.gen_seqs * s.gen_len * kv_per_token + logits
    if s.backend == "vllm" and s.vllm_placement == "colocate":
        return int(s.vllm_share * s.gpu_bytes), 0
    return 0, 0


def estimate(shape: ModelShape, s: Setup) -> MemoryEstimate:
    """The per-rank memory of a run of ``shape`` under ``s`` (module docstring for each part)."""
    w, p = BYTES[s.dtype], shape.params()
    trainable = p if s.lora_r is None else shape.lora_params(s.lora_r, list(s.lora_targets))
    shard = s.world if s.zero_stage == 3 else 1
    opt_shard = s.world if s.zero_stage >= 1 else 1
    working = 0
    if s.zero_stage == 3:
        working = (max(shape.layer_params(), shape.vocab * shape.hidden) + PREFETCH_PARAMS) * w
    rollout_weights, rollout_kv = _rollout(shape, s, w, p)
    activations, logits = _activations(shape, s, w)
    # fp32 ZeRO-0 steps torch's optimiser on the parameters' own gradients, freed by zero_grad between
    # steps; bf16 and ZeRO-1/2/3 keep DeepSpeed's gradient buffers
    freed = s.dtype == "fp32" and s.zero_stage == 0 and s.accum == 1
    sketch = min(trainable, GRAD_SKETCH) * 4 if s.backend is not None and s.zero_stage == 0 else 0
    return MemoryEstimate(
        weights=p * w // shard,
        gradients=trainable * w // (s.world if s.zero_stage >= 2 else 1),
        optimizer=trainable * ADAM[s.dtype] // opt_shard,
        zero3_working=working,
        reference=p * w if s.reference else 0,
        rollout_weights=rollout_weights,
        rollout_kv=rollout_kv,
        activations=activations,
        logits=logits,
        step_temp=trainable * 4 // opt_shard,
        grad_sketch=sketch,
        cuda_context=CUDA_CONTEXT,
        gradients_held=not freed,
    )


def setup_for_run(
    cfg,
    vocab: int,
    *,
    online: bool,
    pairs: bool = False,
    reference: bool = False,
    world: int = 1,
    gpu_bytes: int = 80 * GIB,
) -> Setup:
    """The :class:`Setup` of a :class:`~oxbench.config.RunConfig` at ``world`` ranks: online, a micro-batch is
    ``train.batch_size`` prompts with their ``n`` rollouts; offline, ``train.batch_size`` examples (two
    sequences each for ``pairs``); every sequence ``data.max_len`` tokens long (the padded worst case)."""
    t, o, lora = cfg.train, cfg.online, cfg.model.lora
    per_rank = max(1, o.prompts_per_batch // world)
    micro = min(t.batch_size, per_rank) * o.n if online else t.batch_size * (2 if pairs else 1)
    new = o.max_new_tokens
    vocab_row = max(1, o.n * new * vocab * 4)  # rollout.py's batch rule: 256 sequences or the logits budget
    gen_prompts = max(1, min(256 // o.n, LOGITS_BUDGET // vocab_row))
    return Setup(
        world=world,
        zero_stage=zero_stage(cfg),
        dtype=cfg.model.dtype,
        lora_r=lora.r if lora.enabled else None,
        lora_targets=tuple(lora.target_modules),
        # lean falls back to HF generate on a LoRA model (oxbench.engine.build.fast_paths)
        backend=None if not online else ("hf" if o.backend == "lean" and lora.enabled else o.backend),
        vllm_placement=getattr(o, "vllm_placement", "colocate"),
        vllm_share=getattr(o, "vllm_memory", None) or 0.3,
        gpu_bytes=gpu_bytes,
        reference=reference,
        micro_seqs=micro,
        seq_len=cfg.data.max_len,
        gradient_checkpointing=bool(getattr(cfg.model, "gradient_checkpointing", False)),
        gen_seqs=min(per_rank, gen_prompts) * o.n,
        gen_len=cfg.data.max_len,
        gen_new=new,
        accum=max(1, per_rank // t.batch_size) if online else t.grad_accum,
    )


GPU_80GB = 79 * GIB  # what an 80 GB A100/H100 offers (81,559 MiB, less the driver's)
TABLE_SETUP = Setup(
    zero_stage=3,
    dtype="bf16",
    backend="hf",
    micro_seqs=8,
    seq_len=1024,
    gradient_checkpointing=True,
    gen_seqs=64,
    gen_len=1024,
    gen_new=512,
)


def fewest_gpus(shape: ModelShape, setup: Setup, gpu: int = GPU_80GB) -> int | None:
    """The smallest world size (1, 2, 4, 8) whose per-rank estimate fits ``gpu`` bytes (None: not even 8)."""
    for world in (1, 2, 4, 8):
        if estimate(shape, replace(setup, world=world)).total <= gpu:
            return world
    return None


def memory_table(setup: Setup = TABLE_SETUP) -> str:
    """The docs' table (docs/gpus.md): per-GPU GiB of each Qwen2.5 size under ZeRO-3, with and without LoRA."""
    head = (
        "| Qwen2.5 | LoRA | per GPU at 1 / 2 / 4 / 8 GPUs (GiB) | of which HF rollout copy | activations, "
        "checkpointing off | fewest 80 GB GPUs: HF copy / vLLM separate |\n|---|---|---|---|---|---|"
    )
    rows = [head]
    for name, shape in QWEN25.items():
        for lora in (None, 16):
            s = replace(setup, lora_r=lora)
            totals = " / ".join(
                f"{estimate(shape, replace(s, world=w)).total / GIB:.1f}" for w in (1, 2, 4, 8)
            )
            one = estimate(shape, s)
            off = estimate(shape, replace(s, gradient_checkpointing=False)).activations
            need = [fewest_gpus(shape, x) for x in (s, replace(s, backend="vllm", vllm_placement="separate"))]
            fewest = " / ".join("> 8" if n is None else str(n) for n in need)
            rows.append(
                f"| {name} | {'r=16' if lora else 'off'} | {totals} | "
                f"{(one.rollout_weights + one.rollout_kv) / GIB:.1f} | {off / GIB:.1f} | {fewest} |"
            )
    return "\n".join(rows)


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
    # self-play samples come first for pairs, RFT and the unpaired losses; with data.path, none
    self_play = (pairs or cfg.method in ("rft", "kto", "bco_unpaired")) and d.path is None
    sampled = n * d.self_play_k if self_play else 0
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


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def cpu_seconds(cfg, *, online: bool, pairs: bool) -> float:
    """A rough CPU estimate of one cell (``--plan``'s): FLOPs = 6 x params x training tokens + 2 x params x
    generated tokens x 20 (decoding is latency-bound), then ``26 s + FLOPs / 94 GFLOP/s``.

    The two constants are a least-squares fit to the 108 cells of an early ``oxrl_core`` run (one
    thread per cell, two cells side by side on a 2-core CPU; process start-up included): per
    scale the fit's mean is within 10% of the measured one (tiny-xs 28 vs 26 s, tiny-l 161 vs
    160 s). Shared pre-training and self-play are not included. GPU runs are far faster."""
    import re

    from oxbench.models.tiny import LADDER

    if cfg.model.name in LADDER:
        hidden, layers = LADDER[cfg.model.name][:2]
        params = 12 * layers * hidden**2
    else:
        m = re.search(r"(\d+(?:\.\d+)?)[bB]", cfg.model.name)
        params = float(m.group(1)) * 1e9 if m else 1e9
    seq = 130 if cfg.task.name == "arith" else 400
    o, e = cfg.online, cfg.eval
    if online:
        train_tokens = o.prompts_per_batch * o.n * o.rounds * o.inner_epochs * seq
        gen_tokens = o.prompts_per_batch * o.n * o.rounds * o.max_new_tokens
    else:
        n = cfg.data.n_train or (7473 if cfg.task.name == "gsm8k" else 1000)
        train_tokens = n * cfg.train.epochs * seq * (2 if pairs else 1)
        gen_tokens = 0
    n_test = e.n_test or 1319
    gen_tokens += (
        n_test + (e.n_ood if cfg.task.name == "arith" else 0) + e.n_sampled * e.n_samples
    ) * e.max_new_tokens
    flops = 6 * params * train_tokens + 2 * params * gen_tokens * 20  # decoding is latency-bound: x20
    return 26 + flops / 9.4e10
