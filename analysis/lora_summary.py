"""LoRA against full fine-tuning, from the records (issue 27.7; seeds × problems per issue 40): the
numbers of results/README.md's sections ``lora_factorial`` and ``lora_lr_sweep and lora_own_lr``.

    python -m analysis.lora_summary results

Three grids under ``results``: ``lora_factorial`` (full fine-tuning and LoRA, both at 1e-4, 3 seeds),
``lora_lr_sweep`` (LoRA at five learning rates, seed 0) and ``lora_own_lr`` (LoRA at 3e-4, 3 seeds).
Scores are strict accuracy (mean ± SD over seeds) / flexible accuracy (mean), in %. A comparison is
decided two-way, seeds × test problems crossed (:func:`analysis.twoway.two_way_difference`: Δ in
points, its 95% interval, p, and ``p_adj`` Bonferroni over the six (scale, method) pairs of its table);
the seed-only Welch p (:func:`analysis.stats.welch`) and its ``p_adj`` stand beside. Printed:

* ``lora_factorial``: full fine-tuning and LoRA, LoRA − full, each arm's flexible accuracy minus the
  base's, the final training loss (min–max over seeds) and the leverage table (η², descriptive);
* ``lora_lr_sweep``: strict / flexible at each rate, and the rate the rule written in the sweep's
  recipe picks: the highest strict accuracy whose flexible accuracy is no more than 5 points below
  the base's;
* ``lora_own_lr``: LoRA at 3e-4 against full fine-tuning at 1e-4 (``lora_factorial``'s), with LoRA at
  1e-4's strict accuracy beside.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

import analysis
from analysis.crossed import outcome_matrix
from analysis.stats import adjust_pvalues, welch
from analysis.twoway import two_way_difference

SCALES = ("tiny-s", "tiny-m")
METHODS = ("rft", "dpo", "simpo")
#: the sweep's rule: flexible accuracy at most this many points below the base's
RULE_POINTS = 5.0
Grid = tuple[pd.DataFrame, pd.DataFrame]  # (runs, per-problem outcomes)


def load(root: Path, name: str) -> Grid:
    runs = analysis.load_runs(root / name)
    runs = runs.assign(lr=runs["arm"].str.extract(r"lr=([0-9.e-]+)", expand=False).astype(float))
    return runs, analysis.load_problem_outcomes(root / name)


def cell(grid: Grid, scale: str, method: str, lora: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs, outcomes = grid
    keep = (runs["scale"] == scale) & (runs["method"] == method) & (runs["lora"].astype(bool) == lora)
    return runs[keep].sort_values("seed"), outcomes


def score(runs: pd.DataFrame) -> str:
    """'strict ± SD / flexible' (%), over the seeds of ``runs``."""
    strict = 100 * runs["accuracy"]
    return f"{strict.mean():.1f} ± {strict.std():.1f} / {100 * runs['accuracy_flexible'].mean():.1f}"


def compare(a: tuple[pd.DataFrame, pd.DataFrame], b: tuple[pd.DataFrame, pd.DataFrame]) -> dict:
    """Arm a − arm b in points: two-way on the test problems both have, Welch over seeds beside."""
    ya, yb = (outcome_matrix(runs, outcomes, "accuracy") for runs, outcomes in (a, b))
    common = ya.columns.intersection(yb.columns)
    d = two_way_difference(ya[common].to_numpy(), yb[common].to_numpy())
    seed_p = welch(a[0]["accuracy"], b[0]["accuracy"])["p"]
    return {**{k: 100 * d[k] for k in ("delta", "ci_low", "ci_high")}, "p": d["p"], "seed_p": seed_p}


def adjusted(rows: list[dict]) -> list[dict]:
    """``rows`` with ``p_adj`` and ``seed_p_adj``: Bonferroni over the rows."""
    p, seed_p = (adjust_pvalues([r[k] for r in rows], "bonferroni") for k in ("p", "seed_p"))
    return [{**r, "p_adj": a, "seed_p_adj": s} for r, a, s in zip(rows, p, seed_p)]


def table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def tested(r: dict) -> list[str]:
    """Δ [interval], p, p_adj, seed-only p, seed-only p_adj of a :func:`compare` row."""
    return [
        f"{r['delta']:+.1f} [{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]",
        *(f"{r[k]:.2g}" for k in ("p", "p_adj", "seed_p", "seed_p_adj")),
    ]


def flexible_loss(runs: pd.DataFrame) -> str:
    """Mean flexible accuracy minus the base's, points."""
    return f"{100 * (runs['accuracy_flexible'] - runs['base_accuracy_flexible']).mean():+.1f}"


