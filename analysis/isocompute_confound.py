r"""IsoCompute without the confound (arXiv 2603.12151; issue 27.2): at a fixed budget C = B_p · n · M,
raising n lowers the number of updates M, so a comparison of n at matched C is also one of M.

From the learning curves (:func:`analysis.isocompute.load_curves`) only:

* :func:`fixed_batch_pairs` and :func:`sign_test`: the comparisons that hold M *and* the learning rate
  fixed: at one batch B = B_p · n, the arm with the larger B_p against the one with the larger n, seed
  for seed (unit: matched (subset, B, seed) pairs), with an exact two-sided sign test;
* :func:`variance_shares`: the one-way shares (η²) of the reward's variance explained by n, B_p and
  M = C / B over every run at matched C, and on the **balanced** part of the design (the n values
  run at every B_p), where n, B_p and their interaction are orthogonal; :func:`imbalance` states which
  (n, B_p) cells are missing, to print wherever a share appears;
* :func:`at_updates` and :func:`matched_updates`: best@k / worst@k of two n at the same number of
  updates M (their largest common curve point), beside the matched-C comparison, with the learning
  rate each side summed over those updates (:func:`cumulative_lr`);
* :func:`raw_best`: the best arm by its raw mean reward at matched C (no fitted envelope);
* :func:`curve_points`: each arm's avg@k and best@k along its learning curve at the compute points
  ``--curve-at`` names (mean over seeds), the table of a longer grid's curves;
* :func:`versus_base`: whether an arm sharpens (worst@k) or widens coverage (best@k) at all: its
  runs at matched C against the same runs' base point (rollouts 0) on the same validation problems.

Run as a module, it writes every number of one or more grids from their records only
(:func:`grid_summary`, :func:`grid_markdown`):

    python -m analysis.isocompute_confound [results/isocompute results/isocompute_warmup10 ...]
        [--out results/isocompute_confound] [--metric accuracy_flexible] [--control DIR]
        [--curve-at C [C ...]]

Per grid and subset, at the largest compute every run reached: the fixed-batch comparisons (the larger
B_p against the larger n at one B = B_p · n: same M, same learning rate; wins and an exact sign test
over matched (subset, B, seed) pairs), the variance shares of n, B_p and M over all runs and on the
balanced part of the design, the raw best arm, and best@k / worst@k at matched M beside matched C.
Comparisons over validation problems are two-way (issue 40: the runs as seeds crossed with the
problems, :func:`analysis.twoway.two_way_difference`; unit: seeds × problems), with the Wilcoxon test
over problems beside. With ``--control`` (a grid of the same arms with a random reward), each arm's
best@k and worst@k against its random-reward twin (two-way; Welch over the seeds' changes beside).
Writes ``README.md`` and ``summary.json`` under ``--out`` and prints the README.
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from analysis import isocompute as iso
from analysis.isocompute_report import reward_metric
from analysis.stats import adjust_pvalues
from analysis.twoway import two_way_difference

PAIR_COLUMNS = [
    "subset",
    "B",
    "M",
    "lr",
    "seed",
    "n_small",
    "B_p_large",
    "n_large",
    "B_p_small",
    "reward_B_p",
    "reward_n",
    "winner",
]


def with_updates(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` with ``B`` = B_p · n (rollouts per update) and ``M`` = rollouts / B (updates so far)."""
    b = points["B_p"] * points["n"]
    return points.assign(B=b, M=points["rollouts"] / b)


