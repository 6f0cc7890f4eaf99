"""Device placement, checked without a GPU (issue 24): every learner step, reference, value head,
rollout copy and evaluation as it would run with the model on ``cuda:0``.

:class:`device_audit.VirtualCuda` labels tensors with the device they would live on and fails any op
that mixes the accelerator with the host, as CUDA does. The test makes ``oxbench.device`` report
``cuda:0`` (what it reports on a GPU rank) and DeepSpeed's engine put its module there (what
DeepSpeed does on a GPU); everything else is oxbench's own placement.
"""

from __future__ import annotations

import pytest
import torch
from device_audit import FAKE, VirtualCuda
from helpers import cfg_for, length_parity_reward, rows_for, train_offline, train_online

import losses
import oxbench.device as placement
from oxbench.engine import distributed as D
from oxbench.eval.evaluate import evaluate
from oxbench.models.loading import load_model


@pytest.fixture
def virtual_cuda(monkeypatch):
    """The audit mode, with the rank's device and DeepSpeed's placement pointing at ``cuda:0``."""
    import deepspeed

    D.init_distributed()
    audit = VirtualCuda()
    real = deepspeed.initialize

    def initialize(*args, **kwargs):  # DeepSpeed on a GPU: the module lands on cuda:LOCAL_RANK
        out = real(*args, **kwargs)
        audit.place(out[0].module)
        return out

    monkeypatch.setattr(deepspeed, "initialize", initialize)
    monkeypatch.setattr(placement, "_detect", lambda: FAKE)
    placement.reset()
    yield audit
    placement.reset()


def _on_device(audit: VirtualCuda, module) -> bool:
    return all(audit.fake(p) for p in module.parameters())


def _run(
    method: str, path: str, audit: VirtualCuda, eval_kw=None, online_kw=None, zero_stage=0, dtype="bf16"
):
    """One method trained and evaluated on ``cuda:0``, in bf16 (what ``model.dtype: auto`` is on a GPU)
    unless ``dtype`` says otherwise."""
    eval_kw, online_kw = eval_kw or {}, online_kw or {}
    spec = losses.get(method)
    cfg = cfg_for(path, method, max_steps=2, zero_stage=zero_stage)
    cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"dtype": dtype})})
    small = {"n_test": 4, "n_ood": 2, "k": 2, "n_samples": 2, "n_sampled": 2, "max_new_tokens": 8}
    cfg = cfg.model_copy(
        update={
            "eval": cfg.eval.model_copy(update={**small, **eval_kw}),
            "online": cfg.online.model_copy(update={"rounds": 2, **online_kw}),
        }
    )
    model, tok = load_model(path, cfg, init_seed=0)
    hp = spec.resolve_hparams()
    with audit:
        if spec.data == "online":
            engine, res = train_online(
                cfg, spec, hp, model, tok, rows_for("online", 8), run=method, reward_fn=length_parity_reward
            )
        else:
            engine, res = train_offline(cfg, spec, hp, model, tok, rows_for(spec.data), run=method)
        lm = engine.module.lm if hasattr(engine.module, "lm") else engine.module
        metrics, _ = evaluate(lm, tok, cfg, seed=0)
    assert res.optimizer_steps == 2
    assert 0.0 <= metrics["accuracy"] <= 1.0
    return engine, res


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sft", "dpo", "kto", "tr_dpo", "grpo", "ppo"])
def test_every_step_runs_with_the_model_on_the_accelerator(method, micro_model_dir, virtual_cuda):
    """Offline (SFT; DPO with a cached reference; KTO's unpaired KL side; TR-DPO's live reference),
    online (GRPO: rollout copy, live reference) and the value head (PPO), then the evaluator."""
    _run(method, micro_model_dir, virtual_cuda)
    assert virtual_cuda.ops["checked"] > 1000  # the audit saw the forwards, not a shortcut


@pytest.mark.slow
@pytest.mark.parametrize("method", ["dpo", "grpo"])
def test_zero3_runs_with_the_model_on_the_accelerator(method, micro_model_dir, virtual_cuda):
    """ZeRO-3 partitions the parameters and gathers them for each forward and for the rollout sync."""
    _run(method, micro_model_dir, virtual_cuda, zero_stage=3)


