"""Pre-train every rung of the tiny ladder with the quickstart's budget and measure its base accuracy.

    python benchmarks/ladder.py [--recipe recipes/quickstart.yaml] [--scales tiny-xs tiny-s tiny-m tiny-l]

Uses (and fills) the same cache as the grids, so a rung pre-trained here is not pre-trained again.
Prints a markdown table: parameters, pre-training seconds (and the CPU threads it ran on),
final loss, base greedy accuracy (strict), flexible and out-of-distribution.
"""

from __future__ import annotations

import argparse

from oxbench.grid import expand, load_grid
from oxbench.models.loading import base_model_path, count_parameters, load_model
from oxbench.models.pretrain import read_info
from oxbench.runner import base_metrics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="recipes/quickstart.yaml")
    ap.add_argument("--scales", nargs="+", default=["tiny-xs", "tiny-s", "tiny-m", "tiny-l"])
    args = ap.parse_args()
    cell = expand(load_grid(args.recipe))[0]
    print("| rung | parameters | pre-training | threads | final loss | base accuracy | flexible | OOD |")
    print("|---|---|---|---|---|---|---|---|")
    for scale in args.scales:
        cfg = cell.model_copy(update={"model": cell.model.model_copy(update={"name": scale})})
        path, key = base_model_path(cfg, verbose=False)
        info = read_info(path)
        model, _ = load_model(path, cfg, init_seed=0)
        m = base_metrics(cfg, path, key)
        print(
            f"| {scale} | {count_parameters(model):,} | {info['seconds']:.0f} s | {info.get('torch_threads', '?')} | "
            f"{info['final_loss']:.3f} | "
            f"{100 * m['base_accuracy']:.1f}% | {100 * m['base_accuracy_flexible']:.1f}% | "
            f"{100 * m['base_ood_accuracy']:.1f}% |",
            flush=True,
        )


if __name__ == "__main__":
    main()
