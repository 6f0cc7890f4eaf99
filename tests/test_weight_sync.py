"""Weight syncs (issue 36): ``sync_s`` covers the gather as well as the copy in, for every source; the
rollout copy takes the learner's weights in place (no host round trip); host snapshots are pinned only
where CUDA really is. Issue 38: every sync logs its bytes and path, and the weights reach a vLLM server
without a file (:mod:`oxbench.engine.weight_stream`): the socket codec, its chunks, the choice of path
and the whole request/answer exchange are checked here against the server's own code with a stand-in
for vLLM (the real server: tests/test_vllm_backend.py)."""

from __future__ import annotations

import contextlib
import threading
import time
from multiprocessing.connection import Pipe

import pytest
import torch
from helpers import cfg_for, length_parity_reward, rows_for

import losses
from oxbench.engine import distributed as D
from oxbench.engine import model as M
from oxbench.engine import vllm_server as S
from oxbench.engine import weight_stream as W
from oxbench.engine.rollout import IN_PLACE, RolloutWorker
from oxbench.engine.vllm_client import VllmEngine
from oxbench.models.loading import load_model

SLOW_GATHER = 0.25  # seconds each gather is made to take


def _sgrpo(model_dir, **online):
    """Three rounds of sgrpo on the micro model with the given online settings; the metrics rows."""
    from helpers import train_online

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
    path = "shared memory" if online.get("source") == "async" else IN_PLACE  # the learner's publish
    # the delayed source's round 1 samples with version 0 again: no copy in, 0 bytes
    assert [row["sync_path"] for row in rows] == [path] * 3 and rows[0]["sync_bytes"] == rows[2][
        "sync_bytes"
    ] > 0


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


def test_the_hf_rollout_copy_logs_its_in_place_bytes_and_path():
    """The HF rollout copy's pull and a snapshot's load are in-place copies (the parameters stay where
    they are); each logs the bytes it copied and its path, and a row with no sync since logs 0 bytes."""
    source, _ = _pair()
    worker = RolloutWorker(source, None, max_len=16)
    storage = {k: v.data_ptr() for k, v in worker.model.state_dict().items()}
    size = sum(v.numel() * v.element_size() for v in source.state_dict().values())  # tied: once per name
    worker.pull(0)
    stats = worker.take_sync_stats()
    assert stats["sync_path"] == IN_PLACE and stats["sync_bytes"] == size and stats["sync_s"] > 0
    assert "vllm_sync_bytes" not in stats
    worker.sync(M.to_host(source.state_dict()), 1)
    assert worker.take_sync_stats()["sync_bytes"] == size
    assert {k: v.data_ptr() for k, v in worker.model.state_dict().items()} == storage
    assert worker.take_sync_stats() == {"sync_s": 0.0, "sync_bytes": 0, "sync_path": IN_PLACE}


def _state() -> dict[str, torch.Tensor]:
    """Every kind of tensor a state dict may hold: dtypes, a NaN and -0.0, a 0-d, an empty, a
    non-contiguous view, and a tied weight (the very same tensor under two names)."""
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(50, 16, generator=g)
    odd = torch.tensor([float("nan"), -0.0, float("inf"), 1e-45])
    return {"model.embed_tokens.weight": emb, "a.bf16": torch.randn(7, 5, generator=g).bfloat16(),
            "a.f16": torch.randn(33, generator=g).half(), "a.odd": odd, "a.i64": torch.arange(-3, 9),
            "a.bool": torch.tensor([True, False, True]), "a.scalar": torch.tensor(2.5),
            "a.empty": torch.zeros(0, 4), "a.t": torch.randn(6, 4, generator=g).t(),
            "big": torch.randn(64, 64, generator=g), "lm_head.weight": emb}  # fmt: skip


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _same(got: dict, want: dict) -> bool:
    """Equal names (in any order: a chunk comes back sorted), dtypes, shapes and bytes (NaN, -0.0)."""
    return sorted(got) == sorted(want) and all(
        got[k].dtype == v.dtype and got[k].shape == v.shape and torch.equal(_bits(got[k]), _bits(v))
        for k, v in want.items()
    )


