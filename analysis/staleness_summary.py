"""The numbers results/README quotes for the staleness study, from its records only.

    python -m analysis.staleness_summary results/staleness [--control results/staleness_control]
        [--throughput results/staleness_throughput] [--boot 500] [--threshold 0.5]

Per correction: the S × η map (seeds collapsed / seeds, mean final reward), η_max(S) with its
censoring, the slope of log η_max against log S and the min(a/S, b) fit with seed-bootstrap
intervals, and the ESS alarm (hit rate, false alarms, median lead). The control grid (random reward,
S = 0) gives the on-policy collapse floor; the throughput grid gives rollouts per second by source.
"""

from __future__ import annotations

import argparse

import pandas as pd

from analysis import staleness as st
from analysis.staleness_report import analyse


def stability_map(runs: pd.DataFrame) -> pd.DataFrame:
    """Rows S, columns η: "collapsed/seeds reward" per cell."""
    cells = runs.groupby(["S", "lr"]).agg(
        collapsed=("collapsed", "sum"), seeds=("seed", "count"), reward=("reward", "mean")
    )
    text = cells.apply(lambda r: f"{int(r.collapsed)}/{int(r.seeds)} {r.reward:.2f}", axis=1)
    return text.unstack("lr")


def degenerate(root: str) -> pd.DataFrame:
    """The post-hoc rule both the study and the random-reward control are judged by (a random reward
    never falls, so the reward rule cannot fire on the control): a finished run whose final flexible
    accuracy (the arithmetic, whatever the format) is below half its base's."""
    runs = st.load_stability(root)
    return runs.assign(degenerate=runs["accuracy_flexible"] < 0.5 * runs["base_accuracy_flexible"])


def degenerate_by_lr(root: str) -> str:
    d = degenerate(root)
    on_policy = d[d["S"] == 0].groupby("lr")["degenerate"].agg(["sum", "count"])
    return ", ".join(f"{lr:.1e}: {int(r['sum'])}/{int(r['count'])}" for lr, r in on_policy.iterrows())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--control")
    ap.add_argument("--throughput")
    ap.add_argument("--boot", type=int, default=500)
    ap.add_argument("--threshold", type=float, default=0.5)
    args = ap.parse_args()
    pd.set_option("display.width", 200)
    runs, histories = st.load_stability(args.root), st.load_histories(args.root)
    print(f"{len(runs)} runs, {int(runs['collapsed'].sum())} collapsed")
    res = analyse(runs, histories, n_boot=args.boot, threshold=args.threshold)
    for corr, sub in runs.groupby("correction"):
        print(f"\n== {corr}: collapsed/seeds and mean final reward")
        print(stability_map(sub).to_string())
        table = res["eta_max"][res["eta_max"]["correction"] == corr]
        print("eta_max(S):", {int(r.S): (f"{r.eta_max:.2e}", r.censored) for r in table.itertuples()})
        if corr in res["fits"]:
            f, ci = res["fits"][corr]["fit"], res["fits"][corr]["ci"]
            print(
                "fit:",
                {k: (f"{f[k]:.3g}", [f"{x:.3g}" for x in ci[k]]) for k in ("slope", "a", "b", "S_knee")},
            )
    if "ess" in histories:
        stale = runs[runs["S"] >= 1]  # at S = 0 every weight is 1: the ESS cannot warn there
        print()
        for metric in ("ess", "ess_token"):
            for threshold in sorted({args.threshold, 0.2, 0.5}):
                alarm = st.ess_lead_time(stale, histories, threshold=threshold, metric=metric)
                print(
                    f"{metric} < {threshold} alarm over {len(stale)} runs with S >= 1: hit rate "
                    f"{alarm['hit_rate']:.2f}, false alarms {alarm['false_alarm_rate']:.2f}, "
                    f"median lead {alarm['median_lead']} steps"
                )
    if args.control:
        control = st.load_stability(args.control)
        print("\n== control (random reward, S = 0): collapsed/seeds and mean final reward")
        print(stability_map(control).to_string())
        print("final flexible accuracy < half the base's, at S = 0 by lr:")
        print("  random reward:", degenerate_by_lr(args.control))
        print("  true reward (every correction):", degenerate_by_lr(args.root))
    if args.throughput:
        tp_runs, tp_hist = st.load_stability(args.throughput), st.load_histories(args.throughput)
        rps = tp_hist.groupby("run_id")["rollouts_per_s"].median().rename("rollouts_per_s")
        out = tp_runs.set_index("run_id").join(rps)[["source", "S", "rollouts_per_s", "reward", "accuracy"]]
        print("\n== throughput (median rollouts/s over steps)")
        print(out.sort_values(["S", "source"]).round(3).to_string())


if __name__ == "__main__":
    main()
