"""Resume at another layout (issue 38, item 3): how far a run that changes world size and ZeRO stage at
its checkpoints ends from the run that never stopped.

    python benchmarks/resume_layouts.py [--out benchmarks/results/resume_layouts.json]

Each case trains DPO for 4 steps on the micro model (tests/dist_worker.py, batch 2 per rank, one
micro-batch per rank at 2 ranks):

* ``same-2-z0``, ``same-2-z3``: 2 ranks, pre-empted after step 2, resumed on 2 ranks at the same stage;
* ``moved-fp32``, ``moved-bf16``: 2 ranks ZeRO-3, pre-empted after step 1; 1 rank ZeRO-0 (2 micro-batches
  a step: the global batch kept), pre-empted after step 3; 2 ranks ZeRO-3 to the end.

For each: the largest difference from the uninterrupted run (2 ranks, the first segment's stage) in the
weights, and in the fp32 masters and AdamW moments; whether every step trained on the same examples
(``data_order_sha``); and the optimiser's step.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import make_micro_model  # noqa: E402
from test_distributed import job, run_jobs  # noqa: E402

# name: the segments, each (ranks, ZeRO stage, the step it is pre-empted after, or None: to the end)
CASES = {
    "same-2-z0": [(2, 0, 2), (2, 0, None)],
    "same-2-z3": [(2, 3, 2), (2, 3, None)],
    "moved-fp32": [(2, 3, 1), (1, 0, 3), (2, 3, None)],
    "moved-bf16": [(2, 3, 1), (1, 0, 3), (2, 3, None)],
}


def run_case(model_dir: str, name: str, segments: list, tmp: Path) -> dict:
    d = tmp / name
    (d / "whole").mkdir(parents=True)
    dtype = {"DTYPE": "bf16"} if name.endswith("bf16") else {}
    ckpt = {"CKPT_DIR": str(d / "ckpt"), **dtype}
    (whole,) = run_jobs(model_dir, [job("dpo", segments[0][1], 2, 1, 4, where=d / "whole", env=dtype)], nproc=2)
    end = None
    for ranks, zero, stop in segments:
        env = {**ckpt, **({"STOP_AT": str(stop)} if stop else {})}
        rc = 0 if stop is None else (4 if ranks == 1 else 1)  # pre-empted: 4 from a lone rank, 1 from torchrun
        (end,) = run_jobs(model_dir, [job("dpo", zero, 2, 1, 4, where=d, env=env)], nproc=ranks, expect_rc=rc)
    return {
        "segments": [{"ranks": r, "zero_stage": z, "preempted_after": s} for r, z, s in segments],
        "weights_max_abs_diff": _max_diff(whole["params"], end["params"]),
        "optimizer_max_abs_diff": _max_diff(whole["optim"], end["optim"]),
        "same_examples_every_step": end["order"] == whole["order"],
        "adam_step": [whole["adam_step"], end["adam_step"]],
        "resumed_from": end["resumed_from"],
    }


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "resume_layouts.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model, tok = make_micro_model()
        model.save_pretrained(Path(tmp) / "micro")
        tok.save_pretrained(Path(tmp) / "micro")
        results = {name: run_case(str(Path(tmp) / "micro"), name, seg, Path(tmp)) for name, seg in CASES.items()}
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    for name, r in results.items():
        print(f"{name:11s} weights {r['weights_max_abs_diff']:.2e}  optimiser {r['optimizer_max_abs_diff']:.2e}  "
              f"same examples {r['same_examples_every_step']}  step {r['adam_step']}")  # fmt: skip


if __name__ == "__main__":
    main()
