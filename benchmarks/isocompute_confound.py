"""IsoCompute without the confound of n with the number of updates M (issue 27.2), from the records only.

    python benchmarks/isocompute_confound.py [results/isocompute results/isocompute_warmup10 ...]
        [--out results/isocompute_confound] [--metric accuracy_flexible] [--control DIR]

Per grid and subset, at the largest compute every run reached: the fixed-batch comparisons (the larger
B_p against the larger n at one B = B_p · n: same M, same learning rate; wins and an exact sign test
over matched (subset, B, seed) pairs), the variance shares of n, B_p and M over all runs and on the
balanced part of the design, the raw best arm, and best@k / worst@k at matched M beside matched C
(Wilcoxon over validation problems). With ``--control`` (a grid of the same arms with a random
reward), each arm's change in best@k and worst@k against its random-reward twin (Welch over seeds).
Writes ``README.md`` and ``summary.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import pandas as pd

from analysis import isocompute as iso
from analysis import isocompute_confound as ic
from analysis.isocompute_report import reward_metric

GRIDS = ("results/isocompute", "results/isocompute_warmup10", "results/isocompute_wide")


def _config(root: str) -> dict:
    """The config of one run under ``root`` (the settings a grid's runs share: graders, k)."""
    return json.loads(next(Path(root).rglob("run.json")).read_text())["config"]


def grid_summary(root: str, metric: str | None = None, control: str | None = None) -> dict:
    """Every number of one grid (module doc); ``metric``: the curves' column the reward comparisons use
    (default avg@k, the paper's validation reward); ``control``: its random-reward grid, if any."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curves = iso.load_curves(root)
    default, k = reward_metric(curves)
    metric = metric or default
    c = float(curves.groupby("run_id")["rollouts"].max().min())
    at = iso.at_compute(curves, c)
    pairs = ic.fixed_batch_pairs(at, metric)
    cfg = _config(root)
    graders = {
        "reward": cfg["online"].get("reward_grader", "strict"),
        "sampled": cfg["eval"].get("sampled_grader", "strict"),
    }
    out = {"grid": Path(root).name, "metric": metric, "k": k, "C": c, "runs": int(curves["run_id"].nunique()),
           "graders": graders,
           "pairs": pairs.to_dict("records"), "sign_test": ic.sign_test(pairs) if len(pairs) else None,
           "raw_best": ic.raw_best(at, metric).to_dict("records"),
           "fixed_batch_problems": ic.fixed_batch_problems(at, k=k), "versus_base": ic.versus_base(curves, c, k=k),
           "subsets": {}}  # fmt: skip
    if control is not None:
        theirs = _config(control)["eval"]
        if (theirs.get("sampled_grader", "strict"), theirs["k"]) != (graders["sampled"], k):
            raise SystemExit(f"{control}: its best@k / worst@k (k = {theirs['k']}, graded "
                             f"{theirs.get('sampled_grader', 'strict')}) are not {root}'s (k = {k}, graded "
                             f"{graders['sampled']}): not a control for it")  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out["versus_control"] = ic.versus_control(curves, iso.load_curves(control), c, k=k)
        out["control"] = Path(control).name
    for subset, sub in at.groupby("subset"):
        cur = curves[curves["subset"] == subset]
        ns = sorted(sub["n"].unique())
        matched_c = [iso.paired_by_problem(sub, ns[0], ns[-1], k=k, kind=kind) for kind in ("best", "worst")]
        matched_m = [r for a, b in zip(ns, ns[1:]) for r in ic.matched_updates(cur, a, b, 4, k=k)]
        matched_m += ic.matched_updates(cur, ns[0], ns[-1], 4, k=k)
        by_subset = ic.sign_test(pairs[pairs["subset"] == subset]) if len(pairs) else None
        seeded = sub["n"].nunique() > 1 and sub.groupby("n").size().min() > 1  # shares need replicates
        out["subsets"][subset] = {"shares": ic.variance_shares(sub, metric) if seeded else None,
                                  "sign_test": by_subset, "matched_C": matched_c, "matched_M": matched_m}  # fmt: skip
    return out


def _pairs_md(rows: list[dict], k: int, a_label: str = "n_a", b_label: str = "n_b") -> list[str]:
    lines = [f"| subset | kind | {a_label} → {b_label} | M | C | a | b | Δ (b − a) | Wilcoxon p | wins b/a |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        m = f"{r['M']:.0f}" if "M" in r else f"{r.get('B_M', '')}"
        c = f"{r['C_a']:,.0f} / {r['C_b']:,.0f}" if "C_a" in r else "same"
        lines.append(f"| {r.get('subset', '')} | {r['kind']}@{k} | {r['n_a']} → {r['n_b']} | {m} | {c} | {r['a']:.3f} | "
                     f"{r['b']:.3f} | {r['delta']:+.3f} | {r['p']:.2g} | {r['b_wins']}/{r['a_wins']} |")  # fmt: skip
    return lines


def _versus_base_md(rows: list[dict], k: int, c: float) -> list[str]:
    """Each arm at C against its own base point: does it sharpen (worst@k) or cover (best@k) at all."""
    if not rows:
        return []
    lines = [f"**Against the base** (each arm at C = {c:,.0f} against its runs' base point on the same "
             "validation problems; unit: validation problems, Wilcoxon):", "",
             "| subset | n | B_p | kind | seeds | base | arm | Δ | p | up/down |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| {r['subset']} | {r['n']} | {r['B_p']} | {r['kind']}@{k} | {r['seeds']} | {r['base']:.3f} | "
              f"{r['arm']:.3f} | {r['delta']:+.3f} | {r['p']:.2g} | {r['up']}/{r['down']} |" for r in rows]  # fmt: skip
    return lines + [""]


def _versus_control_md(s: dict) -> list[str]:
    """Each arm against its random-reward twin: the sharpening and coverage claims, controlled."""
    rows, k = s.get("versus_control"), s["k"]
    if not rows:
        return []
    lines = [f"**Against the random-reward control** (`{s['control']}`: each arm's change from its base point "
             f"to C = {s['C']:,.0f} against the same arm's with a coin-flip reward; unit: seeds, Welch; Holm over "
             f"the claim tests, worst@{k} on easy (sharpening) and best@{k} on hard (coverage)):", "",
             "| subset | n | B_p | kind | claim | seeds (control) | Δ arm | Δ control | difference | p | p (Holm) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| {r['subset']} | {r['n']} | {r['B_p']} | {r['kind']}@{k} | {'yes' if r['claim'] else ''} | "
              f"{r['seeds']} ({r['control_seeds']}) | {r['delta']:+.3f} | {r['control_delta']:+.3f} | "
              f"{r['difference']:+.3f} | {r['p']:.2g} | {format(r['holm'], '.2g') if r['claim'] else ''} |"
              for r in rows]  # fmt: skip
    return lines + [""]


def grid_markdown(s: dict) -> list[str]:
    """One grid's section of the README."""
    k, lines = (
        s["k"],
        [f"## {s['grid']} ({s['runs']} runs; matched compute C = {s['C']:,.0f}; reward {s['metric']})", ""],
    )
    g = s.get("graders", {"reward": "strict", "sampled": "strict"})
    lines += [f"Rollouts rewarded by the {g['reward']} grader; best@{k} / worst@{k} graded {g['sampled']}"
              + (" (**not the reward's grader: they measure the answer line, not the answer**)" if g["reward"] != g["sampled"]
                 else "") + ".", ""]  # fmt: skip
    if s["sign_test"]:
        t = s["sign_test"]
        lines += [f"**Fixed batch** (same B = B_p · n, so the same M and learning rate): the larger B_p beats the larger "
                  f"n in {t['B_p_wins']} of {t['B_p_wins'] + t['n_wins']} pairs (ties {t['ties']}), mean "
                  f"Δ {t['mean_delta']:+.3f}, exact sign test p = {t['p']:.2g} (unit: matched (subset, B, seed) pairs).",
                  "", "| subset | B | M | seed | B_p 16, n | reward | B_p 4, n | reward | winner |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {p['subset']} | {p['B']} | {p['M']:.0f} | {p['seed']} | {p['n_small']} | {p['reward_B_p']:.3f} | "
                  f"{p['n_large']} | {p['reward_n']:.3f} | {p['winner']} |" for p in s["pairs"]]  # fmt: skip
        lines += ["", f"best@{k} / worst@{k} at a fixed batch (same M, same C; n_a = the larger n, n_b = the larger "
                  "B_p's n; unit: validation problems):", ""] + _pairs_md(s["fixed_batch_problems"], k) + [""]  # fmt: skip
    best = "; ".join(f"{r['subset']}: n = {r['n']}, B_p = {r['B_p']} ({r[s['metric']]:.3f}; runner-up {r['runner_up']} "
                     f"{r['runner_up_' + s['metric']]:.3f})" for r in s["raw_best"])  # fmt: skip
    lines += [f"**Raw best arm at C = {s['C']:,.0f}** (mean over seeds, no fitted envelope): {best}.", ""]
    lines += _versus_base_md(s.get("versus_base", []), k, s["C"])
    lines += _versus_control_md(s)
    for subset, r in s["subsets"].items():
        lines += [f"### {subset}", ""]
        if r["shares"]:
            v, b = r["shares"], r["shares"]["balanced"]
            lines += [f"Variance shares of the reward at C (unit: runs): all runs n {v['all']['n']:.1%}, B_p "
                      f"{v['all']['B_p']:.1%}, M {v['all']['M']:.1%}; design {v['imbalance']}; balanced part (n ∈ "
                      f"{b['n_values']}): n {b['n']:.1%}, B_p {b['B_p']:.1%}, n × B_p {b['interaction']:.1%}, residual "
                      f"{b['residual']:.1%}.", ""]  # fmt: skip
        lines += [f"best@{k} / worst@{k}, matched C (M differs):", ""] + _pairs_md(r["matched_C"], k) + [""]
        lines += [f"best@{k} / worst@{k}, matched M (B_p = 4; the larger n spent more compute):", ""]
        lines += _pairs_md(r["matched_M"], k) + [""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="*", default=list(GRIDS))
    ap.add_argument("--out", type=Path, default=Path("results/isocompute_confound"))
    ap.add_argument("--metric", help="the reward column (default avg@k); e.g. accuracy_flexible")
    ap.add_argument("--control", help="the grid of the same arms with a random reward (one root only)")
    args = ap.parse_args()
    if args.control and len(args.roots) != 1:
        ap.error("--control compares one grid with its control: give one root")
    summaries = [grid_summary(r, args.metric, args.control) for r in args.roots]
    lines = ["# IsoCompute without the confound of n with M", "",
             "Written by `python benchmarks/isocompute_confound.py` from the committed records only. At a fixed "
             "budget C = B_p · n · M a larger n means fewer updates M, so a comparison of n at matched C is also one "
             "of M. The comparisons here hold M fixed (fixed batch B = B_p · n, or matched M across n).", ""]  # fmt: skip
    for s in summaries:
        lines += grid_markdown(s)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summaries, indent=1, default=str) + "\n")
    (args.out / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    pd.set_option("display.width", 200)
    main()
