"""Typed configuration: one :class:`RunConfig` per grid cell, one :class:`GridConfig` per recipe.

Every model here forbids unknown keys, so a typo in a recipe is an error naming the key
(with a suggestion), never a silently ignored setting. The resolved ``RunConfig`` is
saved inside every ``run.json``; its hash is the ``run_id``.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import sys
from pathlib import Path
from types import UnionType
from typing import Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from oxbench.utils import content_hash


def _admits_bool(annotation) -> bool:
    """Whether a field of this type takes a boolean: ``bool``, ``Any``, a Literal of one, or a union."""
    if annotation is bool or annotation is Any:
        return True
    args = get_args(annotation)
    if get_origin(annotation) is Literal:
        return any(isinstance(a, bool) for a in args)
    return get_origin(annotation) in (Union, UnionType) and any(_admits_bool(a) for a in args)


def _kind_of(annotation) -> str:
    names = {int: "number", float: "number", str: "string"}
    args = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
    return names.get(args[0], "setting of that type") if len(args) == 1 else "setting of that type"


class Strict(BaseModel):
    """A settings block: unknown keys, NaN and infinities are errors, and every count or rate named in
    ``bounds`` must lie in its range (checked before any work starts; the error names the field)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # field -> (lowest, highest, lowest excluded): e.g. (0, None, True) is "> 0", (1, None, False) ">= 1"
    bounds: ClassVar[dict[str, tuple[float | None, float | None, bool]]] = {}

    @model_validator(mode="after")
    def _in_range(self):
        for name, (lo, hi, open_lo) in self.bounds.items():
            value = getattr(self, name)
            if value is None or isinstance(value, bool):
                continue
            low = lo is not None and (value <= lo if open_lo else value < lo)
            if low or (hi is not None and value > hi):
                raise ValueError(f"{name} must be {_range_text(lo, hi, open_lo)}, got {value!r}")
        return self

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data):
        """YAML's ``yes``/``no``/``on``/``off``/``true``/``false`` are booleans, never numbers: without
        this, ``train.lr: yes`` would be a learning rate of 1.0."""
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                key = next((k for k in (name, field.serialization_alias) if k and k in data), None)
                if key is not None and isinstance(data[key], bool) and not _admits_bool(field.annotation):
                    raise ValueError(
                        f"{key} is a boolean ({str(data[key]).lower()}), not a {_kind_of(field.annotation)}"
                    )
        return data

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data):
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                old = field.serialization_alias
                if old and old != name and name in data and old in data:
                    raise ValueError(f"{name!r} is given twice: also under its old name {old!r}")
        return data

    @classmethod
    def with_historic_defaults(cls, data: dict) -> dict:
        """``data`` (a config written by a run: every setting it knew) with each setting that was added
        later with a new default (:func:`added` ``now=``) and that ``data`` lacks set to its historic
        value: a record written before the new default reads back as the run it was, run_id included."""
        out = dict(data)
        for name, field in cls.model_fields.items():
            key = next((k for k in (name, field.serialization_alias) if k and k in out), None)
            extra = field.json_schema_extra or {}
            if key is None and "historic" in extra:
                out[name] = extra["historic"]
            elif key is not None and isinstance(out[key], dict) and _strict_type(field.annotation):
                out[key] = _strict_type(field.annotation).with_historic_defaults(out[key])
        return out

    def hash_view(self) -> dict:
        """The settings as they enter ``run_id`` and every cache key: a renamed setting keeps its old
        name (:func:`renamed`) and a setting added later is left out while it has its default
        (:func:`added`), so runs and caches made before either change stay valid."""
        out = self.model_dump(by_alias=True)
        for name, field in type(self).model_fields.items():
            key, value = field.serialization_alias or name, getattr(self, name)
            extra = field.json_schema_extra or {}
            if extra.get("added") and value == extra.get("historic", field.default):
                del out[key]
            elif isinstance(value, Strict):
                out[key] = value.hash_view()
        return out


_SAME = object()


def _strict_type(annotation) -> type[Strict] | None:
    """The settings block a field holds (``X`` or ``X | None``), or None for a plain value."""
    for t in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(t, type) and issubclass(t, Strict):
            return t
    return None


def added(default: Any, *, now: Any = _SAME) -> Any:
    """A setting added after runs were recorded, whose ``default`` is the behaviour before it existed:
    it enters hashes only when set to something else. ``now``: a faster default for new configs; the
    hash still leaves the setting out at ``default``, so a recipe that pins the old behaviour keeps its
    run_id, and a config that takes the new default gets a new one (it computes something else)."""
    if now is _SAME:
        return Field(default, json_schema_extra={"added": True})
    return Field(now, json_schema_extra={"added": True, "historic": default})


def _range_text(lo, hi, open_lo: bool) -> str:
    if hi is None:
        return f"{'>' if open_lo else '>='} {lo}"
    return f"in {'(' if open_lo else '['}{lo}, {hi}]"


POSITIVE = (0, None, True)  # > 0
COUNT = (1, None, False)  # >= 1
NON_NEGATIVE = (0, None, False)  # >= 0
FRACTION = (0, 1, False)  # in [0, 1]
SEED = (0, 2**32 - 1, False)  # numpy and torch seeds are 32-bit