def fixed_batch_pairs(points: pd.DataFrame, metric: str) -> pd.DataFrame:
    """At matched compute (one point per run, e.g. :func:`analysis.isocompute.at_compute`): every pair of
    runs of one subset and seed with the same B and a different B_p (hence the same M and the same
    learning rate under a √B rule); ``winner`` is ``"B_p"`` when the larger B_p has the higher
    ``metric``, ``"n"`` when the larger n does, ``"tie"`` otherwise. Runs of one B with unequal
    learning rates raise: they would not be a fixed-batch comparison."""
    pts, rows = with_updates(points), []
    for (subset, b, seed), g in pts.groupby(["subset", "B", "seed"]):
        if g["lr"].nunique() > 1:
            raise ValueError(
                f"{subset}, B = {b}, seed {seed}: learning rates differ ({sorted(g['lr'].unique())})"
            )
        g = g.sort_values("B_p")
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                small_bp, large_bp = g.iloc[i], g.iloc[j]  # small_bp has the larger n
                if small_bp["B_p"] == large_bp["B_p"]:
                    continue
                a, c = float(large_bp[metric]), float(small_bp[metric])
                rows.append(
                    {
                        "subset": subset,
                        "B": int(b),
                        "M": float(large_bp["M"]),
                        "lr": float(large_bp["lr"]),
                        "seed": seed,
                        "n_small": int(large_bp["n"]),
                        "B_p_large": int(large_bp["B_p"]),
                        "n_large": int(small_bp["n"]),
                        "B_p_small": int(small_bp["B_p"]),
                        "reward_B_p": a,
                        "reward_n": c,
                        "winner": "B_p" if a > c else "n" if c > a else "tie",
                    }
                )
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def sign_test(pairs: pd.DataFrame) -> dict:
    """Wins of the larger B_p over the larger n (ties left out) and the exact two-sided sign test
    (binomial, p = 1/2). Unit of replication: matched (subset, B, seed) pairs."""
    wins, losses = int((pairs["winner"] == "B_p").sum()), int((pairs["winner"] == "n").sum())
    p = float(stats.binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else math.nan
    return {
        "B_p_wins": wins,
        "n_wins": losses,
        "ties": int((pairs["winner"] == "tie").sum()),
        "p": p,
        "mean_delta": float((pairs["reward_B_p"] - pairs["reward_n"]).mean()) if len(pairs) else math.nan,
    }


def _share(y: np.ndarray, groups: pd.Series) -> float:
    total = float(((y - y.mean()) ** 2).sum())
    means = pd.Series(y).groupby(groups.to_numpy()).transform("mean").to_numpy(float)
    return float(((means - y.mean()) ** 2).sum() / total) if total else math.nan


def imbalance(points: pd.DataFrame) -> str:
    """Which B_p levels each n was run at, and the cells missing from the full n × B_p cross."""
    levels = points.groupby("n")["B_p"].apply(lambda s: sorted(set(s)))
    every = sorted(set(points["B_p"]))
    missing = [f"n = {n} × B_p = {b}" for n, bs in levels.items() for b in every if b not in bs]
    return (
        "balanced (every n at every B_p)"
        if not missing
        else (
            f"unbalanced: B_p ∈ {every} exists only for n ∈ {[int(n) for n, bs in levels.items() if bs == every]}; "
            f"missing {', '.join(missing)}"
        )
    )


def variance_shares(points: pd.DataFrame, metric: str) -> dict:
    """One-way η² of ``metric`` by n, B_p and M over every run (``all``), and on the balanced part of the
    design (``balanced``: the n values run at every B_p) also the n × B_p interaction and the residual
    (between-seed) share; ``imbalance`` says what is missing. Unit: runs (one value per seed)."""
    pts = with_updates(points)
    y = pts[metric].to_numpy(float)
    out = {"all": {f: _share(y, pts[f]) for f in ("n", "B_p", "M")}, "imbalance": imbalance(pts)}
    every = set(pts["B_p"])
    ns = [n for n, g in pts.groupby("n") if set(g["B_p"]) == every]
    bal = pts[pts["n"].isin(ns)]
    yb = bal[metric].to_numpy(float)
    shares = {f: _share(yb, bal[f]) for f in ("n", "B_p", "M")}
    cells = _share(yb, bal["n"].astype(str) + "|" + bal["B_p"].astype(str))
    shares["interaction"] = cells - shares["n"] - shares["B_p"]
    shares["residual"] = 1.0 - cells
    out["balanced"] = {**shares, "n_values": [int(n) for n in ns], "runs": len(bal)}
    return out


def at_updates(curves: pd.DataFrame, m: float) -> pd.DataFrame:
    """Per run, its curve point with the most updates M <= ``m`` (matched updates across n)."""
    pts = with_updates(curves)
    pts = pts[pts["M"] <= m + 1e-9].sort_values("M")
    return pts.groupby("run_id", sort=False).tail(1).reset_index(drop=True)


def common_updates(curves: pd.DataFrame, n_a: int, n_b: int, b_p: int) -> float:
    """The largest M > 0 on the curves of every run of (n_a, B_p) and of (n_b, B_p); NaN if none."""
    pts = with_updates(
        curves[(curves["B_p"] == b_p) & curves["n"].isin([n_a, n_b]) & (curves["rollouts"] > 0)]
    )
    sets = [set(np.round(g["M"], 9)) for _, g in pts.groupby("run_id")]
    both = set.intersection(*sets) if sets and pts["n"].nunique() == 2 else set()
    return float(max(both)) if both else math.nan


def cumulative_lr(lr: float, m: float, total: float, train: dict) -> float:
    """The learning rate summed over a run's first ``m`` of ``total`` updates: ``lr`` times the
    schedule's multipliers, from ``train`` (a record's ``config.train``: a linear warm-up over
    ``warmup_steps``, else ``warmup_ratio`` of ``total``, reaching 1 one step after it; then 1 with
    ``schedule: constant``, else a cosine to ``min_lr_ratio``). The schedule is oxbench's
    (``oxbench.utils.warmup_cosine``), restated here: analysis reads records only."""
    steps = train.get("warmup_steps")
    warmup = int(round(total * train.get("warmup_ratio", 0.0))) if steps is None else int(steps)
    low = train.get("min_lr_ratio", 0.0)

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if train.get("schedule") == "constant":
            return 1.0
        frac = min(1.0, (step - warmup) / max(1, total - warmup))
        return low + (1 - low) * 0.5 * (1 + math.cos(math.pi * frac))

    return lr * sum(f(step) for step in range(int(round(m))))


def matched_updates(
    curves: pd.DataFrame, n_a: int, n_b: int, b_p: int, *, k: int, train: dict | None = None
) -> list[dict]:
    """best@k and worst@k of n_b against n_a (one B_p) at their largest common M
    (:func:`analysis.isocompute.paired_by_problem`: two-way, Wilcoxon beside), each row with its ``M``,
    the compute ``C_a``/``C_b`` each side spent to get there and, given the grid's ``train`` config, the
    learning rate each side summed over those M updates (``lr_sum_a``/``lr_sum_b``, mean over runs;
    :func:`cumulative_lr`): at one M a larger n has a larger step (√B rule) and is further through its
    warm-up, the shorter run."""
    m = common_updates(curves, n_a, n_b, b_p)
    if math.isnan(m):
        return []
    pts = at_updates(curves[(curves["B_p"] == b_p) & curves["n"].isin([n_a, n_b])], m)
    c = {n: float(pts.loc[pts["n"] == n, "rollouts"].mean()) for n in (n_a, n_b)}
    extra = {}
    if train is not None and {"lr", "rollouts_max"} <= set(pts.columns):
        for n, side in ((n_a, "a"), (n_b, "b")):
            rs = pts[pts["n"] == n]
            total = rs["rollouts_max"] / (rs["B_p"] * rs["n"])
            sums = [cumulative_lr(lr, m, t, train) for lr, t in zip(rs["lr"], total)]
            extra[f"lr_sum_{side}"] = float(np.mean(sums))
    return [
        {
            **iso.paired_by_problem(pts, n_a, n_b, k=k, kind=kind),
            "B_p": b_p,
            "M": m,
            "C_a": c[n_a],
            "C_b": c[n_b],
            **extra,
        }
        for kind in ("best", "worst")
    ]


def fixed_batch_problems(points: pd.DataFrame, *, k: int) -> list[dict]:
    """best@k and worst@k at one batch B (same M, same C): the larger B_p's runs against the larger n's,
    per (subset, B), two-way with Wilcoxon beside (:func:`analysis.isocompute.paired_by_problem`,
    with ``n_a`` the larger n and ``n_b`` the larger B_p's n)."""
    rows = []
    for (subset, b), g in with_updates(points).groupby(["subset", "B"]):
        if g["B_p"].nunique() < 2:
            continue
        lo, hi = g.loc[g["B_p"] == g["B_p"].max()], g.loc[g["B_p"] == g["B_p"].min()]
        n_b, n_a = int(lo["n"].iloc[0]), int(hi["n"].iloc[0])
        rows += [
            {"subset": subset, "B": int(b), **iso.paired_by_problem(g, n_a, n_b, k=k, kind=kind)}
            for kind in ("best", "worst")
        ]
    return rows


def raw_best(points: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per subset, the (n, B_p) arm with the highest mean ``metric`` over seeds at matched compute, and
    the runner-up (no fitted envelope)."""
    means = points.groupby(["subset", "n", "B_p"])[metric].mean().reset_index()
    rows = []
    for subset, g in means.groupby("subset"):
        g = g.sort_values(metric, ascending=False)
        best, second = g.iloc[0], g.iloc[1] if len(g) > 1 else g.iloc[0]
        rows.append(
            {
                "subset": subset,
                "n": int(best["n"]),
                "B_p": int(best["B_p"]),
                metric: float(best[metric]),
                "runner_up": f"n = {int(second['n'])}, B_p = {int(second['B_p'])}",
                "runner_up_" + metric: float(second[metric]),
            }
        )
    return pd.DataFrame(rows)


def share_note(points: pd.DataFrame, metric: str) -> str:
    """One sentence to print wherever variance shares of n and B_p appear: the design's imbalance, M's
    share and the shares on the balanced part (unit: runs)."""
    if points["n"].nunique() < 2 or points[metric].nunique() < 2:
        return "too few arms for variance shares"
    v = variance_shares(points, metric)
    bal = v["balanced"]
    text = f"{v['imbalance']}; M = C/B alone explains {v['all']['M']:.0%}"
    if len(bal["n_values"]) > 1 and points["B_p"].nunique() > 1 and v["imbalance"].startswith("unbalanced"):
        text += (
            f"; on the balanced part (n ∈ {bal['n_values']}, {bal['runs']} runs) n {bal['n']:.0%}, B_p "
            f"{bal['B_p']:.0%}, n × B_p {bal['interaction']:.0%}"
        )
    return text


def versus_base(curves: pd.DataFrame, c: float, *, k: int) -> list[dict]:
    """Per (subset, n, B_p) and kind (best, worst): the arm at compute ``c`` against its base point
    (rollouts 0, the same weights in every run, sampled with each run's seed) on the same validation
    problems: the mean difference; the two-way test with the runs as seeds crossed with the problems
    (``ci_low``, ``ci_high``, ``two_way_p``; unit: seeds × problems; the base points taken as another
    arm's seeds, which ignores their pairing with the arm's runs); beside it a Wilcoxon signed-rank
    test over problems of the per-problem means over seeds (``p``; unit: validation problems)."""
    rows = []
    end, start = iso.at_compute(curves, c), curves[curves["rollouts"] == 0]
    for (subset, n, b_p), g in end.groupby(["subset", "n", "B_p"]):
        base = start[start["run_id"].isin(g["run_id"])]
        for kind in ("best", "worst"):
            per = [_per_problem(pts, k, kind) for pts in (base, g)]
            diff = per[1].mean(0) - per[0].mean(0)
            nonzero = diff[diff != 0]
            p = float(stats.wilcoxon(nonzero).pvalue) if len(nonzero) else 1.0
            tw = two_way_difference(per[1], per[0])
            rows.append(
                {
                    "subset": subset,
                    "n": int(n),
                    "B_p": int(b_p),
                    "kind": kind,
                    "seeds": len(g),
                    "base": float(per[0].mean()),
                    "arm": float(per[1].mean()),
                    "delta": float(diff.mean()),
                    "ci_low": tw["ci_low"],
                    "ci_high": tw["ci_high"],
                    "two_way_p": tw["p"],
                    "p": p,
                    "up": int((diff > 0).sum()),
                    "down": int((diff < 0).sum()),
                }
            )
    return rows


def _per_problem(points: pd.DataFrame, k: int, kind: str) -> np.ndarray:
    """(runs, validation problems) best@k or worst@k of each run's point in ``points``."""
    return np.array(
        [iso.per_problem(r.correct_counts, r.samples_per_problem, k, kind) for r in points.itertuples()]
    )


# the claims the random-reward control decides: sharpening is worst@k up on easy problems, coverage is
# best@k up on hard ones (arXiv 2603.12151)
CLAIMS = {"easy": "worst", "hard": "best"}


def _run_deltas(curves: pd.DataFrame, c: float, k: int) -> pd.DataFrame:
    """Per run: its best@k and worst@k at compute ``c`` minus at its base point (rollouts 0), each the
    mean over the run's validation problems."""
    end, start = iso.at_compute(curves, c), curves[curves["rollouts"] == 0].set_index("run_id")
    rows = []
    for r in end.itertuples():
        b = start.loc[r.run_id]
        row = {"subset": r.subset, "n": int(r.n), "B_p": int(r.B_p), "seed": int(r.seed)}
        for kind in ("best", "worst"):
            at = iso.per_problem(r.correct_counts, r.samples_per_problem, k, kind)
            base = iso.per_problem(b.correct_counts, b.samples_per_problem, k, kind)
            row[kind] = float(at.mean() - base.mean())
        rows.append(row)
    return pd.DataFrame(rows)


def versus_control(curves: pd.DataFrame, control: pd.DataFrame, c: float, *, k: int) -> list[dict]:
    """Each arm's change in best@k and worst@k from its base point to compute ``c`` against the same arm
    (subset, n, B_p) with a random reward (``control``, same seeds, same base weights). The decision:
    the two-way test of the arm's points at ``c`` against the control's, seeds crossed with validation
    problems (``two_way_difference``, ``ci_low``, ``ci_high``, ``two_way_p``; unit: seeds × problems);
    beside it Welch's t over the seeds' changes from their base points (``p``; unit: seeds). ``holm``
    and ``two_way_holm`` adjust the claim tests (:data:`CLAIMS`: worst@k on easy, best@k on hard) over
    the arms both grids ran; the other kind is reported unadjusted, as a description."""
    real, ctrl = _run_deltas(curves, c, k), _run_deltas(control, c, k)
    end_real, end_ctrl = iso.at_compute(curves, c), iso.at_compute(control, c)
    rows = []
    for (subset, n, b_p), g in real.groupby(["subset", "n", "B_p"]):
        h = ctrl[(ctrl["subset"] == subset) & (ctrl["n"] == n) & (ctrl["B_p"] == b_p)]
        if h.empty:
            continue
        cell = [e[(e["subset"] == subset) & (e["n"] == n) & (e["B_p"] == b_p)] for e in (end_real, end_ctrl)]
        for kind in ("best", "worst"):
            a, b = g[kind].to_numpy(), h[kind].to_numpy()
            p = (
                float(stats.ttest_ind(a, b, equal_var=False).pvalue)
                if len(a) > 1 and len(b) > 1
                else math.nan
            )
            tw = two_way_difference(*(_per_problem(x, k, kind) for x in cell))
            rows.append(
                {
                    "subset": subset,
                    "n": int(n),
                    "B_p": int(b_p),
                    "kind": kind,
                    "seeds": len(a),
                    "control_seeds": len(b),
                    "delta": float(a.mean()),
                    "control_delta": float(b.mean()),
                    "difference": float(a.mean() - b.mean()),
                    "p": p,
                    "two_way_difference": tw["delta"],
                    "ci_low": tw["ci_low"],
                    "ci_high": tw["ci_high"],
                    "two_way_p": tw["p"],
                    "claim": CLAIMS.get(subset) == kind,
                }
            )
    claims = [r for r in rows if r["claim"]]
    for key, out in (("p", "holm"), ("two_way_p", "two_way_holm")):
        for r, adj in zip(claims, adjust_pvalues([r[key] for r in claims], "holm")):
            r[out] = float(adj)
    return rows


# ------------------------------------------------------------------ the command (python -m)

DESCRIPTION = (
    "IsoCompute without the confound of n with the number of updates M (issue 27.2), from the records only."
)
GRIDS = ("results/isocompute", "results/isocompute_warmup10", "results/isocompute_wide")


def _config(root: str) -> dict:
    """The config of one run under ``root`` (the settings a grid's runs share: graders, k)."""
    return json.loads(next(Path(root).rglob("run.json")).read_text())["config"]


def curve_points(curves: pd.DataFrame, at: list[float], k: int) -> list[dict]:
    """Per subset, arm (n, B_p) and compute point of ``at`` (0: the base): avg@k and best@k, the mean over
    the arm's seeds (each run's curve point at exactly that compute; a run without one is an error)."""
    rows = []
    for (subset, n, b_p), arm in curves.groupby(["subset", "n", "B_p"]):
        for c in at:
            point = arm[arm["rollouts"] == c]
            if point["run_id"].nunique() != arm["run_id"].nunique():
                raise SystemExit(f"--curve-at {c:g}: not a curve point of every run of n = {n}, B_p = {b_p}")
            rows.append(
                {
                    "subset": subset,
                    "n": int(n),
                    "B_p": int(b_p),
                    "C": c,
                    "seeds": int(point["seed"].nunique()),
                    "avg": float(point[f"avg_at_{k}"].mean()),
                    "best": float(point[f"best_at_{k}"].mean()),
                }
            )
    return rows


def _curve_md(rows: list[dict], k: int) -> list[str]:
    """The learning-curve table per subset: one row per compute point, avg@k and best@k per arm."""
    lines = []
    for subset in dict.fromkeys(r["subset"] for r in rows):
        sub = [r for r in rows if r["subset"] == subset]
        arms = list(dict.fromkeys((r["n"], r["B_p"]) for r in sub))
        one_bp = len({b for _, b in arms}) == 1
        label = {a: f"n = {a[0]}" + ("" if one_bp else f", B_p = {a[1]}") for a in arms}
        seeds = max(r["seeds"] for r in sub)
        lines += [f"Along the learning curves, {subset} (mean over {seeds} seeds):", ""]
        lines += ["| C | " + " | ".join(f"{label[a]}: avg@{k} | best@{k}" for a in arms) + " |"]
        lines += ["|---|" + "---|---|" * len(arms)]
        for c in dict.fromkeys(r["C"] for r in sub):
            at = {(r["n"], r["B_p"]): r for r in sub if r["C"] == c}
            cells = " | ".join(f"{at[a]['avg']:.3f} | {at[a]['best']:.3f}" for a in arms)
            lines += [f"| {c:,.0f}{' (base)' if c == 0 else ''} | {cells} |"]
        lines += [""]
    return lines


def _versus_control(root: str, control: str, curves: pd.DataFrame, c: float, k: int, sampled: str) -> dict:
    """Each arm against its random-reward twin in ``control`` (same k, same grader: else an error)."""
    theirs = _config(control)["eval"]
    if (theirs.get("sampled_grader", "strict"), theirs["k"]) != (sampled, k):
        raise SystemExit(
            f"{control}: its best@k / worst@k (k = {theirs['k']}, graded "
            f"{theirs.get('sampled_grader', 'strict')}) are not {root}'s (k = {k}, graded "
            f"{sampled}): not a control for it"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "versus_control": versus_control(curves, iso.load_curves(control), c, k=k),
            "control": Path(control).name,
        }


def grid_summary(
    root: str, metric: str | None = None, control: str | None = None, curve_at: list[float] | None = None
) -> dict:
    """Every number of one grid (module doc); ``metric``: the curves' column the reward comparisons use
    (default avg@k, the paper's validation reward); ``control``: its random-reward grid, if any;
    ``curve_at``: the compute points of its learning-curve table (none without)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curves = iso.load_curves(root)
    default, k = reward_metric(curves)
    metric = metric or default
    c = float(curves.groupby("run_id")["rollouts"].max().min())
    at = iso.at_compute(curves, c)
    pairs = fixed_batch_pairs(at, metric)
    cfg = _config(root)
    graders = {
        "reward": cfg["online"].get("reward_grader", "strict"),
        "sampled": cfg["eval"].get("sampled_grader", "strict"),
    }
    out = {
        "grid": Path(root).name,
        "metric": metric,
        "k": k,
        "C": c,
        "runs": int(curves["run_id"].nunique()),
        "graders": graders,
        "pairs": pairs.to_dict("records"),
        "sign_test": sign_test(pairs) if len(pairs) else None,
        "raw_best": raw_best(at, metric).to_dict("records"),
        "fixed_batch_problems": fixed_batch_problems(at, k=k),
        "versus_base": versus_base(curves, c, k=k),
        "subsets": {},
    }
    if curve_at:
        out["curve"] = curve_points(curves, curve_at, k)
    if control is not None:
        out |= _versus_control(root, control, curves, c, k, graders["sampled"])
    for subset, sub in at.groupby("subset"):
        cur = curves[curves["subset"] == subset]
        ns = sorted(sub["n"].unique())
        matched_c = [iso.paired_by_problem(sub, ns[0], ns[-1], k=k, kind=kind) for kind in ("best", "worst")]
        train = cfg["train"]
        matched_m = [r for a, b in zip(ns, ns[1:]) for r in matched_updates(cur, a, b, 4, k=k, train=train)]
        if len(ns) > 2:  # the extremes, unless they are the one adjacent pair already compared
            matched_m += matched_updates(cur, ns[0], ns[-1], 4, k=k, train=train)
        by_subset = sign_test(pairs[pairs["subset"] == subset]) if len(pairs) else None
        seeded = sub["n"].nunique() > 1 and sub.groupby("n").size().min() > 1  # shares need replicates
        out["subsets"][subset] = {
            "shares": variance_shares(sub, metric) if seeded else None,
            "sign_test": by_subset,
            "matched_C": matched_c,
            "matched_M": matched_m,
        }
    return out


def _pairs_md(rows: list[dict], k: int, a_label: str = "n_a", b_label: str = "n_b") -> list[str]:
    lr = any("lr_sum_b" in r for r in rows)
    lines = [
        f"| subset | kind | {a_label} → {b_label} | M | C | a | b | Δ (b − a) [95% CI] | p (seeds × problems) | "
        "Wilcoxon p (problems) | wins b/a |" + (" Σ lr over the M updates, b / a |" if lr else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if lr else ""),
    ]
    for r in rows:
        m = f"{r['M']:.0f}" if "M" in r else f"{r.get('B_M', '')}"
        c = f"{r['C_a']:,.0f} / {r['C_b']:,.0f}" if "C_a" in r else "same"
        sums = (
            f" {r['lr_sum_b']:.3g} / {r['lr_sum_a']:.3g} ({r['lr_sum_b'] / r['lr_sum_a']:.1f}×) |"
            if lr
            else ""
        )
        lines.append(
            f"| {r.get('subset', '')} | {r['kind']}@{k} | {r['n_a']} → {r['n_b']} | {m} | {c} | {r['a']:.3f} | "
            f"{r['b']:.3f} | {r['delta']:+.3f} {_ci(r)} | {_p(r['two_way_p'])} | {r['p']:.2g} | "
            f"{r['b_wins']}/{r['a_wins']} |{sums}"
        )
    return lines


def _ci(r: dict) -> str:
    """The two-way interval, or why there is none (one run on a side: no seed variance to estimate)."""
    if math.isnan(r["ci_low"]):
        return "(one run a side: no two-way test)"
    return f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"


def _p(p: float) -> str:
    return "–" if math.isnan(p) else f"{p:.2g}"


def _versus_base_md(rows: list[dict], k: int, c: float) -> list[str]:
    """Each arm at C against its own base point: does it sharpen (worst@k) or cover (best@k) at all."""
    if not rows:
        return []
    lines = [
        f"**Against the base** (each arm at C = {c:,.0f} against its runs' base point on the same "
        "validation problems; unit: seeds × problems, two-way; the Wilcoxon test over problems beside):",
        "",
        "| subset | n | B_p | kind | seeds | base | arm | Δ [95% CI] | p (seeds × problems) | Wilcoxon p | up/down |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['subset']} | {r['n']} | {r['B_p']} | {r['kind']}@{k} | {r['seeds']} | {r['base']:.3f} | "
        f"{r['arm']:.3f} | {r['delta']:+.3f} {_ci(r)} | {_p(r['two_way_p'])} | {r['p']:.2g} | {r['up']}/{r['down']} |"
        for r in rows
    ]
    return lines + [""]


def _versus_control_md(s: dict) -> list[str]:
    """Each arm against its random-reward twin: the sharpening and coverage claims, controlled."""
    rows, k = s.get("versus_control"), s["k"]
    if not rows:
        return []
    lines = [
        f"**Against the random-reward control** (`{s['control']}`: each arm at C = {s['C']:,.0f} against the "
        f"same arm with a coin-flip reward, from the same base weights; unit: seeds × problems, two-way; Holm "
        f"over the claim tests, worst@{k} on easy (sharpening) and best@{k} on hard (coverage); beside it "
        "Welch over the seeds' changes from their base points, unit: seeds):",
        "",
        "| subset | n | B_p | kind | claim | seeds (control) | Δ arm | Δ control | difference at C [95% CI] | "
        "p (seeds × problems) | p (Holm) | Welch p (seeds) | Welch p (Holm) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['subset']} | {r['n']} | {r['B_p']} | {r['kind']}@{k} | {'yes' if r['claim'] else ''} | "
        f"{r['seeds']} ({r['control_seeds']}) | {r['delta']:+.3f} | {r['control_delta']:+.3f} | "
        f"{r['two_way_difference']:+.3f} {_ci(r)} | {_p(r['two_way_p'])} | "
        f"{format(r['two_way_holm'], '.2g') if r['claim'] else ''} | {r['p']:.2g} | "
        f"{format(r['holm'], '.2g') if r['claim'] else ''} |"
        for r in rows
    ]
    return lines + [""]


def _fixed_batch_md(s: dict) -> list[str]:
    """The fixed-batch comparisons of one grid: the sign test, its pairs, best@k / worst@k per batch."""
    t, k = s["sign_test"], s["k"]
    if not t:
        return []
    lines = [
        f"**Fixed batch** (same B = B_p · n, so the same M and learning rate): the larger B_p beats the larger "
        f"n in {t['B_p_wins']} of {t['B_p_wins'] + t['n_wins']} pairs (ties {t['ties']}), mean "
        f"Δ {t['mean_delta']:+.3f}, exact sign test p = {t['p']:.2g} (unit: matched (subset, B, seed) pairs).",
        "",
        "| subset | B | M | seed | B_p 16, n | reward | B_p 4, n | reward | winner |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {p['subset']} | {p['B']} | {p['M']:.0f} | {p['seed']} | {p['n_small']} | {p['reward_B_p']:.3f} | "
        f"{p['n_large']} | {p['reward_n']:.3f} | {p['winner']} |"
        for p in s["pairs"]
    ]
    lines += [
        "",
        f"best@{k} / worst@{k} at a fixed batch (same M, same C; n_a = the larger n, n_b = the larger "
        "B_p's n; unit: seeds × problems, the Wilcoxon test over validation problems beside):",
        "",
    ]
    return lines + _pairs_md(s["fixed_batch_problems"], k) + [""]


def _subset_md(subset: str, r: dict, k: int) -> list[str]:
    """One subset's variance shares and its best@k / worst@k at matched C and at matched M."""
    lines = [f"### {subset}", ""]
    if r["shares"]:
        v, b = r["shares"], r["shares"]["balanced"]
        lines += [
            f"Variance shares of the reward at C (unit: runs): all runs n {v['all']['n']:.1%}, B_p "
            f"{v['all']['B_p']:.1%}, M {v['all']['M']:.1%}; design {v['imbalance']}; balanced part (n ∈ "
            f"{b['n_values']}): n {b['n']:.1%}, B_p {b['B_p']:.1%}, n × B_p {b['interaction']:.1%}, residual "
            f"{b['residual']:.1%}.",
            "",
        ]
    lines += [f"best@{k} / worst@{k}, matched C (M differs):", ""] + _pairs_md(r["matched_C"], k) + [""]
    lines += [
        f"best@{k} / worst@{k}, matched M (B_p = 4; the larger n spent more compute and, at one M, a larger "
        "summed learning rate):",
        "",
    ]
    return lines + _pairs_md(r["matched_M"], k) + [""]


def grid_markdown(s: dict) -> list[str]:
    """One grid's section of the README."""
    k, g = s["k"], s.get("graders", {"reward": "strict", "sampled": "strict"})
    lines = [
        f"## {s['grid']} ({s['runs']} runs; matched compute C = {s['C']:,.0f}; reward {s['metric']})",
        "",
    ]
    not_reward = " (**not the reward's grader: they measure the answer line, not the answer**)"
    lines += [
        f"Rollouts rewarded by the {g['reward']} grader; best@{k} / worst@{k} graded {g['sampled']}"
        + (not_reward if g["reward"] != g["sampled"] else "")
        + ".",
        "",
    ]
    lines += _fixed_batch_md(s)
    best = "; ".join(
        f"{r['subset']}: n = {r['n']}, B_p = {r['B_p']} ({r[s['metric']]:.3f}; runner-up {r['runner_up']} "
        f"{r['runner_up_' + s['metric']]:.3f})"
        for r in s["raw_best"]
    )
    lines += [f"**Raw best arm at C = {s['C']:,.0f}** (mean over seeds, no fitted envelope): {best}.", ""]
    lines += _curve_md(s["curve"], k) if s.get("curve") else []
    lines += _versus_base_md(s.get("versus_base", []), k, s["C"])
    lines += _versus_control_md(s)
    for subset, r in s["subsets"].items():
        lines += _subset_md(subset, r, k)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=DESCRIPTION)
    ap.add_argument("roots", nargs="*", default=list(GRIDS))
    ap.add_argument("--out", type=Path, default=Path("results/isocompute_confound"))
    ap.add_argument("--metric", help="the reward column (default avg@k); e.g. accuracy_flexible")
    ap.add_argument("--control", help="the grid of the same arms with a random reward (one root only)")
    ap.add_argument("--curve-at", type=float, nargs="+", help="the learning-curve table's compute points")
    args = ap.parse_args()
    if args.control and len(args.roots) != 1:
        ap.error("--control compares one grid with its control: give one root")
    summaries = [grid_summary(r, args.metric, args.control, args.curve_at) for r in args.roots]
    lines = [
        "# IsoCompute without the confound of n with M",
        "",
        "Written by `python -m analysis.isocompute_confound` from the committed records only. At a fixed "
        "budget C = B_p · n · M a larger n means fewer updates M, so a comparison of n at matched C is also one "
        "of M. The comparisons here hold M fixed (fixed batch B = B_p · n, or matched M across n).",
        "",
    ]
    for s in summaries:
        lines += grid_markdown(s)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summaries, indent=1, default=str) + "\n")
    (args.out / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    pd.set_option("display.width", 200)
    main()
