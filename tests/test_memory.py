"""GPU memory per rank, computed (oxbench/engine/cost.py); the pre-flight check; one-line out-of-memory
errors in a cell's record while the grid goes on."""

from __future__ import annotations

import dataclasses
import os
import textwrap

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import losses
from oxbench.config import RunConfig
from oxbench.engine import cost as C
from oxbench.engine import memory as M

GB = 1e9


def small_config(tie: bool) -> Qwen2Config:
    return Qwen2Config(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=48, tie_word_embeddings=tie)  # fmt: skip


@pytest.mark.parametrize("tie", [True, False])
def test_the_parameter_count_is_the_models(tie):
    """The shape's count equals the parameters of a real Qwen2 model built from the same config."""
    model = Qwen2ForCausalLM(small_config(tie))
    shape = C.ModelShape.from_config(model.config)
    assert shape.params() == sum(p.numel() for p in model.parameters())


def test_qwen25_sizes_and_7b_bf16_weights():
    """The written-down configs give the released sizes; 7B's bf16 weights are 15.2 GB."""
    counts = {k: s.params() / 1e9 for k, s in C.QWEN25.items()}
    assert counts["0.5B"] == pytest.approx(0.494, abs=0.002) and counts["1.5B"] == pytest.approx(
        1.544, abs=0.002
    )
    assert counts["3B"] == pytest.approx(3.086, abs=0.002) and counts["7B"] == pytest.approx(7.616, abs=0.002)
    est = C.estimate(C.QWEN25["7B"], C.Setup(dtype="bf16"))
    assert est.weights / GB == pytest.approx(15.23, abs=0.02)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_stages_divide_what_they_shard_by_the_world_size(stage):
    shape = C.QWEN25["1.5B"]
    one, eight = (C.estimate(shape, C.Setup(world=w, zero_stage=stage)) for w in (1, 8))
    for part, sharded_from in (("optimizer", 1), ("gradients", 2), ("weights", 3)):
        ratio = getattr(one, part) / getattr(eight, part)
        assert ratio == pytest.approx(8 if stage >= sharded_from else 1, rel=1e-6), part


def test_lora_cuts_gradients_and_optimiser_state_but_not_weights():
    shape = C.QWEN25["7B"]
    full = C.estimate(shape, C.Setup(zero_stage=3, world=8))
    lora = C.estimate(shape, C.Setup(zero_stage=3, world=8, lora_r=16))
    assert lora.weights == full.weights
    assert lora.optimizer < full.optimizer / 100 and lora.gradients < full.gradients / 100
    # r=16 on q, k, v, o of 28 layers: 16 x (2 x 3584 + 2 x 3584 + 2 x (3584 + 512)) per layer
    assert shape.lora_params(16, ["q_proj", "k_proj", "v_proj", "o_proj"]) == 28 * 16 * (4 * 3584 + 2 * 4096)


def test_the_rollout_copy_is_whole_on_every_rank_and_vllm_is_a_share_or_nothing():
    shape, gpu = C.QWEN25["7B"], 80 * C.GIB
    base = C.Setup(zero_stage=3, world=8, gpu_bytes=gpu)
    hf = C.estimate(shape, dataclasses.replace(base, backend="hf"))
    assert hf.rollout_weights == shape.params() * 2 and hf.rollout_weights / hf.weights == pytest.approx(8)
    assert hf.rollout_kv > 0
    colocated = C.estimate(shape, dataclasses.replace(base, backend="vllm", vllm_share=0.25))
    separate = C.estimate(shape, dataclasses.replace(base, backend="vllm", vllm_placement="separate"))
    assert colocated.rollout_weights == 20 * C.GIB and colocated.rollout_kv == 0
    assert separate.rollout_weights == separate.rollout_kv == 0
    assert C.estimate(shape, base).rollout_weights == 0  # offline


