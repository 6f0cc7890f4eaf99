"""The board (issue 41): every method at its own best setting, ranked on skill with honest intervals.

    python -m analysis.board results/board [--tune results/board_tune] [--metric accuracy_verified_flexible]

From the records only (the final cells under ``root``; the tuning cells under ``root``'s ``_tune`` twin):

1. **Tuning records carry no test metric**: every tuning record evaluated the validation split alone
   (``eval.split: validation``, no OOD or lm-eval rows); a record that did not is an error, not a row.
2. **The ranking**: each method's test accuracy and its change over the base, paired problem by problem
   against the base's recorded outcomes (``base_eval.jsonl``); unit: seeds × test problems, crossed
   (:mod:`analysis.twoway`); Holm over the methods. Identical arms are merged by
   :func:`analysis.units.duplicate_arms`' rule.
3. **A compact letter display**: every pair of methods tested two-way (Holm over all pairs, α = 0.05);
   methods that share a letter are not distinguished (Piepho's insert-and-absorb, :func:`letters`).
4. **Tuning**: each method's pick and its validation mean against its family default (the sweep's
   factor-1 point, the setting the method would have run at untuned), two-way over tuning seeds ×
   validation problems; the rank on validation at the default and at the pick.
5. **The leverage hierarchy** on these records: how far paradigm, family (within a paradigm) and
   method move the test metric (:func:`analysis.leverage.leverage`'s ranges), and tuning (each method's
   spread between its best and worst validation point, the mean over methods).
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import skill_gain as sg
from analysis.leverage import leverage
from analysis.stats import adjust_pvalues
from analysis.twoway import two_way_difference, two_way_mean
from analysis.units import drop_duplicate_arms, duplicate_arms, merged_arms, merged_label

ALPHA = 0.05


def tuning_leak(config: dict) -> str | None:
    """Why a tuning record could hold a test metric (None: it cannot). Restates
    ``oxbench.grid.tune.tuning_leak``: analysis reads records, never the harness."""
    ev = config.get("eval", {})
    if ev.get("split") != "validation":
        return f"eval.split is {ev.get('split')!r}, not 'validation'"
    if ev.get("n_ood", 0) or (ev.get("lm_eval") or {}).get("tasks"):
        return "it evaluated OOD or lm-eval test rows"
    return None


def check_tuning(tune_root: Path) -> int:
    """Every record under ``tune_root`` evaluated validation only; returns how many were checked."""
    paths = sorted(tune_root.rglob("run.json"))
    for path in paths:
        why = tuning_leak(json.loads(path.read_text(encoding="utf-8")).get("config") or {})
        if why:
            raise SystemExit(f"{path}: a tuning record that may hold test metrics: {why}")
    return len(paths)


def cell_seconds(root: Path) -> tuple[int, float]:
    """The records under ``root`` and the sum of their cells' ``timing.total_s`` (a cell's own time, its
    share of the grid's preparations not included)."""
    total, n = 0.0, 0
    for path in sorted(root.rglob("run.json")):
        timing = json.loads(path.read_text(encoding="utf-8")).get("timing") or {}
        n, total = n + 1, total + float(timing.get("total_s") or 0.0)
    return n, total


def print_cost(root: Path, tune_root: Path) -> None:
    """The board's cell time: tuning and final cells, against the issue's budget of 5 hours on 2 workers."""
    (nt, st), (nf, sf) = cell_seconds(tune_root), cell_seconds(root)
    print(
        f"cell time: {nt} tuning cells {st / 3600:.2f} h + {nf} final cells {sf / 3600:.2f} h = "
        f"{(st + sf) / 3600:.2f} h of cell time, {(st + sf) / 7200:.2f} h on 2 workers (budget: 5 h)"
    )


