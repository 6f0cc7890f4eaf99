"""The vLLM server's GPU placement (online.vllm_placement: colocated or separate GPUs) and the timed weight
sync. vLLM cannot run here: these check the command line and environment the server would be launched
with, and the ``sync_s`` every online round logs."""

from __future__ import annotations

import sys

import pytest
import torch
from helpers import cfg_for, length_parity_reward, rows_for, train_online

import losses
from oxbench.config import RunConfig
from oxbench.engine import distributed as D
from oxbench.engine import vllm_client as V
from oxbench.engine.rollout import RolloutWorker, vllm_options
from oxbench.models.loading import load_model


def test_no_gpu_leaves_the_cpu_server_as_it_was():
    place = V.resolve_placement("separate", gpus=0)
    assert place == V.Placement(None, 0.3, "cpu")
    env = V._server_env(2, place, "float32")
    assert env.get("CUDA_VISIBLE_DEVICES") == __import__("os").environ.get("CUDA_VISIBLE_DEVICES")


@pytest.mark.parametrize(
    "args, want",
    [
        (dict(mode="colocate", gpus=2, local_rank=1, local_world=2), ("1", 0.3)),
        (dict(mode="colocate", gpus=2, local_rank=1, local_world=2, visible="4,5"), ("5", 0.3)),
        (dict(mode="separate", gpus=2), ("1", 0.9)),  # the GPU after the one training rank's
        (dict(mode="separate", gpus=4, local_rank=1, local_world=2, memory=0.5), ("3", 0.5)),
        (
            dict(mode="separate", devices=[3, 2], gpus=4, local_rank=1, local_world=2, visible="0,1,6,7"),
            ("6", 0.9),
        ),
        (dict(mode="auto", gpus=1), ("0", 0.3)),  # nothing left over: colocated
        (dict(mode="auto", gpus=2), ("1", 0.9)),  # a spare GPU: the asynchronous study's setting
    ],
)
def test_the_server_gpu_by_placement(args, want):
    place = V.resolve_placement(args.pop("mode"), args.pop("devices", None), args.pop("memory", None), **args)
    assert (place.devices, place.memory) == want


def test_separate_without_a_spare_gpu_is_an_error_naming_the_setting():
    with pytest.raises(V.VllmError, match=r"online.vllm_placement 'separate' needs GPU 1 for rank 0's vLLM"):
        V.resolve_placement("separate", gpus=1)


def test_the_server_environment_and_command():
    env = V._server_env(4, V.Placement("3", 0.45, "separate GPU 3"), "bfloat16")
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["OXBENCH_VLLM_MEMORY"] == "0.45"
    assert env["OXBENCH_VLLM_DTYPE"] == "bfloat16"
    cmd = V.server_command("/py", V.SERVER.parent / "m", "/tmp/s")
    assert cmd == ["/py", str(V.SERVER), str(V.SERVER.parent / "m"), "/tmp/s"] and V.SERVER.exists()


class FakeServer:
    """Stands in for the server process: records its launch, then exits before connecting."""

    launched: list = []

    def __init__(self, argv, env, **kwargs):
        FakeServer.launched.append((argv, env))
        self.returncode = 1

    def poll(self):
        return 1

    def wait(self, timeout=None):
        return 1


def test_a_run_config_places_its_server(micro_model_dir, monkeypatch):
    """online.vllm_* reach the launched server: the rollout worker of a bf16 model with a separate GPU
    starts the server on that GPU, with its memory share and the model's dtype."""
    cfg = RunConfig(
        method="sgrpo", online={"backend": "vllm", "vllm_placement": "separate", "vllm_memory": 0.6}
    )
    monkeypatch.setattr(V.subprocess, "Popen", FakeServer)
    monkeypatch.setattr(V, "_has_gpu", lambda: True)  # (the micro model's head size has no CPU kernel)
    monkeypatch.setattr(V, "_gpu_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("OXBENCH_VLLM_PYTHON", raising=False)  # the server in this Python
    model, tok = load_model(micro_model_dir, cfg_for(micro_model_dir, "sgrpo"), init_seed=0)
    FakeServer.launched.clear()
    with pytest.raises(V.VllmError, match="exited with code 1 before connecting"):
        RolloutWorker(
            model.to(torch.bfloat16), tok, max_len=64, backend="vllm", vllm=vllm_options(cfg.online)
        )
    (argv, env), = FakeServer.launched  # fmt: skip
    assert argv[:2] == [sys.executable, str(V.SERVER)]
    assert (env["CUDA_VISIBLE_DEVICES"], env["OXBENCH_VLLM_MEMORY"], env["OXBENCH_VLLM_DTYPE"]) == (
        "1",
        "0.6",
        "bfloat16",
    )


def test_placement_settings_need_the_vllm_backend_and_leave_run_ids_alone():
    with pytest.raises(ValueError, match="online.vllm_placement needs online.backend 'vllm'"):
        RunConfig(method="sgrpo", online={"vllm_placement": "separate"})
    plain = RunConfig(method="sgrpo", online={"backend": "vllm"})
    assert (
        RunConfig(method="sgrpo", online={"backend": "vllm", "vllm_placement": "colocate"}).run_id()
        == plain.run_id()
    )
    assert (
        RunConfig(method="sgrpo", online={"backend": "vllm", "vllm_placement": "auto"}).run_id()
        != plain.run_id()
    )
    with pytest.raises(ValueError, match=r"vllm_memory"):
        RunConfig(method="sgrpo", online={"backend": "vllm", "vllm_memory": 1.5})


@pytest.mark.parametrize("source", ["sync", "delayed"])
def test_every_online_round_logs_its_weight_sync_time(micro_model_dir, source):
    D.init_distributed()
    cfg = cfg_for(micro_model_dir, "sgrpo")
    extra = {"source": "delayed", "staleness": 1} if source == "delayed" else {}
    cfg = cfg.model_copy(update={"online": cfg.online.model_validate({**cfg.online.model_dump(), **extra})})
    spec = losses.get("sgrpo")
    model, tok = load_model(micro_model_dir, cfg, init_seed=0)
    _, res = train_online(cfg, spec, spec.resolve_hparams(), model, tok, rows_for("online", 8), run="sync",
                          reward_fn=length_parity_reward)  # fmt: skip
    times = [h["sync_s"] for h in res.history]
    assert len(times) == cfg.online.rounds and all(t >= 0 for t in times)
    assert times[0] > 0  # round 0 copies the weights in, whatever the source
    if source == "sync":  # and the synchronous loop copies them every round
        assert all(t > 0 for t in times)