def check_dir_name(name: str, field: str) -> str:
    """A name that becomes a directory under ``--out`` (a grid's): letters, digits, ``.``, ``_`` and
    ``-``, starting with a letter or digit, so nothing can be written outside ``--out``."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name):
        raise ValueError(
            f"{field} {name!r} becomes a directory name: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit (no '/', no '..')"
        )
    return name


def renamed(default: Any, old: str, new: str, *, added_later: bool = False) -> Any:
    """A setting renamed from ``old`` to ``new``: recipes may still spell it ``old``; records show
    ``new``; hashes (:meth:`Strict.hash_view`) use ``old``, so run_ids and caches do not change.
    ``added_later``: ``old`` itself was :func:`added` after runs were recorded, so it still enters
    hashes only when set to something else than ``default``."""
    extra = {"added": True} if added_later else None
    return Field(
        default, validation_alias=AliasChoices(new, old), serialization_alias=old, json_schema_extra=extra
    )


class LoraConfig(Strict):
    bounds = {"r": COUNT, "alpha": POSITIVE, "dropout": (0, 1, False)}

    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]


# arith's knobs below which it has no problems: field -> (lowest, what the error says arith needs)
ARITH_LEAST = {"n_ops": (1, "at least 1 operation per problem"), "max_operand": (2, "max_operand >= 2")}


class ArithKnobs(Strict):
    """A settings block holding arith's ``n_ops`` and ``max_operand``: each must leave some problems."""

    @field_validator("n_ops", "max_operand", check_fields=False)
    @classmethod
    def _some_problems(cls, v, info):
        least, needs = ARITH_LEAST[info.field_name]
        if v < least:
            raise ValueError(f"arith needs {needs}, got {v} (no problems)")
        return v


class PretrainTask(ArithKnobs):
    """The arith task a base was pre-trained on when it is not the run's (``model.pretrain.task``)."""

    n_ops: int = 2
    max_operand: int = 40


class PretrainSettings(Strict):
    """Budget of the from-scratch pre-training of a built-in tiny model (ignored for HF models)."""

    bounds = {"updates": NON_NEGATIVE, "batch_size": COUNT, "lr": POSITIVE, "n_examples": COUNT, "seed": SEED}

    updates: int = renamed(600, "steps", "updates")  # optimiser steps
    batch_size: int = 32
    lr: float = 3e-3
    n_examples: int = 4000
    seed: int = 1234
    # share of pre-training solutions ending in each answer style (oxbench.tasks.arith.ANSWER_STYLES);
    # None: all "#### N" (the graded format). E.g. {gsm8k: 0.3, sentence: 0.7} makes a base whose
    # arithmetic is intact but whose format often fails strict match (the reference study's mechanism).
    answer_styles: dict[str, float] | None = None
    # shares of the pre-training examples drawn from other sources (the rest is the task's): the
    # general-domain families of oxbench.tasks.general (order, next, reverse) and ``hard`` (the task
    # with more operations, the MATH analogue), so the base has skill the lm-eval tasks can measure
    mixture: dict[str, float] | None = added(None)
    # the arith task pre-training drew from when it is not the run's (None: the run's task): a run on
    # larger operands or longer chains than its base saw has headroom in skill, not format (the skill
    # testbed, recipes/testbed_skill.yaml). The run's task must then be arith too.
    task: PretrainTask | None = added(None)

    @field_validator("mixture")
    @classmethod
    def _known_sources(cls, v):
        if v is None:
            return v
        from oxbench.tasks.general import FAMILIES

        known = [*FAMILIES, "hard"]
        for name, share in v.items():
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
                raise ValueError(f"unknown pre-training source {name!r}{hint}")
            if not math.isfinite(share) or not 0 < share < 1:
                raise ValueError(f"share of source {name!r} must be in (0, 1), got {share}")
        if sum(v.values()) >= 1:
            raise ValueError(f"mixture shares must leave some of the task: they sum to {sum(v.values()):g}")
        return v

    @field_validator("answer_styles")
    @classmethod
    def _styles_sum_to_one(cls, v):
        if v is None:
            return v
        from oxbench.tasks.arith import ANSWER_STYLES

        for name, share in v.items():
            if name not in ANSWER_STYLES:
                close = difflib.get_close_matches(name, list(ANSWER_STYLES), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(ANSWER_STYLES)})"
                raise ValueError(f"unknown answer style {name!r}{hint}")
            if not math.isfinite(share) or share < 0:
                raise ValueError(f"share of style {name!r} must be a finite number >= 0, got {share}")
        if abs(sum(v.values()) - 1.0) > 1e-6:
            raise ValueError(f"style shares must sum to 1, got {sum(v.values()):g}")
        return v


def accelerator_present() -> bool:
    """Whether this machine has a CUDA GPU, without importing torch when nothing has (the CLI plans
    without it): torch's answer once torch is loaded, else the NVIDIA device files."""
    if "torch" in sys.modules:
        return sys.modules["torch"].cuda.is_available()
    return Path("/dev/nvidiactl").exists() or any(Path("/dev").glob("nvidia[0-9]*"))


