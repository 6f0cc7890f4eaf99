"""Weight syncs (issue 36): ``sync_s`` covers the gather as well as the copy in, for every source; the
rollout copy takes the learner's weights in place (no host round trip); host snapshots are pinned only
where CUDA really is."""

from __future__ import annotations

import contextlib
import time

import pytest
import torch
from helpers import cfg_for, length_parity_reward, rows_for

import losses
from oxbench.engine import distributed as D
from oxbench.engine import model as M
from oxbench.models.loading import load_model

SLOW_GATHER = 0.25  # seconds each gather is made to take


def _sgrpo(model_dir, **online):
    """Three rounds of sgrpo on the micro model with the given online settings; the metrics rows."""
    from oxbench.engine.build import train_online

    D.init_distributed()
    spec = losses.get("sgrpo")
    cfg = cfg_for(model_dir, "sgrpo", max_steps=None)
    cfg = cfg.model_copy(update={"online": cfg.online.model_copy(update={"rounds": 3, **online})})
    model, tok = load_model(model_dir, cfg, init_seed=0)
    _, res = train_online(cfg, spec, spec.resolve_hparams(), model, tok, rows_for("online", 8), run="sync",
                          reward_fn=length_parity_reward)  # fmt: skip
    return res.history


@pytest.mark.slow
@pytest.mark.parametrize(
    "online",
    [{}, {"source": "delayed", "staleness": 1}, {"source": "async", "staleness": 1}],
    ids=["sync", "delayed", "async"],
)
def test_the_sync_time_includes_the_gather(micro_model_dir, monkeypatch, online):
    """The gather (ZeRO-3's all-gather; here made slow on purpose) is part of every round's ``sync_s``:
    the sync source's pull, the delayed source's snapshot, the asynchronous source's publish."""
    real, calls = M.gathered, []

    @contextlib.contextmanager
    def slow(module):
        calls.append(module)
        time.sleep(SLOW_GATHER)
        with real(module) as m:
            yield m

    monkeypatch.setattr(M, "gathered", slow)
    rows = _sgrpo(micro_model_dir, **online)
    assert len(rows) == 3 and calls
    assert all(row["sync_s"] >= SLOW_GATHER for row in rows), [row["sync_s"] for row in rows]


def _pair():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=24, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    a = Qwen2ForCausalLM(cfg)
    torch.manual_seed(1)
    return a, Qwen2ForCausalLM(cfg)


def test_pull_copies_in_place_bitwise_what_a_host_snapshot_loads():
    """``copy_weights`` (the rollout copy's pull) leaves the copy's parameters where they are (the same
    storage) and bitwise equal to loading a host snapshot, as every sync did before."""
    source, target = _pair()
    _, via_host = _pair()
    storage = {k: v.data_ptr() for k, v in target.state_dict().items()}
    M.copy_weights(source, target)
    via_host.load_state_dict(M.to_host(source.state_dict()), strict=False)
    assert {k: v.data_ptr() for k, v in target.state_dict().items()} == storage
    assert all(torch.equal(target.state_dict()[k], v) for k, v in via_host.state_dict().items())
    assert all(torch.equal(source.state_dict()[k], v) for k, v in target.state_dict().items())


def test_host_snapshots_are_clones_and_pin_only_cuda_tensors(monkeypatch):
    """On the CPU a snapshot is a clone (a later step cannot change it); pinned staging is only for a
    tensor on a CUDA device, so a CPU tensor is never pinned even where CUDA is available (pinning
    fails on a CPU-only build)."""
    w = torch.arange(6.0).reshape(2, 3)
    snap = M.to_host({"w": w})["w"]
    w.add_(1)
    assert torch.equal(snap, torch.arange(6.0).reshape(2, 3)) and not snap.is_pinned()
    assert M.to_host({"w": w}, copy=False)["w"] is not None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert torch.equal(M.to_host({"w": w})["w"], w)  # no pin_memory attempted: it would raise here
