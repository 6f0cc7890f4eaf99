"""The GPU smoke's steps (scripts/gpu_smoke.sh runs them in order; each works alone too).

    python scripts/gpu_smoke.py model   [--dir smoke_model/qwen2-0.5b] [--shape tiny]
    python scripts/gpu_smoke.py grid    --out DIR [--grid recipes/gpu_smoke.yaml] [--model DIR] [--deadline S]
        [--cell-limit S]
    python scripts/gpu_smoke.py summary --out DIR

* ``model``: a Qwen2 shaped like Qwen2.5-0.5B (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate
  4864, vocabulary 151,936, tied embeddings) with seeded random weights in bf16 and the built-in character
  tokenizer (ids past its 99 tokens decode to nothing), saved with ``save_pretrained``.
* ``grid``: the recipe's cells one after another in one warm worker (the local executor's), each under a
  time limit (``--cell-limit``, default 120 s; SIGTERM at the limit: the cell records ``preempted``),
  none started past ``--deadline``. (CI's CPU dry run, niced beside the main tests, gives both more.)
  Cells with ``online.backend vllm`` are recorded as skipped, with the reason, where vllm is not
  importable. Cells run in the recipe's order: a cut-short smoke has the core methods first.
* ``summary``: per cell its status, tokens/s (trained, generated), rollouts/s, the weight-sync time, the
  peak GPU memory and the estimate of oxbench.engine.cost beside it, and TRL's GRPOTrainer against
  oxbench from ``benchmarks/throughput.py`` (``throughput.json``); ``summary.json`` and ``summary.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QWEN25_05B = {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
              "intermediate_size": 4864, "vocab_size": 151936}  # fmt: skip
# .ci/run's CPU dry run of the smoke (the GPU-versions job): the same architecture, about 20k parameters
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 64, "vocab_size": 128}  # fmt: skip
SHAPES = {"qwen2.5-0.5b": QWEN25_05B, "tiny": TINY}
CELL_LIMIT_S = 120  # one cell's most seconds


def build_model(directory: Path, seed: int = 0, shape: str = "qwen2.5-0.5b") -> Path:
    """Save the random-init Qwen2 of ``shape`` (:data:`SHAPES`) and the character tokenizer to ``directory``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from oxbench.models.tokenizer import build_char_tokenizer

    if (directory / "config.json").exists():
        print(f"model: {directory} exists")
        return directory
    tok = build_char_tokenizer()
    cfg = Qwen2Config(**SHAPES[shape], max_position_embeddings=2048, tie_word_embeddings=True, rope_theta=1e6,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)  # fmt: skip
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # initialising 0.5B parameters: seconds on a GPU
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: {directory}, {n:,} parameters (bf16), built on {device}")
    return directory


def vllm_missing() -> str | None:
    """Why the vLLM cells cannot run here (None: vllm is importable)."""
    if importlib.util.find_spec("vllm") is not None:
        return None
    return ("vllm is not importable on this machine: it is not among the wheels carried to it "
            "(hundreds of MB with its CUDA kernels, the device run carries 64 MiB)")  # fmt: skip


def cells(grid_path: Path, model: str | None) -> list:
    """The recipe's cells, with ``--model`` as every cell's model when given."""
    from oxbench.grid.spec import expand, load_grid

    grid = load_grid(grid_path)
    if model:
        grid.base.setdefault("model", {})["name"] = model
    return expand(grid, str(grid_path))


def run_grid(
    grid_path: Path, out: Path, model: str | None, deadline: float, cell_limit: float = CELL_LIMIT_S
) -> list[dict]:
    """Every cell in one warm worker, each under ``cell_limit`` seconds; skipped ones listed with why."""
    from oxbench.grid import executors

    todo, skipped, records = cells(grid_path, model), [], []
    reason, start = vllm_missing(), time.time()
    worker = executors.WarmWorker(workers=1)
    try:
        for cfg in todo:
            left = deadline - (time.time() - start)
            if cfg.online.backend == "vllm" and reason:
                skipped.append({"run_id": cfg.run_id(), "method": cfg.method, "reason": reason})
            elif left < 30:
                skipped.append({"run_id": cfg.run_id(), "method": cfg.method,
                                "reason": f"the smoke's deadline ({deadline:.0f} s) came first"})  # fmt: skip
            else:
                timer = threading.Timer(min(cell_limit, left), worker.interrupt)
                timer.start()
                try:
                    rec = worker.run(cfg, out)
                finally:
                    timer.cancel()
                records.append(rec)
                print(f"{time.time() - start:6.0f} s  {rec['status']:9s} {rec['run_id']}  {rec.get('error') or ''}",
                      flush=True)  # fmt: skip
    finally:
        worker.close()
    for s in skipped:
        print(f"skipped   {s['run_id']}: {s['reason']}", flush=True)
    (out / "skipped.json").write_text(json.dumps(skipped, indent=1))
    return records


def _rate(num, den) -> float | None:
    return round(num / den, 1) if num and den else None