class ModelConfig(Strict):
    name: str = "tiny-xs"  # a built-in rung (tiny-xs/s/m/l), a Hugging Face id or a local path
    # auto: bf16 on a GPU machine, fp32 on a CPU one; resolved here, so records and run_ids carry the
    # dtype that ran (a CPU run's hash is the one it had before "auto" existed)
    dtype: Literal["auto", "fp32", "bf16"] = "auto"
    lora: LoraConfig = LoraConfig()
    pretrain: PretrainSettings = PretrainSettings()
    gradient_checkpointing: bool = added(False)  # recompute activations in backward (7B at 1,024 tokens)
    # auto: HF's default (sdpa) on the CPU; flash_attention_2 on a GPU where flash-attn is installed
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = added("auto")

    @model_validator(mode="after")
    def _resolve_dtype(self):
        if self.dtype == "auto":
            self.dtype = "bf16" if accelerator_present() else "fp32"
        return self


class TaskConfig(ArithKnobs):
    # a built-in task (arith, gsm8k) or a plugin's (oxbench.tasks entry points, --plugin: `oxbench tasks`)
    name: str = "arith"
    n_ops: int = renamed(2, "steps", "n_ops")  # arith: operations per problem
    max_operand: int = 40  # arith: largest operand (40: chance 1.6% with n_ops 2)
    path: str | None = None  # gsm8k: a directory with train/test files, a HF dataset id, or the train file
    test_path: str | None = None  # gsm8k: the test file, when ``path`` is a single train file
    ood: bool = True  # arith: also evaluate on the out-of-distribution variant
    options: dict[str, Any] = added({})  # a plugin task's own settings, handed to its loader

    @field_validator("name")
    @classmethod
    def _known_task(cls, name: str) -> str:
        from oxbench.tasks.registry import task_names

        known = task_names()
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
            raise ValueError(f"unknown task {name!r}{hint}")
        return name

    @model_validator(mode="after")
    def _gsm8k_needs_path(self):
        if self.name == "gsm8k" and not self.path:
            raise ValueError("task.path is required for task 'gsm8k'")
        return self


# IsoCompute's difficulty bins (arXiv 2603.12151): [lo, hi] of the base's per-problem avg@k.
# extremely_hard is pass@k = 0: none of the k samples right.
SUBSETS = {"easy": (0.3, 0.6), "hard": (0.0, 1 / 16), "extremely_hard": (0.0, 0.0)}


class DataConfig(Strict):
    bounds = {
        "n_train": COUNT,
        "max_len": COUNT,
        "self_play_k": COUNT,
        "self_play_temperature": POSITIVE,
        "max_new_tokens": COUNT,
        "difficulty_k": COUNT,
    }

    n_train: int | None = 512  # training prompts (None: the whole train split)
    max_len: int = 256
    self_play_k: int = 16  # samples per prompt for preference pairs (reference study: 16)
    self_play_temperature: float = 1.0
    max_new_tokens: int = 48
    # offline pairs (and the KTO and RFT rows made from them): chosen = the best self-play sample
    # (self_play, the reference study) or the gold answer, scored correct (gold); rejected = the worst
    # sample either way, and a prompt whose samples all score as high as the chosen one gives no pair.
    # gold makes pairs even from a base that never answers right (a random model, a new checkpoint).
    chosen_source: Literal["self_play", "gold"] = added("self_play")
    # the grader that scores self-play samples (and so picks each pair): strict (the reference study:
    # the graded "####" line) or flexible (the last number, whatever the answer line looks like: pairs
    # that differ in skill, not format, for a base whose format is already accepted)
    self_play_grader: Literal["strict", "flexible"] = added("strict")
    # online prompts by the base's difficulty (oxbench.data.difficulty): a SUBSETS name, or a mixture
    # {name: share} (shares sum to 1). None: every prompt.
    subset: str | dict[str, float] | None = added(None)
    difficulty_k: int = added(16)  # samples per problem for the base's avg@k
    difficulty_grader: Literal["strict", "flexible"] = added("strict")  # flexible: difficulty beyond format
    # your own training rows in one of TRL's dataset formats (oxbench.data.formats, detected from the
    # columns): a .jsonl or .parquet file, or a datasets save_to_disk directory. An offline method trains
    # on its first n_train rows instead of self-play or the task's gold answers (a pair loss, BCO's
    # paired form included, on preference rows; KTO and BCO's unpaired form on unpaired or preference
    # rows; SFT on completions);
    # an online method samples its rollouts' prompts from the file's first online.n_prompts rows, rewarded
    # by online.rewards (each row's other columns passed to them); evaluation stays the task's. None: the
    # task's rows, as before (docs/data.md).
    path: str | None = added(None)

    @field_validator("subset")
    @classmethod
    def _known_subset(cls, v):
        shares = {v: 1.0} if isinstance(v, str) else v
        for name, share in (shares or {}).items():
            if not math.isfinite(share) or share <= 0:
                raise ValueError(f"share of subset {name!r} must be a finite number > 0, got {share}")
        if shares and abs(sum(shares.values()) - 1.0) > 1e-6:
            raise ValueError(f"subset shares must sum to 1, got {sum(shares.values()):g}")
        return v