def letters(means: dict[str, float], different: set[frozenset]) -> dict[str, str]:
    """A compact letter display (Piepho 2004, insert-and-absorb): methods that share a letter are not
    distinguished by any test in ``different`` (the pairs that were); letters in order of the best
    mean of each group."""
    groups: list[set[str]] = [set(means)]
    for pair in different:
        a, b = tuple(pair)
        split = []
        for g in groups:
            split += [g - {a}, g - {b}] if a in g and b in g else [g]
        groups = [g for i, g in enumerate(split) if g and not _absorbed(g, i, split)]
    groups.sort(key=lambda g: -max(means[m] for m in g))
    out = {m: "" for m in means}
    for letter, g in zip(_alphabet(), groups):
        for m in g:
            out[m] += letter
    return out


def _absorbed(g: set, i: int, groups: list[set]) -> bool:
    return any((g < h) or (g == h and j < i) for j, h in enumerate(groups) if j != i)


def _alphabet():
    import itertools
    import string

    for n in itertools.count(1):
        for combo in itertools.product(string.ascii_lowercase, repeat=n):
            yield "".join(combo)


def pairwise(ys: dict[str, pd.DataFrame]) -> tuple[set[frozenset], int]:
    """The pairs of methods whose two-way difference is significant after Holm over all pairs."""
    names = list(ys)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    ps = []
    for a, b in pairs:
        common = ys[a].columns.intersection(ys[b].columns)
        ps.append(two_way_difference(ys[a][common].to_numpy(), ys[b][common].to_numpy())["p"])
    holm = adjust_pvalues(ps, "holm") if ps else []
    return {frozenset(p) for p, h in zip(pairs, holm) if h < ALPHA}, len(pairs)


def ranking(runs: pd.DataFrame, metric: str) -> tuple[list[dict], dict, str]:
    """Per method (identical arms merged): seeds' changes, the two-way interval of its accuracy and of
    its change over the reference (the recorded base), Holm over methods; the merged sets; the
    reference's name."""
    table = sg.outcomes(runs, metric, base_of=runs)
    dups = duplicate_arms(runs)
    once, merged = drop_duplicate_arms(runs, dups), merged_arms(dups)
    ref, ref_name = sg.reference(once, None, table, metric)
    rows = sg.arm_table(once, table, metric, ref)
    for r in rows:
        if r["y"] is not None:
            m = two_way_mean(r["y"].to_numpy())
            r.update(acc=100 * m["mean"], acc_lo=100 * m["ci_low"], acc_hi=100 * m["ci_high"])
    return rows, merged, ref_name


def print_ranking(rows: list[dict], merged: dict, ref_name: str) -> None:
    ys = {r["arm"]: r["y"] for r in rows if r["y"] is not None}
    different, n_pairs = pairwise(ys)
    cld = letters({a: float(y.to_numpy().mean()) for a, y in ys.items()}, different)
    print(
        f"\nthe ranking (test split; unit: seeds × problems, crossed; Δ against {ref_name}, Holm over "
        f"{len(rows)} methods; letters: methods sharing one are not distinguished, two-way, Holm over "
        f"{n_pairs} pairs, α = {ALPHA})"
    )
    print("| rank | method | letters | accuracy [95% CI] | Δ vs base [95% CI] | p (Holm) | per seed |")
    print("|---|---|---|---|---|---|---|")
    for i, r in enumerate(sorted(rows, key=lambda r: -r.get("acc", -1)), 1):
        acc = f"{r['acc']:.1f} [{r['acc_lo']:.1f}, {r['acc_hi']:.1f}]" if "acc" in r else "–"
        delta = f"{r['delta']:+.1f} [{r['lo']:+.1f}, {r['hi']:+.1f}]" if "delta" in r else "–"
        holm = f"{r['p_holm']:.2g}" if "delta" in r else "–"
        seeds = ", ".join(f"{d:+.1f}" for d in r["seeds"])
        print(
            f"| {i} | {merged_label(r['arm'], merged)} | {cld.get(r['arm'], '')} | {acc} | {delta} | "
            f"{holm} | {seeds} |"
        )


