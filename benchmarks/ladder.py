"""Pre-train rungs of the tiny ladder with a recipe's settings and print each base model's table.

    python benchmarks/ladder.py [--recipe recipes/quickstart.yaml] [--scales tiny-xs tiny-m]
                                [--set task.max_operand=50 --set model.pretrain.updates=800 ...]

Uses (and fills) the same cache as the grids, so a rung pre-trained here is not pre-trained again.
Prints a markdown table per rung: parameters, pre-training seconds, final loss, and the base model's
greedy strict / flexible / verified / verified-flexible accuracy, the task's chance level, and the sampled pass@1 and
pass@k (``eval.k`` of the recipe, strict grader) that show the headroom RL can reach.
"""

from __future__ import annotations

import argparse

import yaml

from oxbench.eval.evaluate import test_rows
from oxbench.grid.prepare import base_metrics
from oxbench.grid.spec import _set, expand, load_grid
from oxbench.models.loading import base_model_path, count_parameters, load_model
from oxbench.models.pretrain import read_info
from oxbench.tasks import chance_accuracy


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="recipes/quickstart.yaml")
    ap.add_argument("--scales", nargs="+", default=["tiny-xs", "tiny-s", "tiny-m", "tiny-l"])
    ap.add_argument("--set", action="append", default=[], help="dotted.key=value (YAML value)")
    args = ap.parse_args()
    cell = expand(load_grid(args.recipe))[0]
    d = cell.model_dump()
    for item in args.set:
        key, _, value = item.partition("=")
        _set(d, key, yaml.safe_load(value))
    cell = type(cell)(**d)
    k = cell.eval.k
    print(
        f"| rung | parameters | pre-training | final loss | strict | flexible | verified | verified flexible | chance "
        f"| pass@1 | pass@{k} | OOD |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    chance = chance_accuracy(cell.task.model_dump(), test_rows(cell))
    for scale in args.scales:
        cfg = cell.model_copy(update={"model": cell.model.model_copy(update={"name": scale})})
        path, key = base_model_path(cfg, verbose=True)
        info = read_info(path)
        model, _ = load_model(path, cfg, init_seed=0)
        m = base_metrics(cfg, path, key)
        print(
            f"| {scale} | {count_parameters(model):,} | {info['seconds']:.0f} s | {info['final_loss']:.3f} | "
            f"{pct(m['base_accuracy'])} | {pct(m['base_accuracy_flexible'])} | "
            f"{pct(m.get('base_accuracy_verified'))} | {pct(m.get('base_accuracy_verified_flexible'))} | {pct(chance)} | {pct(m.get(f'base_avg_at_{k}'))} | "
            f"{pct(m.get(f'base_best_at_{k}'))} | {pct(m.get('base_ood_accuracy'))} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
