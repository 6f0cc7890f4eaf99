"""Is a difficulty bin difficulty? (issue 27.3) Two independent avg@16 passes of the base over a recipe's
prompt pool, under the strict and the flexible grader: how many prompts each bin holds, how many stay
in their bin on the second pass, and how many would stay by chance alone.

The chance line is the null of "no prompt is harder than another": every prompt's k samples are
Binomial(k, p) with p the pool's mean rate, so a prompt lands in a bin with probability q (the binomial
mass inside the bin) on each pass independently, and q^2 * N prompts stay by luck. A bin is difficulty
when many more stay than that, and when the two passes' counts correlate.

    python benchmarks/difficulty_stability.py --recipe recipes/isocompute.yaml \
        --out results/difficulty_stability/isocompute.json
"""

from __future__ import annotations

import argparse
import json
from math import comb
from pathlib import Path

import yaml
from scipy import stats

from oxbench.config import SUBSETS, RunConfig
from oxbench.data import difficulty
from oxbench.data.selection import online_prompts, validation_pool
from oxbench.models.loading import base_model_path, load_model


def binomial_mass(k: int, p: float, name: str) -> float:
    return sum(comb(k, c) * p**c * (1 - p) ** (k - c) for c in range(k + 1) if difficulty.in_bin(c, k, name))


def compare(a: dict[str, int], b: dict[str, int], k: int) -> dict:
    ids = sorted(a)
    xa, xb = [a[i] for i in ids], [b[i] for i in ids]
    p = sum(xa + xb) / (2 * k * len(ids))
    bins = {}
    for name in SUBSETS:
        in_a = {i for i in ids if difficulty.in_bin(a[i], k, name)}
        in_b = {i for i in ids if difficulty.in_bin(b[i], k, name)}
        q = binomial_mass(k, p, name)
        bins[name] = {"first_pass": len(in_a), "second_pass": len(in_b), "stay": len(in_a & in_b),
                      "stay_share": round(len(in_a & in_b) / len(in_a), 3) if in_a else None,
                      "stay_by_chance": round(q * q * len(ids), 1), "in_bin_by_chance": round(q * len(ids), 1)}  # fmt: skip
    r = stats.pearsonr(xa, xb)
    return {"prompts": len(ids), "mean_rate": round(p, 4), "pearson_r": round(float(r.statistic), 3),
            "histograms": [difficulty.histogram(a, k), difficulty.histogram(b, k)], "bins": bins}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--graders", nargs="+", default=["strict", "flexible"])
    ap.add_argument("--seeds", nargs=2, type=int, default=[0, 1], help="the two passes' sampling seeds")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    with open(a.recipe, encoding="utf-8") as f:
        base = yaml.safe_load(f)["base"]
    cfg = RunConfig.model_validate({"method": "sgrpo", **base})
    path, base_key = base_model_path(cfg, verbose=False)
    model, tok = load_model(path, cfg, init_seed=0)
    model.eval()
    rows = online_prompts(cfg) + validation_pool(cfg)  # what a subset is selected from (runner._difficulty)
    out = {"recipe": a.recipe, "base": base_key, "k": cfg.data.difficulty_k, "seeds": a.seeds, "graders": {}}
    for grader in a.graders:
        passes = []
        for seed in a.seeds:
            c = cfg.model_copy(update={"data": cfg.data.model_copy(update={"difficulty_grader": grader}),
                                       "seed_overrides": cfg.seed_overrides.model_copy(update={"sampling": seed})})  # fmt: skip
            passes.append(difficulty.measure(model, tok, rows, c, base_key))
        out["graders"][grader] = compare(*passes, cfg.data.difficulty_k)
        g = out["graders"][grader]
        print(
            f"{grader}: {g['prompts']} prompts, mean rate {g['mean_rate']}, pass-to-pass r {g['pearson_r']}"
        )
        for name, b in g["bins"].items():
            print(f"  {name}: {b['first_pass']} in bin, {b['stay']} stay ({b['stay_share']}); by chance "
                  f"{b['in_bin_by_chance']} in bin, {b['stay_by_chance']} stay")  # fmt: skip
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