def _point_of(config: dict, keys: list[str]) -> tuple:
    """A tuning record's values of the swept ``keys`` (``train.lr``: the base rate of a scaling rule)."""
    train = config["train"]
    scaling = train.get("lr_scaling") or {}
    out = []
    for k in keys:
        if k == "train.lr":
            out.append(scaling["base_lr"] if scaling.get("rule", "none") != "none" else train["lr"])
        else:
            out.append(config.get("loss", {}).get(k.removeprefix("loss.")))
    return tuple(out)


def tuning_points(tune_root: Path, picks: dict, metric: str) -> pd.DataFrame:
    """One row per tuning run: its method, its point (the swept settings), its metric; with ``is_pick``
    and ``is_default`` from ``picks.json`` (the harness's record of each arm's pick and its factor-1
    point), the pick checked against the records' own means."""
    runs = sg.finished(tune_root)
    by_method = {a["method"]: a for a in picks.values() if a.get("status") == "picked"}
    rows = []
    for r in runs.itertuples():
        arm = by_method.get(r.method)
        if arm is None:
            continue
        keys = sorted(arm["point"])
        config = json.loads((Path(r.path) / "run.json").read_text())["config"]
        point = _point_of(config, keys)
        row = {"method": r.method, "run_id": r.run_id, "seed": r.seed, "point": point}
        row["value"] = getattr(r, metric)
        row["is_pick"] = bool(np.allclose(point, [arm["point"][k] for k in keys]))
        row["is_default"] = bool(np.allclose(point, [arm["default"][k] for k in keys]))
        rows.append(row)
    return pd.DataFrame(rows)


def print_tuning(tune_root: Path, picks: dict, metric: str) -> list[float]:
    """Per method: its pick and its family default on validation (two-way over tuning seeds × validation
    problems), their ranks on validation, and the spread of its sweep; returns the spreads (points)."""
    pts = tuning_points(tune_root, picks, metric)
    if pts.empty:
        print("\ntuning: no finished tuning record")
        return []
    runs = sg.finished(tune_root)
    table = sg.outcomes(runs[runs["run_id"].isin(pts["run_id"])], metric)
    means = pts.groupby(["method", "point"])["value"].mean()
    pick = pts[pts["is_pick"]].groupby("method")["value"].mean()
    default = pts[pts["is_default"]].groupby("method")["value"].mean()
    rank_pick, rank_default = (
        pick.rank(ascending=False, method="min"),
        default.rank(ascending=False, method="min"),
    )
    print(
        f"\ntuning (validation split; unit: tuning seeds × validation problems, crossed); {len(pts)} tuning runs, "
        "all of them on the validation split"
    )
    print(
        "| method | pick | at the pick | at the default | pick − default [95% CI] | rank: default → pick | sweep spread |"
    )
    print("|---|---|---|---|---|---|---|")
    spreads = []
    for method in pick.index:
        spread = 100 * (means[method].max() - means[method].min())
        spreads.append(spread)
        diff = _pick_vs_default(pts[pts["method"] == method], table, metric)
        moved = f"{rank_default.get(method, np.nan):.0f} → {rank_pick[method]:.0f}"
        print(
            f"| {method} | {_point_text(picks, method)} | {100 * pick[method]:.1f} | "
            f"{100 * default.get(method, np.nan):.1f} | {diff} | {moved} | {spread:.1f} |"
        )
    return spreads


def _point_text(picks: dict, method: str) -> str:
    arm = next(a for a in picks.values() if a["method"] == method and a.get("status") == "picked")
    return ", ".join(f"{k}={v:g}" for k, v in sorted(arm["point"].items()))


