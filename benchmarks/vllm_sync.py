"""Per-step weight sync to the vLLM rollout server: the old file path against the socket path, side by side.

    OXBENCH_VLLM_PYTHON=/work/vllm-venv/bin/python python benchmarks/vllm_sync.py \\
        [--scales tiny-m tiny-l wide] [--steps 8] [--out benchmarks/results/vllm_sync.json]

One vLLM server per scale (:class:`~oxbench.engine.vllm_client.VllmEngine`, as the ``vllm`` backend
starts it). Each step perturbs the weights and syncs them once by each path, in an order that alternates
from step to step: ``file`` (``torch.save`` to ``weights.pt``, the server ``torch.load``\\s it) and
``socket`` (``safetensors`` chunks of at most 256 MiB through the socket the two already share, in
memory: :mod:`oxbench.engine.weight_stream`). Timed: ``VllmEngine.sync``, the send, the server's
``reload_weights`` and its answer (the metrics' ``vllm_sync_s``); ``bytes``: what travelled (the file's
size, the socket's blobs: ``vllm_sync_bytes``); ``files``: ``torch.save`` calls per step. After the
last step the two paths' greedy samples are compared (the same weights must sample the same ids).

``tiny-m`` and ``tiny-l`` are the ladder's rungs (:mod:`oxbench.models.tiny`; vLLM's CPU attention needs a
head size of at least 32, so ``tiny-xs``/``tiny-s`` cannot run); ``wide`` is a ~100M-parameter Qwen2 of
the same shape family (hidden 1024, 8 layers), so the per-byte cost shows past vLLM's fixed per-reload
cost. Times depend on the machine and its load: quote the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PATHS = ("file", "socket")
WIDE = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4,
        "intermediate_size": 2816}  # fmt: skip


def build(scale: str):
    """``(model, tokenizer)``: a ladder rung or ``wide``, seeded random weights, float32."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from oxbench.models.tiny import build_tiny
    from oxbench.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    torch.manual_seed(0)
    ids = {"pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id}
    if scale != "wide":
        return build_tiny(scale, len(tok), **ids).eval(), tok
    cfg = Qwen2Config(
        vocab_size=len(tok), max_position_embeddings=512, tie_word_embeddings=True, **WIDE, **ids
    )
    return Qwen2ForCausalLM(cfg).eval(), tok


def greedy(engine, tok) -> list:
    prompts = [tok(f"{i} + {i + 1} =", add_special_tokens=False)["input_ids"] for i in range(4)]
    return engine.sample(prompts, n=1, temperature=0.0, max_tokens=16, seed=0)


def measure(scale: str, steps: int) -> dict:
    """Per path, each step's sync seconds, bytes and files written; whether both sample alike."""
    from oxbench.engine.vllm_client import VllmEngine
    from oxbench.engine.weight_stream import Route

    model, tok = build(scale)
    engine = VllmEngine(model, tok, threads=torch.get_num_threads())
    saves, real_save = [], torch.save
    torch.save = lambda *a, **k: saves.append(a[1]) or real_save(*a, **k)
    runs: dict[str, dict[str, list]] = {p: {"s": [], "bytes": [], "files": []} for p in PATHS}
    try:
        offered, samples = engine.route.offered, {}
        for step in range(steps):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.01 * torch.randn_like(p))
            state = model.state_dict()
            for path in PATHS if step % 2 == 0 else PATHS[::-1]:
                engine.route, before = Route(path, offered), len(saves)
                engine.sync(state)
                runs[path]["s"].append(engine.sync_seconds)
                runs[path]["bytes"].append(engine.sync_bytes)
                runs[path]["files"].append(len(saves) - before)
                engine.sync_seconds, engine.sync_bytes = 0.0, 0
                if step == steps - 1:
                    samples[path] = greedy(engine, tok)
    finally:
        torch.save = real_save
        engine.close()
    params = sum(v.numel() for v in model.state_dict().values())
    return {"scale": scale, "parameters": params, "steps": steps, "runs": runs,
            "same_samples": samples["file"] == samples["socket"]}  # fmt: skip


def summary(row: dict) -> list[str]:
    lines = []
    for path in PATHS:
        r = row["runs"][path]
        med = statistics.median(r["s"])
        lines.append(f"{row['scale']:7} {row['parameters'] / 1e6:7.1f}M  {path:6}  {med * 1000:9.1f} ms  "
                     f"{min(r['s']) * 1000:9.1f} ms  {statistics.median(r['bytes']) / 2**20:9.2f} MiB  "
                     f"{statistics.median(r['files']):5.0f}")  # fmt: skip
    file_s, sock_s = (statistics.median(row["runs"][p]["s"]) for p in PATHS)
    lines.append(
        f"{'':17}socket/file time {sock_s / file_s:.2f}x, same greedy samples: {row['same_samples']}"
    )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", nargs="+", default=["tiny-m", "tiny-l", "wide"])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "vllm_sync.json"))
    args = ap.parse_args()
    rows = [measure(s, args.steps) for s in args.scales]
    head = f"{'scale':7} {'params':>8}  {'path':6}  {'median':>12}  {'min':>12}  {'bytes':>13}  files/step"
    text = [head] + [line for row in rows for line in summary(row)]
    print("\n".join(text))
    python = os.environ.get("OXBENCH_VLLM_PYTHON", sys.executable)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())  # other work on the machine widens the spread
    out = {"command": " ".join([f"OXBENCH_VLLM_PYTHON={python}", "python", "benchmarks/vllm_sync.py", *sys.argv[1:]]),
           "date": time.strftime("%Y-%m-%d"), "load_average_after": load,
           "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}",
           "table": text, "rows": rows}  # fmt: skip
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
