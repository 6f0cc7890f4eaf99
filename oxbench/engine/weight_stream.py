"""How the learner's weights reach the vLLM rollout server each step, without a file.

The trainer's side of :class:`~oxbench.engine.vllm_client.VllmEngine`'s weight sync; the server's side is
in :mod:`oxbench.engine.vllm_server` (which imports nothing from oxbench, so the wire format is plain:
pickled dicts and raw bytes over the ``multiprocessing.connection`` socket the two already share).
Three paths, best first (:data:`PATHS`):

* ``cuda-ipc``: the server runs on the learner's GPU (``online.vllm_placement`` colocate). Each tensor of
  the rollout copy travels as a CUDA IPC handle (``torch.multiprocessing.reductions.reduce_tensor``,
  keyed by the GPU's UUID, as vLLM's own ``ipc`` weight-transfer engine does); the server opens the
  handles and ``reload_weights`` copies device to device. No host bytes; only torch is needed on either
  side. A handle the server cannot open (or one the learner cannot make) is answered before any weight
  is loaded, and that sync and every later one go through the socket instead (said once).
* ``socket``: everything else (a CPU server, a server on a GPU of its own). The state dict is cut into
  chunks of at most :data:`CHUNK_BYTES` (:func:`plan_chunks`); per chunk a header (names, dtypes,
  shapes: plain lists, no tensor is pickled) and then the tensors' bytes as they lie in memory, written
  straight to the socket (:func:`send_chunks`); the server reads each into a fresh tensor and hands it to
  ``reload_weights`` at once (:func:`oxbench.engine.vllm_server.socket_weights`). No file, no encoding
  copy; from a GPU each chunk is staged through pinned memory. Tensors that share storage (tied
  embeddings) travel once, the others named as its aliases.
* ``file``: the old path, a ``torch.save``d ``weights.pt`` the server loads; used only where asked for
  (``OXBENCH_VLLM_SYNC=file``, benchmarks) or where a server offers neither of the others (its ``ready``
  names no paths), which is said once.

A NCCL broadcast (TRL's ``vllm-serve``, vLLM's ``nccl`` weight-transfer backend) would serve a server on
a GPU of its own without host bytes, but needs vLLM importable in the learner's Python, which oxbench does
not assume (on a CPU machine vLLM lives in a virtualenv of its own): such a server takes the socket.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch

PATHS = ("cuda-ipc", "socket", "file")  # best first
CHUNK_BYTES = 256 * 2**20  # tensor bytes per socket chunk (one header; staged to the host at once from a GPU)


def plan_chunks(sizes: Sequence[tuple[str, int]], budget: int = CHUNK_BYTES) -> list[list[str]]:
    """Consecutive names grouped so each group's bytes stay within ``budget``; a tensor larger than the
    budget is a group of its own. Every name appears once, in order."""
    chunks: list[list[str]] = []
    used = 0
    for name, size in sizes:
        if not chunks or used + size > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(name)
        used += size
    return chunks


def _storage_key(t: torch.Tensor) -> tuple:
    return (
        t.device,
        t.untyped_storage().data_ptr(),
        t.storage_offset(),
        tuple(t.shape),
        tuple(t.stride()),
        t.dtype,
    )


def aliases(state: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """``{alias: name}`` for every tensor that is the very same view as an earlier one (tied weights):
    it travels once, under ``name``."""
    seen: dict[tuple, str] = {}
    out = {}
    for k, v in state.items():
        key = _storage_key(v)
        if key in seen:
            out[k] = seen[key]
        else:
            seen[key] = k
    return out


def raw(t: torch.Tensor) -> memoryview:
    """A host tensor's bytes, as they are in memory (a non-contiguous one made contiguous first)."""
    return memoryview(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy())


Header = list[tuple[str, str, list[int]]]  # one chunk's (name, dtype name, shape), in the order sent


def socket_chunks(
    state: Mapping[str, torch.Tensor], budget: int = CHUNK_BYTES
) -> tuple[dict[str, str], Iterator[tuple[Header, list[memoryview]]], int]:
    """``(aliases, chunks, n)``: the ``n`` chunks of ``state`` to send (aliases left out, :func:`aliases`),
    each ``(header, the tensors' bytes)``, staged to the host only when the iterator reaches it (from a
    GPU through pinned memory, one chunk at a time)."""
    from oxbench.engine.model import to_host

    alias = aliases(state)
    sizes = [(k, v.numel() * v.element_size()) for k, v in state.items() if k not in alias]
    plan = plan_chunks(sizes, budget)

    def chunks():
        for names in plan:
            host = to_host({k: state[k] for k in names}, copy=False)
            header = [(k, str(v.dtype).removeprefix("torch."), list(v.shape)) for k, v in host.items()]
            yield header, [raw(v) for v in host.values()]

    return alias, chunks(), len(plan)


