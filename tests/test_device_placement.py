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
from helpers import cfg_for, length_parity_reward, rows_for

import losses
import oxbench.device as placement
from oxbench.engine import distributed as D
from oxbench.engine.build import train_offline, train_online
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


def _run(method: str, path: str, audit: VirtualCuda, eval_kw=None, online_kw=None, zero_stage=0):
    eval_kw, online_kw = eval_kw or {}, online_kw or {}
    spec = losses.get(method)
    cfg = cfg_for(path, method, max_steps=2, zero_stage=zero_stage)
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
    _run(
        "grpo", micro_model_dir, virtual_cuda, {"backend": "lean"}, {"backend": "lean", "share_prompt": True}
    )
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