class LrScaling(Strict):
    """``train.lr`` from the batch size: ``base_lr * (B / base_batch) ** p`` with p = 1/2 (sqrt, the
    IsoCompute rule) or 1 (linear); B is rollouts per optimiser step online (B_p * n), examples per
    step offline. Resolved when the config is built, so ``train.lr`` in ``run.json`` is the LR used."""

    bounds = {"base_batch": COUNT}

    rule: Literal["none", "sqrt", "linear"] = "none"
    base_lr: float | None = None
    base_batch: int = 1024

    @model_validator(mode="after")
    def _complete(self):
        if self.rule != "none" and (
            self.base_lr is None or not math.isfinite(self.base_lr) or self.base_lr <= 0
        ):
            raise ValueError(f"lr_scaling rule {self.rule!r} needs base_lr > 0, got {self.base_lr}")
        return self

    def lr(self, batch: int) -> float:
        return self.base_lr * (batch / self.base_batch) ** {"sqrt": 0.5, "linear": 1.0}[self.rule]


class TrainConfig(Strict):
    bounds = {
        "epochs": COUNT,
        "batch_size": COUNT,
        "grad_accum": COUNT,
        "lr": POSITIVE,
        "warmup_ratio": FRACTION,
        "warmup_steps": NON_NEGATIVE,
        "min_lr_ratio": FRACTION,
        "weight_decay": NON_NEGATIVE,
        "max_grad_norm": POSITIVE,
        "log_every": COUNT,
        "max_steps": COUNT,
    }

    epochs: int = 1
    batch_size: int = 8  # per process, per micro-step (online: prompts, each with its n rollouts)
    grad_accum: int = 1  # offline only: online, one rollout batch is one optimiser step
    lr: float = 1e-6
    warmup_ratio: float = 0.1
    warmup_steps: int | None = added(None)  # a fixed warm-up in optimiser steps (overrides warmup_ratio)
    schedule: Literal["cosine", "constant"] = "cosine"  # after warm-up: cosine to min_lr_ratio, or flat
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    zero_stage: Literal[0, 1, 2, 3] = 0
    log_every: int = 1
    max_steps: int | None = None  # stop after this many optimizer steps (tests, smoke runs)
    check_reference: bool = True  # step-0 check that policy log-probs equal the reference's
    save_model: bool = False  # save the trained weights to <run_dir>/model (save_pretrained format)
    lr_scaling: LrScaling = added(LrScaling())


ZERO_STAGE_ENV = "OXBENCH_ZERO_STAGE"


def zero_stage(cfg: RunConfig) -> int:
    """The ZeRO stage a cell runs at: ``train.zero_stage``, or the one its launch chose (``oxbench run
    --zero-stage``, which sets ``$OXBENCH_ZERO_STAGE``). Like ``--nproc`` it is a layout, not part of the
    cell: the maths, the ``run_id`` and the checkpoints are the same at every stage, so a cell written at
    ZeRO-3 on two GPUs resumes at ZeRO-0 on one."""
    given = os.environ.get(ZERO_STAGE_ENV, "").strip()
    if not given:
        return cfg.train.zero_stage
    if given not in ("0", "1", "2", "3"):
        raise ValueError(f"${ZERO_STAGE_ENV}: must be 0, 1, 2 or 3, got {given!r}")
    return int(given)


class CollapseConfig(Strict):
    """When an online run counts as collapsed (oxbench/engine/collapse.py)."""

    bounds = {"window": COUNT, "verified_drop": (0, 1, True)}

    reward_fraction: float = (
        0.5  # mean reward of the last `window` rounds below this share of the first `window`'s
    )
    window: int = 4
    verified_drop: float | None = None  # a curve point's verified accuracy this far below the best so far
    stop: bool = True  # stop the run there (else record the first collapse and go on)

    @model_validator(mode="after")
    def _ranges(self):
        if not 0 < self.reward_fraction < 1:  # open at both ends, which bounds cannot say
            raise ValueError(f"reward_fraction must lie in (0, 1), got {self.reward_fraction}")
        return self


class RewardTerm(Strict):
    """One reward function of ``online.rewards`` and its weight in the sum: a named function, or a reward
    model (``model``: a sequence-classification checkpoint, a local path or a Hub id, as TRL's
    ``reward_funcs`` takes one; ``name`` is then its label in the logs, ``reward/<name>``)."""

    name: str
    weight: float = 1.0
    model: str | None = added(None)


