"""bf16 on the CPU, everywhere (issue 36): what a GPU run meets first, met here.

``model.dtype: auto`` is bf16 on a GPU, so every GPU cell runs the model, its frozen copies, the rollout
decoders and the evaluator in bf16; CI's default CPU runs are fp32. One grid runs each method family to a
finished record in ``model.dtype: bf16`` on the CPU: SFT; DPO with a cached reference; KTO; TR-DPO with a
live reference; GRPO with the lean decoder and the shared-prompt forward, and with HF ``generate``; PPO
with its value head; the asynchronous source at S = 2; LoRA (offline and online); ZeRO-0 and ZeRO-3; and
each cell's evaluation (lean greedy and sampled pass@k). Before issue 36 every one of these cells failed
(the lean decoder's fp32 rotary tables met the bf16 KV cache; PPO's fp32 hidden state met its bf16 head).
The same grid runs in CI's second venv, under the GPU image's library versions.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

# one row per cell: (method, extra settings); every cell must reach a finished bf16 record
CELLS: list[tuple[str, dict]] = [
    ("sft", {}),
    ("dpo", {}),
    ("kto", {}),
    ("tr_dpo", {}),
    ("grpo", {"online.backend": "lean", "online.share_prompt": True}),
    ("grpo", {"online.backend": "hf", "online.share_prompt": False}),
    ("ppo", {}),
    ("sgrpo", {"online.source": "async", "online.staleness": 2}),
    ("dpo", {"model.lora.enabled": True}),
    ("sgrpo", {"model.lora.enabled": True}),
    ("sft", {"train.zero_stage": 3}),
    ("sgrpo", {"train.zero_stage": 3}),
]
STEPS = 2


def bf16_grid(tmp_path: Path, model_dir: str) -> Path:
    base = {
        "model": {"name": model_dir, "dtype": "bf16"},
        "task": {"name": "arith"},
        "data": {"n_train": 8, "max_new_tokens": 8, "self_play_k": 2, "chosen_source": "gold"},
        "train": {"batch_size": 4, "max_steps": STEPS, "lr": 1e-3, "warmup_ratio": 0.0},
        # random rewards: a random model never answers right, and all-zero rewards would train nothing
        "online": {"n": 2, "prompts_per_batch": 4, "rounds": STEPS, "max_new_tokens": 8, "reward_grader": "random"},
        "eval": {"n_test": 4, "n_ood": 2, "k": 2, "n_samples": 2, "n_sampled": 2, "max_new_tokens": 8},
        "track": [],
    }  # fmt: skip
    variants = [{"method": m, **extra} for m, extra in CELLS]
    path = tmp_path / "bf16.yaml"
    path.write_text(yaml.safe_dump({"name": "bf16", "base": base, "variants": variants}))
    return path


@pytest.mark.slow
def test_every_family_finishes_in_bf16(micro_model_dir, tmp_path):
    out = tmp_path / "out"
    grid = bf16_grid(tmp_path, micro_model_dir)
    cmd = [sys.executable, "-m", "oxbench_cli", "run", "--grid", str(grid), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    records = {p.parent: json.loads(p.read_text()) for p in out.rglob("run.json")}
    assert len(records) == len(CELLS), proc.stdout[-3000:] + proc.stderr[-3000:]
    for run_dir, rec in records.items():
        assert rec["status"] == "finished", (rec["run_id"], rec.get("error"))
        assert rec["config"]["model"]["dtype"] == "bf16"
        assert rec["optimizer_steps"] == STEPS
        m = rec["metrics"]
        for key in ("accuracy", "final_loss", "base_accuracy"):
            assert isinstance(m.get(key), int | float) and math.isfinite(m[key]), (rec["run_id"], key)
        steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert all(math.isfinite(s["loss"]) for s in steps), rec["run_id"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = sorted((r["method"], r["lora"], r["config"]["train"]["zero_stage"]) for r in records.values())
    asked = [(m, bool(x.get("model.lora.enabled")), x.get("train.zero_stage", 0)) for m, x in CELLS]
    assert got == sorted(asked)


def test_lean_decoder_in_bf16_keeps_its_dtypes_and_follows_fp32(micro_model_dir):
    """The lean decoder's bf16 logits are the fp32 model's within bf16 rounding, its KV cache stays bf16
    (no op promotes the queries to fp32), and greedy ids match HF ``generate`` in bf16."""
    from transformers import AutoModelForCausalLM

    from oxbench.text.decode import LeanDecoder

    models = {
        dt: AutoModelForCausalLM.from_pretrained(micro_model_dir, dtype=dt).eval()
        for dt in (torch.float32, torch.bfloat16)
    }
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 5, 9, 7]])
    mask = (torch.arange(5)[None] >= torch.tensor([[0], [2]])).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = {}
    for dt, model in models.items():
        dec = LeanDecoder(model)
        cache = [(dec.embed.new_zeros(2, dec.kv_heads, 8, dec.head_dim),) * 2 for _ in dec.layers]
        causal = torch.ones(5, 5, dtype=torch.bool).tril()
        attn = (causal & mask.bool()[:, None, None, :]) | torch.eye(5, dtype=torch.bool)
        with torch.no_grad():
            logits[dt] = dec.forward(ids, pos, cache, 0, attn)
        assert logits[dt].dtype == dt and cache[0][0].dtype == dt
    torch.testing.assert_close(logits[torch.bfloat16].float(), logits[torch.float32], atol=0.05, rtol=0.05)
    model = models[torch.bfloat16]
    new, logps = LeanDecoder(model).sample(
        ids, mask, n=1, max_new_tokens=6, temperature=0.0, eos_id=-1, generator=torch.Generator()
    )
    hf = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert torch.equal(new, hf[:, 5:]) and logps.dtype == torch.float32
