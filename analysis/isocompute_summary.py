"""The numbers results/README quotes for an IsoCompute grid, from its records only.

    python -m analysis.isocompute_summary results/isocompute [--boot 500]

Per subset: the validation reward avg@k at a few budgets for every (n, B_p) (mean over seeds), n*(C) on
the envelope of the per-n sigmoid fits, the fit of log2 n* with its seed-bootstrap intervals, the
variance shares of n and B_p at matched compute, and best@k / worst@k of the smallest vs the largest n
(two-way: the runs of each n as seeds crossed with the validation problems, issue 40; the Wilcoxon
test over problems beside).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from analysis import isocompute as iso
from analysis import isocompute_confound as ic
from analysis.isocompute_report import analyse, reward_metric


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--boot", type=int, default=500)
    args = ap.parse_args()
    pd.set_option("display.width", 200)
    curves = iso.load_curves(args.root)
    metric, k = reward_metric(curves)
    print(f"{curves['run_id'].nunique()} runs, {len(curves)} curve points, reward = {metric}")
    res = analyse(curves, n_boot=args.boot)
    for subset, r in res["subsets"].items():
        cur = curves[curves["subset"] == subset]
        print(f"\n== {subset}: {r['runs']} runs, matched compute C = {r['c_match']:,.0f}")
        budgets = [c for c in (256, 512, 1024, 2048, 4096, 8192, 16384) if c <= cur["rollouts"].max()]
        table = {c: iso.at_compute(cur, c).groupby(["n", "B_p"])[metric].mean() for c in budgets}
        print(f"{metric} (mean over seeds) at C:")
        print(pd.DataFrame(table).round(3).to_string())
        at = r["at"]
        print(
            f"at C = {r['c_match']:,.0f}: greedy strict accuracy and worst/best@{k} by n (mean over B_p and seeds):"
        )
        print(at.groupby("n")[["accuracy", f"best_at_{k}", f"worst_at_{k}"]].mean().round(3).to_string())
        if "fits" in r:
            print("per-n sigmoid fits (log C):")
            print(r["fits"].assign(C_mid=np.exp(r["fits"]["mid"])).round(3).to_string(index=False))
            env = iso.n_star(r["fits"], np.log([c for c in budgets]))
            print("n*(C) on the envelope:", dict(zip(env["C"].round().astype(int), env["n_star"])))
            f, ci = r["n_star"]["fit"], r["n_star"]["ci"]
            print(
                "log2 n* sigmoid:",
                {
                    key: (round(f[key], 3), [round(x, 3) for x in ci.get(key, [])])
                    for key in ("n_lo", "n_hi", "C_mid", "slope")
                },
                f"replicates {r['n_star']['replicates']}, failed {r['n_star']['failed']}",
            )
        print("variance shares at matched C:", {key: round(v, 3) for key, v in (r["share"] or {}).items()})
        print("  the design (issue 27.2):", ic.share_note(at, metric))
        pairs = ic.fixed_batch_pairs(at, metric)
        if len(pairs):  # same B = B_p * n: same M and learning rate
            print("fixed batch, larger B_p vs larger n (unit: matched (B, seed) pairs):", ic.sign_test(pairs))
        for p in r.get("paired") or []:
            print(
                f"{p['kind']}@{k} n={p['n_a']} {p['a']:.3f} vs n={p['n_b']} {p['b']:.3f}: delta {p['delta']:+.3f} "
                f"[{p['ci_low']:+.3f}, {p['ci_high']:+.3f}], p {p['two_way_p']:.2g} (unit: seeds × problems); "
                f"Wilcoxon p {p['p']:.2g} (unit: problems), wins {p['b_wins']}/{p['a_wins']} of {p['problems']}"
            )


if __name__ == "__main__":
    main()