def estimate_gib(rec: dict, shape) -> float | None:
    """oxbench.engine.cost's per-rank estimate for the cell's record (its peak padded to data.max_len)."""
    import losses
    from oxbench.config import RunConfig
    from oxbench.engine import cost as M
    from oxbench.engine.memory import gpu_bytes

    try:
        cfg, spec = RunConfig(**rec["config"]), losses.get(rec["method"])
    except Exception:  # a record of an older config or a missing loss: no estimate, not a failed summary
        return None
    online = spec.data == "online" or spec.generates_own_pairs
    hp = spec.resolve_hparams(cfg.loss)
    setup = M.setup_for_run(cfg, shape.vocab, online=online, pairs=spec.data == "pairs",
                            reference=online and spec.uses_reference(hp), world=rec.get("world_size") or 1,
                            gpu_bytes=gpu_bytes() or 80 * M.GIB)  # fmt: skip
    return round(M.estimate(shape, setup).total / M.GIB, 1)


def cell_row(d: Path, shape) -> dict:
    """One cell's line of the summary, from its ``run.json`` and ``metrics.jsonl``."""
    from oxbench.grid.record import arm_label

    rec = json.loads((d / "run.json").read_text())
    c, rows = rec.get("compute") or {}, []
    if (d / "metrics.jsonl").exists():
        rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines() if line.strip()]
    syncs = [r["sync_s"] for r in rows if "sync_s" in r]
    vllm_syncs = [r["vllm_sync_s"] for r in rows if "vllm_sync_s" in r]
    cfg = rec.get("config") or {}
    return {
        "run_id": rec["run_id"], "arm": arm_label(rec.get("arm"), rec["method"]), "status": rec["status"],
        "zero_stage": cfg.get("train", {}).get("zero_stage"), "backend": cfg.get("online", {}).get("backend"),
        "trained_tokens_per_s": _rate(c.get("trained_tokens"), c.get("train_seconds")),
        "generated_tokens_per_s": _rate(c.get("generated_tokens"), c.get("gen_seconds")),
        "rollouts_per_s": _rate(c.get("rollouts"), c.get("gen_seconds")),
        "sync_s_mean": round(statistics.mean(syncs), 4) if syncs else None,
        "vllm_sync_s_mean": round(statistics.mean(vllm_syncs), 4) if vllm_syncs else None,
        "peak_gpu_gib": (rec.get("timing") or {}).get("peak_gpu_gib"),
        "estimated_gib": estimate_gib(rec, shape) if rec["status"] == "finished" else None,
        "total_s": (rec.get("timing") or {}).get("total_s"), "error": rec.get("error"),
    }  # fmt: skip


COLUMNS = ("arm", "status", "zero_stage", "backend", "trained_tokens_per_s", "generated_tokens_per_s",
           "rollouts_per_s", "sync_s_mean", "peak_gpu_gib", "estimated_gib", "total_s")  # fmt: skip


def summarize(out: Path, model_dir: Path) -> dict:
    """``summary.json`` and ``summary.md`` in ``out``: every cell, the skipped ones, TRL side by side."""
    from transformers import AutoConfig

    from oxbench.engine.cost import ModelShape

    shape = ModelShape.from_config(AutoConfig.from_pretrained(model_dir))
    cells_ = [cell_row(p.parent, shape) for p in sorted((out / "gpu_smoke").glob("*/run.json"))]
    skipped = json.loads((out / "skipped.json").read_text()) if (out / "skipped.json").exists() else []
    bench = json.loads((out / "throughput.json").read_text()) if (out / "throughput.json").exists() else None
    summary = {"cells": cells_, "skipped": skipped, "throughput": bench, "machine": machine()}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    lines = [f"# GPU smoke: {summary['machine']}", "", "| " + " | ".join(COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]  # fmt: skip
    lines += ["| " + " | ".join("" if r[k] is None else str(r[k]) for k in COLUMNS) + " |" for r in cells_]
    lines += [f"\nfailed {r['run_id']}: {r['error']}" for r in cells_ if r["status"] != "finished"]
    lines += [f"\nskipped {s['run_id']} ({s['method']}): {s['reason']}" for s in skipped]
    if bench:
        for scale, r in bench["scales"].items():
            med = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in r["median_s"].items())
            lines.append(
                f"\nonline step (median, {scale}, {bench.get('device')}): {med}; TRL: {bench.get('trl')}"
            )
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return summary


def machine() -> str:
    import torch

    if not torch.cuda.is_available():
        return f"CPU, torch {torch.__version__}"
    return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=["model", "grid", "summary"])
    ap.add_argument(
        "--dir", type=Path, default=ROOT / "smoke_model" / "qwen2-0.5b", help="where the model is built"
    )
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b", help="the model step's shape")
    ap.add_argument("--grid", type=Path, default=ROOT / "recipes" / "gpu_smoke.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "gpu_smoke")
    ap.add_argument("--model", default=None, help="a local checkpoint for every cell instead of the recipe's")
    ap.add_argument("--deadline", type=float, default=300.0, help="no cell starts after this many seconds")
    ap.add_argument("--cell-limit", type=float, default=CELL_LIMIT_S, help="one cell's most seconds")
    args = ap.parse_args()
    if args.step == "model":
        build_model(args.dir, shape=args.shape)
    elif args.step == "grid":
        args.out.mkdir(parents=True, exist_ok=True)
        run_grid(args.grid, args.out, args.model, args.deadline, args.cell_limit)
    else:
        summarize(args.out, Path(args.model) if args.model else args.dir)


if __name__ == "__main__":
    main()