def test_gradient_checkpointing_keeps_one_layer_of_activations():
    shape = C.QWEN25["3B"]
    plain = C.estimate(shape, C.Setup(micro_seqs=8, seq_len=1024))
    ckpt = C.estimate(shape, C.Setup(micro_seqs=8, seq_len=1024, gradient_checkpointing=True))
    assert ckpt.activations < plain.activations / 5
    assert ckpt.logits == plain.logits  # the logits are not recomputed away


def test_preflight_says_in_one_line_that_the_7b_rollout_copy_cannot_fit():
    """7B under ZeRO-3 on one 80 GB GPU: shards and optimiser state fit (with LoRA) but not beside a
    full bf16 copy and a reference; the error names the copy's size and what to change."""
    shape = C.QWEN25["7B"]
    setup = C.Setup(zero_stage=3, world=1, lora_r=16, backend="hf", reference=True, gpu_bytes=40 * C.GIB)
    with pytest.raises(M.PreflightError) as err:
        M.preflight(shape, setup, run="r7b", gpu_bytes=40 * C.GIB)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("run r7b: the hf rollout copy needs 14.2 GiB per rank")
    assert "online.backend vllm" in msg and "model.lora.enabled" in msg
    fits = M.preflight(shape, dataclasses.replace(setup, backend="vllm", vllm_placement="separate"),
                       run="r7b", gpu_bytes=40 * C.GIB)  # fmt: skip
    assert fits.rollout_weights == 0
    assert M.preflight(shape, setup, run="r7b", gpu_bytes=None).total > 40 * C.GIB  # no GPU: no check


def test_preflight_without_a_copy_names_the_shards():
    with pytest.raises(
        M.PreflightError, match=r"^run r: needs 1\d\d\.\d GiB per rank before activations \(ZeRO-0"
    ):
        M.preflight(C.QWEN25["7B"], C.Setup(zero_stage=0), run="r", gpu_bytes=80 * C.GIB)


def test_setup_for_run_reads_the_run_config():
    cfg = RunConfig(method="sgrpo", model={"dtype": "bf16", "lora": {"enabled": True, "r": 8}},
                    train={"zero_stage": 3, "batch_size": 2}, data={"max_len": 512},
                    online={"n": 8, "prompts_per_batch": 16, "max_new_tokens": 64})  # fmt: skip
    s = C.setup_for_run(cfg, 151936, online=True, reference=True, world=4)
    assert (s.zero_stage, s.dtype, s.lora_r, s.backend, s.world) == (3, "bf16", 8, "hf", 4)
    assert s.micro_seqs == 2 * 8 and s.seq_len == 512 and s.gen_seqs == 4 * 8 and s.gen_new == 64
    offline = C.setup_for_run(cfg.model_copy(update={"method": "dpo"}), 151936, online=False, pairs=True)
    assert offline.backend is None and offline.micro_seqs == 4


def test_check_run_is_skipped_without_cuda(micro_model_dir):
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine checks for real")
    from oxbench.engine.plan import resolve

    assert M.check_run(resolve(RunConfig(method="sgrpo")), None, run="r") is None


def test_the_docs_table_is_the_estimators():
    docs = open(os.path.join(os.path.dirname(__file__), "..", "docs", "gpus.md"), encoding="utf-8").read()
    assert C.memory_table() in docs, "docs/gpus.md: paste the first table `oxbench costs` prints"


# --------------------------------------------------------------------------- out of memory


OOM_CFG = RunConfig(method="sft", train={"batch_size": 8, "zero_stage": 0}, data={"max_len": 256})


@pytest.mark.parametrize(
    "exc, where",
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.\nGPU 0 has..."), "GPU"),
        (MemoryError(), "CPU"),
        (
            RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
            "CPU",
        ),
    ],
)
def test_an_out_of_memory_error_is_one_line_naming_the_cell_and_the_settings(exc, where):
    line = M.oom_line(exc, "cell-1", OOM_CFG)
    assert line == (
        f"OutOfMemoryError ({where}) in cell cell-1: lower train.batch_size (8) or data.max_len (256), "
        "or set model.lora.enabled true, train.zero_stage 3, model.gradient_checkpointing true"
    )


