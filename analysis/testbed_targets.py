"""The testbed's targets (issue 11), computed from a study's records only.

    python -m analysis.testbed_targets results/testbed [--online sgrpo grpo dr_grpo gspo rloo]

Prints, per method: strict / flexible / verified accuracy (mean ± std over seeds) beside the base
model's and chance; the gain in strict points over the base with a one-sample t-test against the
base's value (the base is one deterministic greedy evaluation, so Welch's test against it is a
one-sample test); the change in flexible and verified-flexible points; the training reward of the
first and last four steps (each step's prompts are fresh draws from the 10,000-problem train pool,
so the reward is measured on prompts the policy has not trained on); and the spread between the best
and worst online loss.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from scipy import stats

from analysis import load_runs
from analysis.runs import read_metrics


def load(root: Path) -> list[dict]:
    """The finished runs (:func:`analysis.load_runs`: validated, one metric per key), each with its
    per-step history from ``metrics.jsonl`` (:func:`analysis.runs.read_metrics`)."""
    return [
        {**run, "_history": read_metrics(Path(run["path"]) / "metrics.jsonl")}
        for run in load_runs(root).to_dict("records")
    ]


def mean_sd(xs: list[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{100 * statistics.mean(xs):5.1f} ± {100 * sd:3.1f}"


def reward_rise(runs: list[dict]) -> str:
    """Mean training reward over the first and last four logged steps, averaged over seeds."""
    first = [statistics.mean(h["reward_mean"] for h in r["_history"][:4]) for r in runs]
    last = [statistics.mean(h["reward_mean"] for h in r["_history"][-4:]) for r in runs]
    return f"{statistics.mean(first):.3f} -> {statistics.mean(last):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("--online", nargs="+", default=["sgrpo", "grpo", "dr_grpo", "gspo", "rloo"])
    args = ap.parse_args()
    runs = load(args.root)
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(r["arm"], []).append(r)
    m0 = runs[0]
    base = {k: m0[f"base_{k}"] for k in ("accuracy", "accuracy_flexible", "accuracy_verified_flexible")}
    print(
        f"base: strict {100 * base['accuracy']:.1f}, flexible {100 * base['accuracy_flexible']:.1f}, "
        f"verified-flexible {100 * base['accuracy_verified_flexible']:.1f}, chance {100 * m0['chance']:.1f}"
    )
    print(
        "| method | seeds | strict | verified | flexible | Δ strict (pp) | p vs base | Δ flexible (pp) "
        "| Δ verified-flexible (pp) | train reward first→last 4 steps |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    means = {}
    for method, rs in sorted(by.items(), key=lambda kv: -statistics.mean(r["accuracy"] for r in kv[1])):
        strict = [x["accuracy"] for x in rs]
        means[method] = (statistics.mean(strict), statistics.stdev(strict) if len(strict) > 1 else 0.0)
        p = stats.ttest_1samp(strict, base["accuracy"]).pvalue if len(strict) > 1 else float("nan")
        d_flex = statistics.mean(x["accuracy_flexible"] for x in rs) - base["accuracy_flexible"]
        d_ver = (
            statistics.mean(x["accuracy_verified_flexible"] for x in rs) - base["accuracy_verified_flexible"]
        )
        rise = reward_rise(rs) if "reward_mean" in rs[0]["_history"][0] else "-"
        print(
            f"| {method} | {len(rs)} | {mean_sd(strict)} | {mean_sd([x['accuracy_verified'] for x in rs])} | "
            f"{mean_sd([x['accuracy_flexible'] for x in rs])} | "
            f"{100 * (means[method][0] - base['accuracy']):+.1f} | {p:.2g} | {100 * d_flex:+.1f} | "
            f"{100 * d_ver:+.1f} | {rise} |"
        )
    online = [m for m in args.online if m in means]
    if len(online) > 1:
        best, worst = max(online, key=lambda k: means[k][0]), min(online, key=lambda k: means[k][0])
        spread = 100 * (means[best][0] - means[worst][0])
        sds = ", ".join(f"{k} {100 * means[k][1]:.1f}" for k in online)
        print(f"online spread: {best} - {worst} = {spread:.1f} points; per-seed std: {sds}")


if __name__ == "__main__":
    main()
