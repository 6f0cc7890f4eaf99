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
  updates M (their largest common curve point), beside the matched-C comparison;
* :func:`raw_best`: the best arm by its raw mean reward at matched C (no fitted envelope);
* :func:`versus_base`: whether an arm sharpens (worst@k) or widens coverage (best@k) at all: its
  runs at matched C against the same runs' base point (rollouts 0) on the same validation problems.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from analysis import isocompute as iso
from analysis.stats import adjust_pvalues

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


def matched_updates(curves: pd.DataFrame, n_a: int, n_b: int, b_p: int, *, k: int) -> list[dict]:
    """best@k and worst@k of n_b against n_a (one B_p) at their largest common M (Wilcoxon over
    validation problems, :func:`analysis.isocompute.paired_by_problem`), each row with its ``M`` and
    the compute ``C_a``/``C_b`` each side spent to get there."""
    m = common_updates(curves, n_a, n_b, b_p)
    if math.isnan(m):
        return []
    pts = at_updates(curves[(curves["B_p"] == b_p) & curves["n"].isin([n_a, n_b])], m)
    c = {n: float(pts.loc[pts["n"] == n, "rollouts"].mean()) for n in (n_a, n_b)}
    return [
        {
            **iso.paired_by_problem(pts, n_a, n_b, k=k, kind=kind),
            "B_p": b_p,
            "M": m,
            "C_a": c[n_a],
            "C_b": c[n_b],
        }
        for kind in ("best", "worst")
    ]


def fixed_batch_problems(points: pd.DataFrame, *, k: int) -> list[dict]:
    """best@k and worst@k at one batch B (same M, same C): the larger B_p's runs against the larger n's,
    per (subset, B), Wilcoxon over validation problems (:func:`analysis.isocompute.paired_by_problem`,
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
    (rollouts 0, the same weights in every run, sampled with each run's seed), each averaged per
    validation problem over the arm's seeds; the mean difference and a Wilcoxon signed-rank test over
    problems (unit: validation problems)."""
    rows = []
    end, start = iso.at_compute(curves, c), curves[curves["rollouts"] == 0]
    for (subset, n, b_p), g in end.groupby(["subset", "n", "B_p"]):
        base = start[start["run_id"].isin(g["run_id"])]
        for kind in ("best", "worst"):
            per = [
                np.mean(
                    [
                        iso.per_problem(r.correct_counts, r.samples_per_problem, k, kind)
                        for r in pts.itertuples()
                    ],
                    0,
                )
                for pts in (base, g)
            ]
            diff = per[1] - per[0]
            nonzero = diff[diff != 0]
            p = float(stats.wilcoxon(nonzero).pvalue) if len(nonzero) else 1.0
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
                    "p": p,
                    "up": int((diff > 0).sum()),
                    "down": int((diff < 0).sum()),
                }
            )
    return rows


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
    (subset, n, B_p) with a random reward (``control``, same seeds): Welch's t over seeds (unit: seeds).
    ``holm`` adjusts the claim tests (:data:`CLAIMS`: worst@k on easy, best@k on hard) over the arms
    both grids ran; the other kind is reported unadjusted, as a description."""
    real, ctrl = _run_deltas(curves, c, k), _run_deltas(control, c, k)
    rows = []
    for (subset, n, b_p), g in real.groupby(["subset", "n", "B_p"]):
        h = ctrl[(ctrl["subset"] == subset) & (ctrl["n"] == n) & (ctrl["B_p"] == b_p)]
        if h.empty:
            continue
        for kind in ("best", "worst"):
            a, b = g[kind].to_numpy(), h[kind].to_numpy()
            p = (
                float(stats.ttest_ind(a, b, equal_var=False).pvalue)
                if len(a) > 1 and len(b) > 1
                else math.nan
            )
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
                    "claim": CLAIMS.get(subset) == kind,
                }
            )
    claims = [r for r in rows if r["claim"]]
    for r, adj in zip(claims, adjust_pvalues([r["p"] for r in claims], "holm")):
        r["holm"] = float(adj)
    return rows