def factorial(grid: Grid) -> None:
    pairs = [(s, m) for s in SCALES for m in METHODS]
    full = {p: cell(grid, *p, lora=False) for p in pairs}
    lora = {p: cell(grid, *p, lora=True) for p in pairs}
    rows = adjusted([compare(lora[p], full[p]) for p in pairs])
    print("\n## lora_factorial: full fine-tuning vs LoRA, both at lr 1e-4 (3 seeds)\n")
    base = grid[0].groupby("scale")[["base_accuracy", "base_accuracy_flexible"]].first()
    for s in SCALES:
        print(f"base {s}: strict {100 * base.loc[s].iloc[0]:.1f} / flexible {100 * base.loc[s].iloc[1]:.1f}")
    print(
        "\nstrict mean ± SD / flexible (%); LoRA − full two-way, Bonferroni over 6; seed-only Welch beside\n"
    )
    header = ["scale", "method", "full", "LoRA", "LoRA − full [95% CI]", "p", "p_adj", "seed p", "seed p_adj"]
    table(header, [[*p, score(full[p][0]), score(lora[p][0]), *tested(r)] for p, r in zip(pairs, rows)])
    print("\nflexible minus the base's (points) and final training loss (min–max over seeds)\n")
    loss = {p: (f"{r['final_loss'].min():.3f}–{r['final_loss'].max():.3f}") for p, (r, _) in {**full}.items()}
    lora_loss = {p: f"{r['final_loss'].min():.3f}–{r['final_loss'].max():.3f}" for p, (r, _) in lora.items()}
    table(
        ["scale", "method", "flexible − base: full", "LoRA", "final loss: full", "LoRA"],
        [[*p, flexible_loss(full[p][0]), flexible_loss(lora[p][0]), loss[p], lora_loss[p]] for p in pairs],
    )
    print("\nleverage (unit: runs; η² over one value per seed, descriptive)\n")
    print(analysis.leverage(grid[0], "accuracy").round(4).to_string())


def rate(lr: float | None) -> str:
    """A learning rate as the README writes it ("3e-4"); "none" for None."""
    return "none" if lr is None else f"{lr:.0e}".replace("e-0", "e-")


def sweep(grid: Grid) -> None:
    runs = grid[0]
    rates = sorted(runs["lr"].unique())
    print("\n## lora_lr_sweep: LoRA at each learning rate, seed 0\n")
    print(
        f"strict / flexible (%); the rule's pick: the highest strict with flexible >= base - {RULE_POINTS:g} "
        "(none: no rate keeps flexible there); post hoc: the rate with the highest strict\n"
    )
    rows = []
    for s, m in ((s, m) for s in SCALES for m in METHODS):
        at = cell(grid, s, m, lora=True)[0].set_index("lr")
        floor = 100 * at["base_accuracy_flexible"].iloc[0] - RULE_POINTS
        ok = at[100 * at["accuracy_flexible"] >= floor]
        pick = ok["accuracy"].idxmax() if len(ok) else None  # the lowest rate among ties
        shown = [
            f"{100 * at.loc[r, 'accuracy']:.1f} / {100 * at.loc[r, 'accuracy_flexible']:.1f}" for r in rates
        ]
        rows.append([s, m, *shown, rate(pick), rate(at["accuracy"].idxmax())])
    table(["scale", "method", *map(rate, rates), "rule's pick", "highest strict"], rows)


def own_lr(own: Grid, factorial_grid: Grid) -> None:
    pairs = [(s, m) for s in SCALES for m in METHODS]
    at = {p: cell(own, *p, lora=True) for p in pairs}
    full = {p: cell(factorial_grid, *p, lora=False) for p in pairs}
    low = {p: cell(factorial_grid, *p, lora=True)[0] for p in pairs}
    rows = adjusted([compare(at[p], full[p]) for p in pairs])
    print("\n## lora_own_lr: LoRA at 3e-4 vs full fine-tuning at 1e-4 (lora_factorial), 3 seeds\n")
    print(
        "strict mean ± SD / flexible (%); LoRA 3e-4 − full two-way, Bonferroni over 6; seed-only Welch beside\n"
    )
    header = ["scale", "method", "LoRA at 3e-4", "full FT at 1e-4", "LoRA at 1e-4 (strict)"]
    header += ["LoRA 3e-4 − full [95% CI]", "p", "p_adj", "seed p", "seed p_adj"]
    body = [
        [*p, score(at[p][0]), score(full[p][0]), f"{100 * low[p]['accuracy'].mean():.1f}", *tested(r)]
        for p, r in zip(pairs, rows)
    ]
    table(header, body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "results", type=Path, help="the directory holding lora_factorial, lora_lr_sweep, lora_own_lr"
    )
    args = ap.parse_args()
    grids = {name: load(args.results, name) for name in ("lora_factorial", "lora_lr_sweep", "lora_own_lr")}
    for name, (runs, _) in grids.items():
        print(f"{name}: {len(runs)} finished runs")
    factorial(grids["lora_factorial"])
    sweep(grids["lora_lr_sweep"])
    own_lr(grids["lora_own_lr"], grids["lora_factorial"])


if __name__ == "__main__":
    main()
