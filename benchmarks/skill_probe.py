"""Probe a base for a skill testbed (issue 27.4): on task variants, the base's greedy strict, flexible and
verified-flexible accuracy, and its flexible avg@16 / pass@16 on sampled problems.

A skill testbed needs a base whose format the grader already accepts and whose arithmetic has headroom:
flexible greedy well below 100% while flexible pass@16 is high (the right answer is within reach).

    python benchmarks/skill_probe.py --recipe recipes/testbed_defaults.yaml \
        --variants 2:40 3:40 2:80 4:40 --n-greedy 200 --n-sampled 100
"""

from __future__ import annotations

import argparse
import json

import yaml

from oxbench.config import RunConfig
from oxbench.eval.evaluate import eval_backend, greedy_metrics, greedy_outcomes, pass_at_k
from oxbench.models.loading import base_model_path, load_model
from oxbench.tasks import load_task_split
from oxbench.tasks.grading import is_correct
from oxbench.text.formatting import format_prompt
from oxbench.text.generation import generate


def probe(model, tok, cfg: RunConfig, task: dict, n_greedy: int, n_sampled: int, k: int) -> dict:
    cfg = cfg.model_copy(update={"task": cfg.task.model_copy(update=task)})
    rows = load_task_split(cfg.task.model_dump(), "test", n=n_greedy, seed=0)
    greedy = greedy_metrics(greedy_outcomes(model, tok, rows, cfg))  # the evaluator's own greedy scoring
    prompts = [format_prompt(tok, r["question"]) for r in rows[:n_sampled]]
    outs = generate(model, tok, prompts, max_new_tokens=cfg.eval.max_new_tokens, temperature=1.0,
                    num_return_sequences=k, batch_size=max(1, 256 // k), generator_seed=0,
                    backend=eval_backend(cfg, model))  # fmt: skip
    counts = [sum(is_correct(c, r["answer"], mode="flexible") for c in cs) for cs, r in zip(outs, rows)]
    return {
        "n_ops": cfg.task.n_ops,
        "max_operand": cfg.task.max_operand,
        "strict": greedy["accuracy"],
        "flexible": greedy["accuracy_flexible"],
        "verified_flexible": greedy["accuracy_verified_flexible"],
        f"flexible_avg_at_{k}": sum(counts) / (k * len(counts)),
        f"flexible_pass_at_{k}": sum(pass_at_k(k, c, k) for c in counts) / len(counts),
        "share_never_right": sum(c == 0 for c in counts) / len(counts),
        "share_always_right": sum(c == k for c in counts) / len(counts),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", required=True, help="a grid recipe whose base: block names the base")
    ap.add_argument("--variants", nargs="+", default=["2:40", "3:40", "4:40"], help="N_OPS:MAX_OPERAND")
    ap.add_argument("--n-greedy", type=int, default=200)
    ap.add_argument("--n-sampled", type=int, default=100)
    ap.add_argument("--k", type=int, default=16)
    a = ap.parse_args()
    with open(a.recipe, encoding="utf-8") as f:
        base = yaml.safe_load(f)["base"]
    cfg = RunConfig.model_validate({**base, "method": "sft"})
    path, _ = base_model_path(cfg, verbose=False)
    model, tok = load_model(path, cfg, init_seed=0)
    model.eval()
    for v in a.variants:
        n_ops, max_op = (int(x) for x in v.split(":"))
        task = {"n_ops": n_ops, "max_operand": max_op}
        print(json.dumps(probe(model, tok, cfg, task, a.n_greedy, a.n_sampled, a.k)), flush=True)


if __name__ == "__main__":
    main()