class OnlineConfig(Strict):
    """Online RL knobs: compute C = prompts_per_batch * n * rounds rollouts."""

    bounds = {
        "n": COUNT,
        "prompts_per_batch": COUNT,
        "rounds": COUNT,
        "inner_epochs": COUNT,
        "sync_every": COUNT,
        "queue_size": COUNT,
        "temperature": POSITIVE,
        "max_new_tokens": COUNT,
        "pair_refresh_every": COUNT,
        "n_prompts": COUNT,
    }

    n: int = 8  # rollouts per prompt
    prompts_per_batch: int = 8  # B_p
    rounds: int = renamed(20, "steps", "rounds")  # M: rollout rounds, one fresh batch each
    inner_epochs: int = 1  # passes over each rollout batch (optimiser steps = rounds * inner_epochs)
    # rollout generation: hf (HF generate), lean (oxbench's decode loop over the same weights; Qwen2
    # and Llama models, plain temperature sampling), vllm (a vLLM engine in its own process, in the
    # Python named by OXBENCH_VLLM_PYTHON; see oxbench/engine/vllm_client.py)
    # Default lean (fast); a LoRA model or an architecture it cannot decode falls back to hf, recorded.
    backend: Literal["hf", "lean", "vllm"] = added("hf", now="lean")
    # the learner's forward: each group's prompt once, then its n completions on that prompt's KV cache
    # (oxbench.text.batching.shared_prompt_forward); equal to the full forward up to float rounding.
    # Default on; a method with a value head or pairs falls back to the full forward, recorded.
    share_prompt: bool = added(False, now=True)
    sync_every: int = 1  # copy trainer weights to the rollout worker every N rounds (>1: stale rollouts)
    # where rollouts come from (oxbench/engine/sources/): sync (the learner's weights every sync_every
    # rounds) or delayed (the weights of exactly `staleness` optimiser steps ago, from a ring buffer)
    # or async (a producer process generating ahead, at most `staleness` versions behind; world size 1)
    source: Literal["sync", "delayed", "async"] = added("sync")
    staleness: int = added(0)  # S, for source delayed or async
    queue_size: int = added(2)  # async: finished rounds the producer may hold ready
    # the diagnostics' importance-weight cap: is_truncated is the share of response tokens above it. Not
    # the loss's TIS cap (loss.is_cap, a hyper-parameter of the GRPO family); first named online.is_cap
    diagnostic_is_cap: float = renamed(2.0, "is_cap", "diagnostic_is_cap", added_later=True)
    collapse: CollapseConfig | None = added(None)  # detect collapse (and stop there); None: off
    # VCPO's ESS-scaled LR: each step's LR times min(1, ESS / ess_lr_base) (linear) or its sqrt
    ess_lr: Literal["none", "sqrt", "linear"] = added("none")
    ess_lr_base: float = added(1.0)
    temperature: float = 1.0
    max_new_tokens: int = 48
    pair_refresh_every: int = 1  # generates_own_pairs methods: regenerate pairs every N epochs
    # prompts drawn from (None: the whole train split; arith: 10,000); with data.path, the file's first rows
    n_prompts: int | None = None
    # the grader that scores rollouts; random: a coin flip per completion text, whatever it says (a
    # control for collapse caused by reward noise alone); shuffled-<grader>: that grader's rewards
    # permuted within each prompt's group, so every group keeps its real reward mean and spread (the
    # advantages, and the step, are as large as the real reward's) and none says which completion is right
    reward_grader: Literal["strict", "flexible", "random", "shuffled-strict", "shuffled-flexible"] = added(
        "strict"
    )
    # several reward functions, weighted and summed (each logged as reward/<name>): the graders' names
    # above, the task's own reward functions, and registered ones (oxbench.rewards entry points, --plugin).
    # None: reward_grader alone, as before the setting existed.
    rewards: list[RewardTerm] | None = added(None)

    # the vllm backend on GPUs (oxbench.engine.vllm_client.resolve_placement): colocate (the server shares
    # its training rank's GPU, taking vllm_memory of it), separate (a GPU of its own: vllm_devices, by local
    # rank, else the first GPU after the training ranks'; the asynchronous study's setting) or auto
    # (separate when a GPU is left over, else colocate). Where it runs, not what it computes.
    vllm_placement: Literal["colocate", "separate", "auto"] = added("colocate")
    vllm_devices: list[int] | None = added(None)
    vllm_memory: float | None = added(None)  # gpu_memory_utilization (None: 0.3 colocated, 0.9 separate)

    @field_validator("vllm_memory")
    @classmethod
    def _share(cls, v):
        if v is not None and not (math.isfinite(v) and 0 < v <= 1):
            raise ValueError(f"vllm_memory must be a share of the GPU in (0, 1], got {v}")
        return v

    @field_validator("vllm_devices")
    @classmethod
    def _devices(cls, v):
        if v is not None and (not v or any(d < 0 for d in v)):
            raise ValueError(f"vllm_devices must list GPU indices >= 0, got {v}")
        return v

    @field_validator("diagnostic_is_cap", "ess_lr_base")
    @classmethod
    def _positive_finite(cls, v, info):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{info.field_name} must be a finite number > 0, got {v}")
        return v

    @field_validator("staleness")
    @classmethod
    def _staleness(cls, v):
        if v < 0:
            raise ValueError(f"staleness S must be >= 0, got {v}")
        return v

    @field_validator("rewards")
    @classmethod
    def _distinct_rewards(cls, v):
        names = [t.name for t in v or []]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise ValueError(f"reward {twice!r} is named twice")
        if v is not None and not v:
            raise ValueError("rewards must name at least one reward function (or be left out)")
        return v

    @model_validator(mode="after")
    def _delayed(self):
        if self.source != "sync" and self.sync_every != 1:
            raise ValueError(
                f"online.source '{self.source}' sets the lag itself (staleness); leave sync_every at 1"
            )
        if self.source == "sync" and self.staleness:
            raise ValueError("online.staleness needs online.source 'delayed' or 'async'")
        placed = [
            k
            for k in ("vllm_placement", "vllm_devices", "vllm_memory")
            if getattr(self, k) != type(self).model_fields[k].default
        ]
        if placed and self.backend != "vllm":
            raise ValueError(f"online.{placed[0]} needs online.backend 'vllm' (got {self.backend!r})")
        return self

    def rollouts(self) -> int:
        """C = B_p * n * M: the run's sampling compute, in rollouts."""
        return self.prompts_per_batch * self.n * self.rounds