def send_chunks(conn, chunks: Iterator[tuple[Header, list[memoryview]]]) -> int:
    """Each chunk on ``conn``: its header as one message, then its tensors' bytes written straight to the
    socket underneath (no copy, no framing: the server reads each tensor's size into a tensor of its
    own). The bytes sent; an :class:`OSError` where the server stopped reading."""
    sock = socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)  # a dup: closing it keeps conn
    sent = 0
    try:
        for header, views in chunks:
            conn.send(header)
            for view in views:
                sock.sendall(view)
                sent += view.nbytes
    finally:
        sock.close()
    return sent


def device_uuid(state: Mapping[str, torch.Tensor]) -> str | None:
    """The UUID of the GPU ``state`` lives on (all of it), or None (host tensors, or several devices)."""
    devices = {v.device for v in state.values()}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        return None
    return str(torch.cuda.get_device_properties(next(iter(devices))).uuid)


def ipc_handles(state: Mapping[str, torch.Tensor]) -> tuple[list[tuple[str, str, tuple]], list[torch.Tensor]]:
    """``([(name, gpu_uuid, rebuild_cuda_tensor args)], refs)``: a CUDA IPC handle per tensor (aliases
    included: a handle is a view of shared storage, nothing is copied). ``refs`` must outlive the server's
    use of them (the args do not hold the storage)."""
    from torch.multiprocessing.reductions import reduce_tensor

    uuid = device_uuid(state)
    if uuid is None:
        raise ValueError("CUDA IPC needs every tensor on one GPU")
    refs = [v.detach().contiguous() for v in state.values()]
    return [(k, uuid, reduce_tensor(v)[1]) for k, v in zip(state, refs)], refs


def choose_path(
    requested: str, offered: Sequence[str], uuid: str | None, server_gpus: Sequence[str]
) -> tuple[str, str | None]:
    """``(path, why)``: the path for a sync of tensors on the GPU ``uuid`` (None: the host) to a server that
    offers ``offered`` and sees ``server_gpus``; ``why`` is set when it falls back to the file. ``requested``
    ``auto`` takes the best usable path; a named path that cannot be used is an error."""
    if requested not in ("auto", *PATHS):
        raise ValueError(f"vLLM weight sync path {requested!r}: choose one of auto, {', '.join(PATHS)}")
    usable = {
        "cuda-ipc": "cuda-ipc" in offered and uuid is not None and uuid in server_gpus,
        "socket": "socket" in offered,
        "file": True,
    }
    if requested != "auto":
        if not usable[requested]:
            raise ValueError(
                f"vLLM weight sync path {requested!r} is not usable here (the server offers "
                f"{list(offered)}; the weights are on {uuid or 'the host'})"
            )
        return requested, None
    path = next(p for p in PATHS if usable[p])
    why = None
    if path == "file":
        why = (
            f"vLLM weight sync: through a file each step (weights.pt), the server offers no in-memory "
            f"path (it offers {list(offered)})"
        )
    return path, why


@dataclass
class Route:
    """The sync path of one server, chosen per sync (:func:`choose_path`): ``cuda-ipc`` is given up for good
    once it fails (:meth:`ipc_failed`; an error where it was asked for by name). Each fallback is said
    once, on one line."""

    requested: str
    offered: tuple[str, ...]
    server_gpus: tuple[str, ...] = ()
    said: set[str] = field(default_factory=set)

    def pick(self, uuid: str | None) -> str:
        path, why = choose_path(self.requested, self.offered, uuid, self.server_gpus)
        if why is not None:
            self.say(why)
        return path

    def ipc_failed(self, reason: str) -> None:
        if self.requested == "cuda-ipc":
            raise ValueError(f"vLLM weight sync path 'cuda-ipc' failed: {reason}")
        self.offered = tuple(p for p in self.offered if p != "cuda-ipc")
        self.say(f"vLLM weight sync: CUDA IPC failed ({reason[:200]}); through the socket from now on")

    def say(self, line: str) -> None:
        if line not in self.said:
            self.said.add(line)
            print(line, file=sys.stderr, flush=True)