@pytest.mark.slow
def test_rollout_copy_and_reference_live_on_the_device(micro_model_dir, virtual_cuda, monkeypatch):
    """The frozen copies (reference, rollout worker) sit where the policy does: on the rank's device."""
    from oxbench.engine.loop import Loop

    seen = {}
    real_run = Loop.run_all

    def spy(self):
        seen["loop"] = self
        return real_run(self)

    monkeypatch.setattr(Loop, "run_all", spy)
    lean = {"backend": "lean", "share_prompt": True}
    _run("grpo", micro_model_dir, virtual_cuda, {"backend": "lean"}, lean, dtype="fp32")
    loop = seen["loop"]
    assert _on_device(virtual_cuda, loop.source.worker.model)
    assert loop.learner.live_ref is None or _on_device(virtual_cuda, loop.learner.live_ref.model)


def test_the_audit_catches_a_host_batch(micro_model_dir):
    """The audit itself: a batch built without a device, fed to a model on the device, fails."""
    from device_audit import DeviceMismatch

    cfg = cfg_for(micro_model_dir, "sft")
    model, _ = load_model(micro_model_dir, cfg, init_seed=0)
    with VirtualCuda() as audit:
        model.to(FAKE)
        assert _on_device(audit, model) and next(model.parameters()).device == FAKE
        with pytest.raises(DeviceMismatch, match="cuda:0"):
            model(input_ids=torch.zeros(2, 5, dtype=torch.long))
        out = model(input_ids=torch.zeros(2, 5, dtype=torch.long, device=FAKE))
        assert out.logits.device == FAKE and out.logits.cpu().device.type == "cpu"


def test_the_audit_catches_mixed_dtypes_where_cuda_refuses_them():
    """A bf16 weight meeting an fp32 activation in a matmul, linear, attention or index op fails as on a
    GPU; elementwise promotion and 0-dim scalars pass, as they do there."""
    from device_audit import DtypeMismatch

    w = torch.randn(4, 4, dtype=torch.bfloat16)
    with VirtualCuda() as audit:
        w_dev, x = w.to(FAKE), torch.randn(2, 4, device=FAKE)
        for op in (
            lambda: x @ w_dev,
            lambda: torch.nn.functional.linear(x, w_dev),
            lambda: torch.nn.functional.scaled_dot_product_attention(x[None], w_dev[None], w_dev[None]),
            lambda: torch.zeros(4, 4, device=FAKE).index_put_((torch.arange(2, device=FAKE),), w_dev[:2]),
        ):
            with pytest.raises(DtypeMismatch, match="mixed dtypes"):
                op()
        assert (x * w_dev[:2]).dtype == torch.float32 and (w_dev * torch.tensor(2.0)).dtype == torch.bfloat16
        assert audit.syncs == {}


def test_the_audit_counts_host_synchronisations():
    with VirtualCuda() as audit:
        x = torch.arange(6.0, device=FAKE)
        x.sum().item(), x.tolist(), bool(x.sum()), int(x[0]), x.nonzero(), x[x > 2], x.cpu()
        host = torch.empty(6)
        host.copy_(x, non_blocking=True)  # pinned staging: no wait
        host.copy_(x)
        x[torch.arange(2, device=FAKE)] = 0.0  # integer indices on the device: no wait
        torch.where(x > 1, x, 0.0), x.repeat_interleave(2)
    assert audit.syncs == {
        "item": 1,
        "tolist": 1,
        "bool": 1,
        "int": 1,
        "nonzero": 1,
        "boolean index": 1,
        "cpu": 1,
        "copy to host": 1,
    }
    assert all("test_device_placement.py" in site for site in audit.sync_sites)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_lean_decoder_never_waits_for_the_device_per_token(dtype, micro_model_dir):
    """Rollouts through the lean decoder on ``cuda:0``: no host synchronisation grows with the number of
    generated tokens (0 per token), a constant per rollout batch (the samples read back at its end),
    rows ending and leaving the batch on the way; and no op mixes dtypes."""
    from transformers import AutoModelForCausalLM

    from oxbench.models.tokenizer import build_char_tokenizer
    from oxbench.text.generation import sample

    model = AutoModelForCausalLM.from_pretrained(micro_model_dir, dtype=dtype).eval()
    tok = build_char_tokenizer()
    tok.padding_side = "left"
    counts = {}
    for width in (8, 40):
        with VirtualCuda() as audit:
            audit.place(model)
            out = sample(
                model,
                tok,
                ["1 + 2 =", "Q: 7 - 3?"],
                max_new_tokens=width,
                temperature=1.0,
                num_return_sequences=16,
                batch_size=2,
                generator_seed=0,
                backend="lean",
            )
        counts[width] = dict(audit.syncs)
    ended = [s.finished for group in out for s in group]
    assert any(ended) and not all(ended)  # rows left the batch at end-of-sequence
    assert counts[8] == counts[40], counts
    assert sum(counts[40].values()) <= 4, audit.sync_sites