class LmEvalConfig(Strict):
    """General-domain and harder tasks through lm-eval's harness (:mod:`oxbench.eval.lm_eval_path`),
    after the run's own evaluation, on the trained model and on its base."""

    bounds = {"limit": COUNT, "batch_size": COUNT, "max_gen_toks": COUNT}

    # lm-eval task -> its family in the analysis (e.g. general, hard): the bundled oxbench_* tasks or any
    # of lm-eval's own (gsm8k, hendrycks_math, arc_challenge, hellaswag, mmlu, ...)
    tasks: dict[str, str] = {}
    limit: int | None = 200  # documents per task (None: all)
    batch_size: int = 16
    max_gen_toks: int = 128

    @field_validator("tasks")
    @classmethod
    def _families(cls, v):
        for task, family in v.items():
            if not family or family == "in_domain":
                raise ValueError(
                    f"task {task!r}: family must be a name other than 'in_domain' (the run's own task)"
                )
        from oxbench.tasks.lm_eval_tasks import check_bundled

        check_bundled(list(v))
        return v


class EvalConfig(Strict):
    bounds = {
        "n_test": COUNT,
        "n_ood": NON_NEGATIVE,
        "max_new_tokens": COUNT,
        "k": NON_NEGATIVE,
        "n_samples": COUNT,
        "n_sampled": NON_NEGATIVE,
        "temperature": POSITIVE,
        "batch_size": COUNT,
        "every": COUNT,
        "n_val": COUNT,
        "val_pool": COUNT,
    }

    n_test: int | None = 500  # None: the whole test split
    n_ood: int = 500
    max_new_tokens: int = 64
    k: int = 4  # avg@k, best@k, worst@k (0 disables the sampled metrics)
    n_samples: int = 8  # samples drawn per problem (>= k) for the unbiased estimators
    n_sampled: int = 100  # problems used for the sampled metrics
    temperature: float = 1.0
    # sequences per generation call; None: as many as the memory rule allows
    # (oxbench.eval.evaluate.eval_sequences: KV cache and one step's logits in EVAL_BUDGET, at most
    # EVAL_MAX_SEQS), so a tiny model evaluates in one or a few calls. Greedy completions are the same
    # at every size (the lean decoder's and HF's greedy ids do not depend on the batch); sampled ones
    # are other draws from the same distribution (each call has its own seeded stream). The default was
    # 128 until 2026-12-05; the committed recipes pin it (always part of the run_id, as before).
    batch_size: int | None = None
    # learning curves (online): every ``every`` rollouts, the policy on ``n_val`` validation problems
    # (disjoint from the RL prompts and the test split): greedy strict/verified, avg/best/worst@k
    every: int | None = added(None)
    n_val: int = added(100)
    # with data.subset: validation candidates measured per validation problem kept; the bin keeps at most
    # n_val of them, fewer when the bin is rare (a bin holding 3% of problems needs about 33 for n_val)
    val_pool: int = added(10)
    # the grader of the sampled metrics (avg/best/worst@k, correct_counts): strict wants the graded
    # answer line; flexible takes the last number, so a study that rewards flexibly (online.reward_grader)
    # can measure sharpening and coverage of the answer rather than of the format
    sampled_grader: Literal["strict", "flexible"] = added("strict")
    # the sampled metrics' random stream: "call", one seeded generator per generation call, so a problem's
    # draws depend on the call's size and its neighbours (records change with batch_size); "problem",
    # each problem's own stream (oxbench.text.streams), the same draws at any batch size and backend
    sample_stream: Literal["call", "problem"] = added("call", now="problem")
    # generation for evaluation: lean (oxbench's decode loop; greedy ids equal HF generate's), hf
    backend: Literal["hf", "lean"] = added("hf", now="lean")
    # the problems graded: "test"; "confirm", the locked confirmation split (arith: test-class problems
    # outside the whole test pool, which no design choice has seen), which only a grid marked
    # ``confirmatory: true`` may read (oxbench.grid.spec); or "validation" (disjoint from the train rows
    # and the test split), what a tune's cells are evaluated on (oxbench.grid.tune)
    split: Literal["test", "confirm", "validation"] = added("test")
    lm_eval: LmEvalConfig = added(LmEvalConfig())