def test_other_errors_are_not_out_of_memory():
    assert M.oom_line(ValueError("bad value"), "c", OOM_CFG) is None
    lora3 = RunConfig(method="sft", model={"lora": {"enabled": True}}, train={"batch_size": 8, "zero_stage": 3},
                      data={"max_len": 256})  # fmt: skip
    assert M.oom_line(MemoryError(), "c", lora3).endswith(
        "or data.max_len (256), or set model.gradient_checkpointing true"
    )


def test_a_cell_that_runs_out_of_memory_records_the_one_line(micro_model_dir, tmp_path, monkeypatch):
    from oxbench.grid import runner, stages

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(stages, "train", oom)
    cfg = RunConfig(grid="g", method="sft", model={"name": micro_model_dir}, data={"n_train": 8})
    rec = runner.run_cell(cfg, tmp_path, verbose=False)
    assert rec["status"] == "failed"
    assert rec["error"] == M.oom_line(torch.OutOfMemoryError("x"), cfg.run_id(), cfg)
    assert cfg.run_id() in rec["error"] and "OutOfMemoryError" in rec["traceback"]


@pytest.mark.slow
def test_the_grid_goes_on_after_a_cell_runs_out_of_memory(micro_model_dir, tmp_path, monkeypatch):
    """A plugin loss that raises CUDA's out-of-memory error in one cell of two: that cell's record has the
    one line, the other cell finishes (same warm worker)."""
    from oxbench.grid import executors

    plugin = tmp_path / "plugins" / "oom_loss.py"
    plugin.parent.mkdir()
    plugin.write_text(textwrap.dedent("""
        import torch
        import losses

        def oom(inputs, **_):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")

        SPEC = losses.register(losses.LossSpec(name="oom_test", fn=oom, paradigm="offline", data="sft",
                                               needs_reference=False))
        """))  # fmt: skip
    monkeypatch.setenv("PYTHONPATH", f"{plugin.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("OXBENCH_PLUGINS", "oom_loss")
    monkeypatch.syspath_prepend(str(plugin.parent))
    import oom_loss  # noqa: F401  (the parent validates and hashes cells by the registry)

    def cell(method):
        return RunConfig(grid="oom", method=method, model={"name": micro_model_dir}, data={"n_train": 8},
                         train={"batch_size": 4, "max_steps": 1},
                         eval={"n_test": 2, "n_ood": 2, "k": 0, "max_new_tokens": 4})  # fmt: skip

    bad, good = cell("oom_test"), cell("sft")
    bad_id = bad.run_id()  # (its hash holds the plugin loss's version: taken while it is registered)
    try:
        recs = {r["method"]: r for r in executors.run_local([bad, good], tmp_path / "out", workers=1)}
    finally:
        losses.unregister("oom_test")
    assert recs["oom_test"]["status"] == "failed"
    assert recs["oom_test"]["error"] == (
        f"OutOfMemoryError (GPU) in cell {bad_id}: lower train.batch_size (4) or data.max_len (256), "
        "or set model.lora.enabled true, train.zero_stage 3, model.gradient_checkpointing true"
    )
    assert recs["sft"]["status"] == "finished"


# --------------------------------------------------------------------------- estimate against measured peak


def _shipped_base(scale: str) -> str:
    """The shipped base (oxbench/models/bases/) of tiny rung ``scale``: its path, loaded like any local model."""
    import json

    from oxbench.models.shipped import BASES
    from oxbench.models.tiny import LADDER

    hidden, layers, *_ = LADDER[scale]
    for d in sorted(BASES.iterdir()):
        c = json.loads((d / "config.json").read_text())
        if (c["hidden_size"], c["num_hidden_layers"]) == (hidden, layers):
            return str(d)
    raise AssertionError(f"no shipped base of {scale}")


def _measured_and_estimated(scale: str, backend: str | None, dtype: str = "fp32") -> tuple[int, int]:
    """One run of two optimiser steps on the shipped ``scale`` base, ZeRO-0, in ``dtype``: SFT
    (``backend`` None) or GRPO with that rollout backend. Returns the measured peak of torch's CPU tensor
    memory (the weights loaded before it, plus the high-water mark of everything allocated while it ran:
    :func:`M.cpu_peak_bytes`) and the estimate without the CUDA context, for the padded width it trained."""
    from helpers import length_parity_reward, rows_for, train_offline, train_online

    from oxbench.engine import distributed as D
    from oxbench.models.loading import load_model

    D.init_distributed()
    path, online = _shipped_base(scale), backend is not None
    cfg = RunConfig(method="grpo" if online else "sft", model={"name": path, "dtype": dtype}, data={"max_len": 48},
                    train={"batch_size": 2 if online else 8, "max_steps": None if online else 2,
                           "warmup_ratio": 0.0},
                    online={"n": 8, "prompts_per_batch": 2, "rounds": 2, "max_new_tokens": 32,
                            "backend": backend or "lean", "share_prompt": False})  # fmt: skip
    model, tok = load_model(path, cfg, init_seed=0)
    spec = losses.get(cfg.method)
    widths: list[tuple[int, int]] = []  # (sequences, padded tokens) of each training forward
    model.register_forward_pre_hook(
        lambda m, args, kw: widths.append(tuple(kw["input_ids"].shape)) if m.training else None,
        with_kwargs=True,
    )
    loaded = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    if online:
        rows = rows_for("online", 8)
        _, peak = M.cpu_peak_bytes(lambda: train_online(cfg, spec, spec.resolve_hparams(), model, tok, rows,
                                                        run="mem", reward_fn=length_parity_reward))  # fmt: skip
    else:
        rows = rows_for("sft", 32)
        _, peak = M.cpu_peak_bytes(
            lambda: train_offline(cfg, spec, spec.resolve_hparams(), model, tok, rows, run="mem")
        )
    shape = C.ModelShape.from_config(model.config)
    # GRPO's KL reference (beta 0.04): a live frozen copy beside the policy, as check_run counts it
    setup = C.setup_for_run(
        cfg, shape.vocab, online=online, reference=online and spec.uses_reference(spec.resolve_hparams())
    )
    assert {n for n, _ in widths} == {setup.micro_seqs}
    est = C.estimate(shape, dataclasses.replace(setup, seq_len=max(t for _, t in widths)))
    return loaded + peak, est.total - est.cuda_context


@pytest.mark.slow
@pytest.mark.parametrize(
    "scale, backend, dtype",
    [("tiny-s", None, "fp32"), ("tiny-m", None, "fp32"), ("tiny-s", "lean", "fp32"), ("tiny-m", "lean", "fp32"),
     ("tiny-s", "hf", "fp32"), ("tiny-s", None, "bf16"), ("tiny-s", "lean", "bf16")],
)  # fmt: skip
def test_the_estimate_is_within_15_percent_of_the_measured_peak(scale, backend, dtype):
    """The estimate (the peak: what the run holds plus its largest phase) against torch's CPU tensor
    memory at its highest, on the tiny rungs: SFT, and GRPO with its rollout copy; fp32, and bf16 (the
    logits' fp32 copy, DeepSpeed's bf16 optimiser)."""
    if torch.cuda.is_available():  # the model would train on the GPU, where the CPU's count sees nothing
        pytest.skip("a CPU measurement: on a GPU the smoke records timing.peak_gpu_gib beside the estimate")
    measured, estimated = _measured_and_estimated(scale, backend, dtype)
    print(f"{scale} {backend or 'sft'} {dtype}: measured {measured:,} B, estimated {estimated:,} B, "
          f"{estimated / measured - 1:+.1%}")  # fmt: skip
    assert estimated == pytest.approx(measured, rel=0.15)