def _pick_vs_default(pts: pd.DataFrame, table: pd.DataFrame, metric: str) -> str:
    from analysis.crossed import outcome_matrix

    at = {flag: pts[pts[flag]] for flag in ("is_pick", "is_default")}
    if at["is_default"].empty or at["is_pick"]["run_id"].isin(at["is_default"]["run_id"]).all():
        return "– (the pick is the default)" if not at["is_default"].empty else "– (no factor-1 point)"
    ya, yb = (outcome_matrix(at[f], table, metric) for f in ("is_pick", "is_default"))
    if ya is None or yb is None:
        return "–"
    common = ya.columns.intersection(yb.columns)
    d = two_way_difference(ya[common].to_numpy(), yb[common].to_numpy())
    return f"{100 * d['delta']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}]"


def print_leverage(runs: pd.DataFrame, metric: str, spreads: list[float]) -> None:
    """Paradigm, family and method ranges on the test split (:func:`analysis.leverage.leverage`), and
    tuning's: the mean spread of a method's sweep on validation."""
    lev = leverage(runs, metric)
    print("\nthe leverage hierarchy (points; test split, except tuning: validation)")
    print("| factor | range (points) | levels |\n|---|---|---|")
    for r in lev.itertuples():
        print(f"| {r.factor} | {r.range_points:.1f} | {r.n_levels} |")
    if spreads:
        print(
            f"| tuning (a method's best − worst sweep point, mean over {len(spreads)} methods) | {np.mean(spreads):.1f} | – |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--tune", type=Path, help="the tuning records (default: ROOT's _tune twin)")
    ap.add_argument("--metric", default="accuracy_verified_flexible")
    args = ap.parse_args()
    tune_root = args.tune or args.root.with_name(args.root.name + "_tune")
    checked = check_tuning(tune_root)
    runs = sg.finished(args.root)
    print(
        f"{args.root.name}: {args.metric}; {len(runs)} finished runs; {checked} tuning records, every one on the validation split"
    )
    rows, merged, ref_name = ranking(runs, args.metric)
    sg.print_identical(runs, duplicate_arms(runs))
    print_ranking(rows, merged, ref_name)
    picks_file = tune_root / "picks.json"
    picks = json.loads(picks_file.read_text()) if picks_file.is_file() else {}
    spreads = print_tuning(tune_root, picks, args.metric) if picks else []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print_leverage(runs.assign(method=runs["method"]), args.metric, spreads)
    print_cost(args.root, tune_root)


if __name__ == "__main__":
    main()


def tuning_section(root: Path) -> dict | None:
    """The report's tuning section for a grid with a tune (``root``'s ``_tune`` twin holds picks.json):
    each arm's pick and its sweep on validation (mean of the metric per point), and the sweep curves."""
    from analysis import figures as figs

    tune_root = root.with_name(root.name + "_tune")
    picks_file = tune_root / "picks.json"
    if not picks_file.is_file():
        return None
    picks = json.loads(picks_file.read_text(encoding="utf-8"))
    rows = []
    fig, ax = figs.figure()
    for arm in picks.values():
        means = arm.get("means") or []
        lrs = [m["point"].get("train.lr") for m in means]
        if means and None not in lrs:
            order = np.argsort(lrs)
            ax.plot(np.array(lrs)[order], [100 * means[i]["mean"] for i in order], "o-", lw=0.8, ms=3)
        sweep = " · ".join(
            f"{_point(m['point'])}: {100 * m['mean']:.1f}"
            + (" (pick)" if m["point"] == arm.get("point") else "")
            for m in means
        )
        rows.append(
            {
                "method": arm["method"],
                "status": arm["status"],
                "pick": _point(arm.get("point", {})),
                "sweep": sweep,
            }
        )
    ax.set(xscale="log", xlabel="learning rate", ylabel="validation mean (%)", title="each method's sweep")
    return {
        "rows": rows,
        "figure": figs.save(fig, "tuning_sweeps", root / "figures"),
        "checked": check_tuning(tune_root),
    }


def _point(point: dict) -> str:
    return ", ".join(
        f"{k.removeprefix('train.').removeprefix('loss.')}={v:g}" for k, v in sorted(point.items())
    )