def test_the_socket_stream_round_trips_a_state_dict_bitwise():
    """The learner's chunks (weight_stream) read back by the server's own reader (vllm_server) over a
    real socket: every tensor bitwise, in any dtype; the tied weight travels once, as an alias; nothing
    is left unread."""
    state = _state()
    alias, chunks, n = W.socket_chunks(state, budget=256)
    assert alias == {"lm_head.weight": "model.embed_tokens.weight"} and n > 3
    ours, theirs = Pipe()
    sent = []
    sender = threading.Thread(target=lambda: sent.append(W.send_chunks(ours, chunks)))
    sender.start()
    got = dict(S.socket_weights(theirs, n, alias))
    sender.join()
    assert _same(got, state) and not theirs.poll()
    assert got["lm_head.weight"] is got["model.embed_tokens.weight"]
    assert sent == [sum(v.numel() * v.element_size() for k, v in state.items() if k not in alias)]


def test_chunks_respect_the_byte_budget():
    """Each chunk stays within the budget (a larger tensor alone in its own), in order, each name once."""
    sizes = [("a", 10), ("b", 30), ("c", 100), ("d", 5), ("e", 55), ("f", 1), ("g", 40)]
    plan = W.plan_chunks(sizes, budget=60)
    assert plan == [["a", "b"], ["c"], ["d", "e"], ["f", "g"]]
    assert W.plan_chunks([], budget=60) == [] and W.plan_chunks(sizes, budget=10**9) == [list("abcdefg")]
    state = _state()
    _, chunks, n = W.socket_chunks(state, budget=2048)
    chunks = list(chunks)
    assert len(chunks) == n and max(len(header) for header, _ in chunks) > 1
    for header, views in chunks:
        assert len(header) == len(views) and (sum(v.nbytes for v in views) <= 2048 or len(views) == 1)
    assert [name for header, _ in chunks for name, _, _ in header] == [
        k for k in state if k != "lm_head.weight"
    ]


def test_the_path_is_the_best_offered_and_a_fallback_is_said_once(capsys):
    """CUDA IPC where the server sees the weights' GPU, else the socket; the file only where the server
    offers nothing else, said once on one line however many syncs; a path asked for by name that cannot
    be used is an error; a failed IPC sync falls back to the socket for good, said once too."""
    every = ("cuda-ipc", "socket", "file")
    assert W.choose_path("auto", every, "GPU-a", ["GPU-a"]) == ("cuda-ipc", None)
    assert W.choose_path("auto", every, "GPU-a", ["GPU-b"]) == ("socket", None)  # a GPU of its own
    assert W.choose_path("auto", ("socket", "file"), None, []) == ("socket", None)  # a CPU server
    assert W.choose_path("file", every, None, []) == ("file", None)
    with pytest.raises(ValueError, match="'cuda-ipc' is not usable here"):
        W.choose_path("cuda-ipc", every, None, ["GPU-a"])
    with pytest.raises(ValueError, match="choose one of auto, cuda-ipc, socket, file"):
        W.choose_path("nccl", every, None, [])
    route = W.Route("auto", ("file",))
    assert [route.pick(None) for _ in range(3)] == ["file"] * 3
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "through a file each step" in err[0]
    route = W.Route("auto", every, ("GPU-a",))
    assert route.pick("GPU-a") == "cuda-ipc"
    route.ipc_failed("invalid device context")
    assert [route.pick("GPU-a") for _ in range(3)] == ["socket"] * 3
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "CUDA IPC failed (invalid device context)" in err[0]
    with pytest.raises(ValueError, match="'cuda-ipc' failed"):
        W.Route("cuda-ipc", every, ("GPU-a",)).ipc_failed("no")