class CheckpointConfig(Strict):
    """Mid-run checkpoints (:mod:`oxbench.engine.checkpoint`): how a cell survives pre-emption. They change
    how a run is kept, never what it computes, so they are not part of the ``run_id``."""

    bounds = {"every": COUNT, "keep": COUNT}

    every: int | None = None  # optimiser steps between checkpoints (None: only on SIGTERM/SIGUSR1/Ctrl-C)
    keep: int = 2  # the newest checkpoints kept (older ones are pruned)
    keep_final: bool = False  # keep the last checkpoint when the cell finishes (else they are deleted)


class FaultConfig(Strict):
    """How a cell of several ranks meets a fault (:func:`oxbench.engine.distributed.init_distributed`):
    the longest any collective may wait for its peers before it fails with the rank and operation named.
    Like ``checkpoint``, it changes how a run ends, never what it computes: not part of the ``run_id``."""

    bounds = {"collective_timeout_s": POSITIVE}

    # long enough for a 7B ZeRO-3 gather or a checkpoint write, short enough that a hung peer is seen
    collective_timeout_s: float = 600.0


class Seeds(Strict):
    """Independent seeds. Unset ones derive from the run seed (see :meth:`RunConfig.seeds`)."""

    bounds = {"data": SEED, "init": SEED, "sampling": SEED, "eval": SEED}

    data: int | None = None  # training-example order
    init: int | None = None  # model/LoRA/value-head initialisation
    sampling: int | None = None  # self-play and rollout sampling
    eval: int | None = None  # sampled evaluation


class RunConfig(Strict):
    bounds = {"seed": SEED}

    grid: str = "adhoc"
    method: str = "sft"
    seed: int = 0
    # what the run seed redraws (issue 40; docs/engine.md#seeds). "run": the training subset
    # (data.n_train or online.n_prompts drawn from the whole train split), its order, LoRA and head
    # initialisation, and the self-play and rollout sampling: a seed is a fresh draw of everything
    # random in training. "order" (the historic scope, what the committed studies ran): the order and
    # the initialisation only; the subset (the split's first rows) and the sampling are shared by every
    # seed. The evaluation's draws are shared by every run in both (the instrument, not the treatment).
    seed_scope: Literal["order", "run"] = added("order", now="run")
    model: ModelConfig = ModelConfig()
    task: TaskConfig = TaskConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    online: OnlineConfig = OnlineConfig()
    eval: EvalConfig = EvalConfig()
    loss: dict[str, Any] = Field(default_factory=dict)  # hyper-parameters overriding the loss's defaults
    seed_overrides: Seeds = Seeds()
    checkpoint: CheckpointConfig = CheckpointConfig()  # how the run is kept: not part of its identity
    faults: FaultConfig = FaultConfig()  # collective timeouts: not part of its identity either
    # live tracking (oxbench/tracking.py): where the run's metrics also go; not part of its identity
    track: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = ["tensorboard"]
    # the dotted paths of the grid axes that vary, other than scale, method and seed (set by
    # oxbench.grid.spec.expand): with scale, method and LoRA they name the cell's arm. Not part of the
    # run_id or the config hash, so the same config keeps its id whichever grid it came from.
    arm_keys: list[str] = []
    # the key=value overrides given after the grid file on the command line (oxbench.grid.overrides), as
    # typed: recorded in run.json's config. Not part of the run_id: the settings they change are.
    cli_overrides: list[str] = []

    @field_validator("grid")
    @classmethod
    def _grid_is_a_directory_name(cls, grid: str) -> str:
        return check_dir_name(grid, "grid")

    @model_validator(mode="after")
    def _task_names(self):
        """``data.subset``'s bins and ``online.rewards``' functions exist for the run's task (its spec is
        read only when one is not IsoCompute's bin or a reward is named)."""
        shares = self.data.subset
        names = [shares] if isinstance(shares, str) else list(shares or {})
        if any(n not in SUBSETS for n in names):
            from oxbench.tasks import get_task

            _known("subset", names, [*SUBSETS, *get_task(self.task.name).bins], "data.subset")
        if self.online.rewards is not None:
            from oxbench.tasks import get_task

            known = get_task(self.task.name).reward_names()
            _known(
                "reward", [t.name for t in self.online.rewards if t.model is None], known, "online.rewards"
            )
            if self.online.reward_grader != "strict":  # (a config read back from a record sets both)
                raise ValueError("field 'online.rewards': give it or online.reward_grader, not both")
        return self

    @model_validator(mode="after")
    def _resolve(self):
        """Resolve ``train.lr_scaling`` into ``train.lr`` and check ``eval.every`` against the run."""
        o, t = self.online, self.train
        if self.model.pretrain.task is not None and self.task.name != "arith":
            raise ValueError(f"model.pretrain.task needs an arith run task, not {self.task.name!r}")
        if t.lr_scaling.rule == "none" and self.eval.every is None:
            return self  # (no loss registry import: one-line errors stay fast)
        online = _is_online(self.method)
        if t.lr_scaling.rule != "none":
            batch = o.prompts_per_batch * o.n if online else t.batch_size * t.grad_accum
            lr = t.lr_scaling.lr(batch)
            if "lr" in t.model_fields_set and not math.isclose(t.lr, lr, rel_tol=1e-9):
                raise ValueError(f"train.lr {t.lr:g} is given beside train.lr_scaling (which sets {lr:g})")
            t.lr = lr
        if self.eval.every is not None:
            if online is False:
                raise ValueError("eval.every needs an online method (it counts rollouts)")
            if online and self.eval.every > o.rollouts():
                raise ValueError(
                    f"eval.every {self.eval.every} is larger than the run's {o.rollouts()} rollouts "
                    f"(online.prompts_per_batch x n x rounds)"
                )
        return self

    def identity(self) -> dict:
        """The config that identifies the run (everything but ``arm_keys``, ``cli_overrides``,
        ``checkpoint``, ``track`` and ``faults``)."""
        return {
            k: v
            for k, v in self.hash_view().items()
            if k not in ("arm_keys", "cli_overrides", "checkpoint", "track", "faults")
        }

    def arm(self) -> dict[str, Any]:
        """The arm this cell belongs to: ``scale``, ``method``, ``lora`` and the value of every key in
        ``arm_keys``. The seeds of one arm are what the analysis pools."""
        out: dict[str, Any] = {
            "scale": self.model.name,
            "method": self.method,
            "lora": self.model.lora.enabled,
        }
        views = (self.model_dump(), self.hash_view())  # an axis may name a renamed setting either way
        for path in self.arm_keys:
            out[path] = next((v for v in (_lookup(view, path) for view in views) if v is not None), None)
        return out

    def seeds(self) -> dict[str, int]:
        """This run's seeds. Data order and init follow the run seed. Under ``seed_scope: run`` the
        training subset (``subset``) and the self-play and rollout sampling do too; under ``order`` the
        sampling is fixed and the subset is the split's first rows (no ``subset`` seed), shared by every
        seed. The sampled evaluation's seed is fixed in both, so every run meets the same draws."""
        run = self.seed_scope == "run"
        derived = {"data": self.seed, "init": self.seed, "sampling": self.seed if run else 0, "eval": 0}
        given = self.seed_overrides.model_dump()
        out = {k: (given[k] if given[k] is not None else v) for k, v in derived.items()}
        return out | ({"subset": self.seed} if run else {})

    def run_id(self) -> str:
        """``<scale>-<method>-s<seed>-<hash>``; the hash covers the resolved config and the loss's
        ``version``, so a change in a loss's maths re-runs its cells."""
        spec = _spec(self.method)
        version = spec.version if spec is not None else None
        digest = content_hash({"config": self.identity(), "loss_version": version}, 10)
        return f"{self.model.name.replace('/', '_')}-{self.method}-s{self.seed}-{digest}"