class _FakeLLM:
    """What the server's sync asks of vLLM's ``LLM``: the weights it was fed, materialised."""

    def __init__(self):
        self.loaded: list[dict] = []

    def collective_rpc(self, method, kwargs):
        assert method == "reload_weights" and kwargs["is_checkpoint_format"]
        self.loaded.append(dict(kwargs["weights_iterator"]))

    def reset_prefix_cache(self):
        pass


class _Alive:
    returncode = None

    def poll(self):
        return None


def _engine(tmp_path, path: str, offered=("socket", "file"), gpus=()):
    """A :class:`VllmEngine` talking to the server's request loop (vllm_server.sync) in a thread, with
    :class:`_FakeLLM` in place of vLLM."""
    ours, theirs = Pipe()
    llm = _FakeLLM()

    def loop():
        while (req := theirs.recv())["op"] != "close":
            theirs.send(S.sync(llm, theirs, req))

    threading.Thread(target=loop, daemon=True).start()
    engine = object.__new__(VllmEngine)
    engine.conn, engine.proc, engine.dir, engine.log = ours, _Alive(), tmp_path, tmp_path / "server.log"
    engine.route, engine.chunk_bytes = W.Route(path, offered, gpus), 4096
    engine.sync_seconds, engine.sync_bytes, engine.sync_path = 0.0, 0, None
    return engine, llm


def test_the_socket_sync_writes_no_file_and_loads_what_the_file_sync_loads(tmp_path, monkeypatch):
    """The whole exchange, learner to server: the socket path loads bitwise the tensors the file path
    loads, in several chunks, with no ``torch.save`` and no file; both log their bytes and path (the
    socket's: the tensors' own bytes, the tied one once)."""
    state = _state()
    saves = []
    real_save = torch.save
    monkeypatch.setattr(torch, "save", lambda *a, **k: saves.append(a[1]) or real_save(*a, **k))
    engine, llm = _engine(tmp_path, "socket")
    before = sorted(tmp_path.rglob("*"))
    for _ in range(2):
        engine.sync(state)
    assert saves == [] and sorted(tmp_path.rglob("*")) == before
    assert (
        engine.sync_path == "socket" and len(llm.loaded) == 2 and all(_same(got, state) for got in llm.loaded)
    )
    assert engine.sync_bytes == 2 * sum(
        v.numel() * v.element_size() for k, v in state.items() if k != "lm_head.weight"
    )
    engine.conn.send({"op": "close"})
    engine, llm = _engine(tmp_path, "file")
    engine.sync(state)
    assert len(saves) == 1 and engine.sync_path == "file" and 0 < engine.sync_bytes
    assert _same(llm.loaded[0], state) and not (tmp_path / "weights.pt").exists()  # removed once loaded
    engine.conn.send({"op": "close"})


def test_a_cuda_ipc_sync_the_server_cannot_open_goes_through_the_socket_said_once(
    tmp_path, monkeypatch, capsys
):
    """Where the server offers CUDA IPC for the weights' GPU but cannot open the handles (here: it sees no
    GPU at all), it answers before loading anything; that sync and the later ones stream through the
    socket, the fallback said once, and the server loads the same weights."""
    import oxbench.engine.vllm_client as V

    sent = []
    monkeypatch.setattr(V, "device_uuid", lambda state: "GPU-a")  # as if the tensors were on that GPU
    monkeypatch.setattr(
        V, "ipc_handles", lambda state: (sent.append(1) or [(k, "GPU-a", ()) for k in state], [])
    )
    state = _state()
    engine, llm = _engine(tmp_path, "auto", ("cuda-ipc", "socket", "file"), ("GPU-a",))
    for _ in range(3):
        engine.sync(state)
    assert sent == [1] and engine.sync_path == "socket" and len(llm.loaded) == 3
    assert all(_same(got, state) for got in llm.loaded)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "CUDA IPC failed (ValueError: the trainer's GPU GPU-a is not visible" in err[0]
    engine.conn.send({"op": "close"})