def _lookup(tree: dict, path: str) -> Any:
    value: Any = tree
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _known(kind: str, names: list[str], known: list[str], field: str) -> None:
    """Each of ``names`` is in ``known``; else one line naming the field, with the closest known name."""
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
            raise ValueError(f"field {field!r}: unknown {kind} {name!r}{hint}")


def format_validation_error(exc: ValidationError, where: str, model: type[BaseModel] = RunConfig) -> str:
    """One line: ``where: field a.b: message (did you mean 'x'?)``."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"]
    named = re.match(r"Value error, (\w+) (must be .*)", msg)
    if named and named.group(1) != str(err["loc"][-1] if err["loc"] else ""):
        # a block's own check (Strict.bounds) names its field: put the field on the path
        loc, msg = ".".join(p for p in (loc, named.group(1)) if p), named.group(2)
    msg = msg.removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        known = _known_keys(model, err["loc"][:-1])
        close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
        msg = "unknown key" + (f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})")
    return f"{where}: field {loc!r}: {msg}" if loc else f"{where}: {msg}"


def _known_keys(model: type[BaseModel], path) -> list[str]:
    for part in path:
        field = model.model_fields.get(str(part))
        if (
            field is None
            or not isinstance(field.annotation, type)
            or not issubclass(field.annotation, BaseModel)
        ):
            return []
        model = field.annotation
    return list(model.model_fields)


def micro_batches_per_rank(prompts_per_batch: int, batch_size: int, world: int, run: str) -> int:
    """Online: how many micro-batches of ``train.batch_size`` prompts (each with all its rollouts) one
    rank's share of a round holds. A ValueError names the knob when they do not divide."""
    if prompts_per_batch % world:
        raise ValueError(
            f"run {run}: online.prompts_per_batch={prompts_per_batch} must be divisible by the world size {world}"
        )
    per_rank = prompts_per_batch // world
    micro = min(batch_size, per_rank)
    if per_rank % micro:
        raise ValueError(
            f"run {run}: train.batch_size={batch_size} prompts per micro-batch must divide the "
            f"{per_rank} prompts each rank gets per round (online.prompts_per_batch / world size)"
        )
    return per_rank // micro


def _spec(method: str):
    """What the registry knows of ``method`` (:func:`losses.info`: its capabilities, from the index when
    it can, without importing the loss), or None (the grid's plan names an unknown method)."""
    import losses

    try:
        return losses.info(method)
    except losses.LossError:
        return None


def _is_online(method: str) -> bool | None:
    """Whether ``method`` trains on experience from the policy (None: not a known loss)."""
    spec = _spec(method)
    return None if spec is None else spec.trains_online
