"""The IsoCompute section of the report, for results whose runs have learning curves.

Figures are drawn with matplotlib, inlined as SVG (the report stays one offline file), and each is
also saved as ``<results>/figures/<name>.svg`` and ``.pdf`` for a paper:

* ``frontier_<subset>``: every curve point coloured by n, the per-n sigmoid fits and the frontier;
* ``n_star_<subset>``: n*(C) from the envelope of the fits, its sigmoid fit and the 95% band over
  seed resamples;
* ``best_worst``: best@k and worst@k against n at the largest compute all runs reached, per subset;
* ``curves_<subset>``: the learning curve of every run.

The tables (:func:`isocompute_tables`) hold the numbers: fits, the n*(C) fit with its intervals,
variance shares, and paired tests over problems between the smallest and the largest n.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import isocompute as iso
from analysis.figures import figure, save

AVG_AT = re.compile(r"avg_at_(\d+)$")


def reward_metric(curves: pd.DataFrame) -> tuple[str, int]:
    """The validation reward the paper uses, avg@k (the smallest k the curves report), and k."""
    ks = sorted(int(m.group(1)) for c in curves.columns if (m := AVG_AT.match(str(c))))
    if not ks:
        raise ValueError("the curves report no avg@k (eval.k = 0?)")
    return f"avg_at_{ks[0]}", ks[0]


def analyse(curves: pd.DataFrame, *, n_boot: int = 200, seed: int = 0) -> dict:
    """Every number of the section, per subset: fits, n*(C) with intervals, shares, paired tests."""
    metric, k = reward_metric(curves)
    out = {"metric": metric, "k": k, "subsets": {}}
    for subset, cur in curves.groupby("subset"):
        c_match = float(cur.groupby("run_id")["rollouts"].max().min())
        at = iso.at_compute(cur, c_match)
        res = {"c_match": c_match, "runs": int(cur["run_id"].nunique()), "at": at}
        try:
            res["fits"] = iso.fits_by_n(cur, metric)
            res["n_star"] = iso.bootstrap_n_star(cur, metric, n_boot=n_boot, seed=seed)
        except (ValueError, RuntimeError) as exc:
            res["fit_error"] = str(exc).splitlines()[0]
        res["share"] = iso.variance_share(at, metric) if at["n"].nunique() > 1 else None
        ns = sorted(at["n"].unique())
        if len(ns) > 1 and "correct_counts" in at:
            res["paired"] = [
                iso.paired_by_problem(at, ns[0], ns[-1], k=k, kind=kind) for kind in ("best", "worst")
            ]
        out["subsets"][subset] = res
    return out


# --------------------------------------------------------------------------------------- figures


def _colors(ns):
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    return {n: cmap(i / max(1, len(ns) - 1)) for i, n in enumerate(sorted(ns))}


def frontier_figure(cur: pd.DataFrame, res: dict, metric: str, subset: str, out_dir) -> str:
    fig, ax = figure()
    col = _colors(cur["n"].unique())
    pts = cur[cur["rollouts"] > 0]
    for n, g in pts.groupby("n"):
        ax.scatter(g["rollouts"], g[metric], s=8, color=col[n], alpha=0.35, label=f"n={n}")
    grid = np.linspace(math.log(pts["rollouts"].min()), math.log(pts["rollouts"].max()), 100)
    for r in res.get("fits", pd.DataFrame()).itertuples():
        ax.plot(np.exp(grid), iso.sigmoid(grid, r.lo, r.hi, r.mid, r.slope), color=col[r.n], lw=1.2)
    front = iso.frontier(iso.record_breaking(pts, metric), metric, at=np.unique(pts["rollouts"]))
    ax.step(front["rollouts"], front[metric], where="post", color="black", lw=1.5, label="frontier")
    ax.set(
        xscale="log",
        xlabel="compute C (rollouts)",
        ylabel=f"validation {metric.replace('_at_', '@')}",
        title=f"{subset}: frontier, points and per-n sigmoid fits",
    )
    ax.legend(fontsize=7, ncol=2)
    return save(fig, f"frontier_{subset}", out_dir)


def n_star_figure(res: dict, subset: str, out_dir) -> str | None:
    if "n_star" not in res:
        return None
    fig, ax = figure()
    ns, grid = res["n_star"], np.asarray(res["n_star"]["log_c"])
    env = iso.n_star(res["fits"], grid)
    ax.step(env["C"], env["n_star"], where="mid", color="black", label="n* (envelope of fits)")
    f = ns["fit"]
    ax.plot(
        np.exp(grid),
        2 ** iso.sigmoid(grid, f["lo"], f["hi"], f["mid"], f["slope"]),
        color="#e15759",
        label="sigmoid fit",
    )
    if ns["draws"]:
        band = np.array([2 ** iso.sigmoid(grid, d["lo"], d["hi"], d["mid"], d["slope"]) for d in ns["draws"]])
        lo, hi = np.percentile(band, [2.5, 97.5], axis=0)
        ax.fill_between(np.exp(grid), lo, hi, color="#e15759", alpha=0.2, label="95% band (seed resamples)")
    ax.set(xscale="log", yscale="log", xlabel="compute C (rollouts)", ylabel="n*", title=f"{subset}: n*(C)")
    ax.set_yticks(sorted(set(res["fits"]["n"])))
    ax.yaxis.set_major_formatter(_int_formatter())
    ax.legend(fontsize=7)
    return save(fig, f"n_star_{subset}", out_dir)


def _int_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:g}")


def best_worst_figure(analysis: dict, out_dir) -> str:
    k = analysis["k"]
    fig, axes = figure(7.0, 3.0)
    fig.delaxes(axes)
    for i, kind in enumerate(("best", "worst")):
        ax = fig.add_subplot(1, 2, i + 1)
        for subset, res in analysis["subsets"].items():
            by_n = res["at"].groupby("n")[f"{kind}_at_{k}"].agg(["mean", "std", "count"]).reset_index()
            ax.errorbar(
                by_n["n"], by_n["mean"], yerr=by_n["std"].fillna(0), marker="o", capsize=3, label=subset
            )
        ax.set(
            xscale="log",
            xlabel="n (rollouts per problem)",
            ylabel=f"{kind}@{k}",
            title=f"{kind}@{k} at matched C",
        )
        ax.xaxis.set_major_formatter(_int_formatter())
        ax.legend(fontsize=7)
    return save(fig, "best_worst", out_dir)


def curves_figure(cur: pd.DataFrame, metric: str, subset: str, out_dir) -> str:
    fig, ax = figure()
    col = _colors(cur["n"].unique())
    styles = dict(zip(sorted(cur["B_p"].unique()), ("-", "--", ":", "-.")))
    for _, run in cur.groupby("run_id"):
        r = run.iloc[0]
        ax.plot(
            run["rollouts"].clip(lower=1),
            run[metric],
            color=col[r["n"]],
            ls=styles[r["B_p"]],
            lw=0.8,
            alpha=0.8,
        )
    for n, c in col.items():
        ax.plot([], [], color=c, label=f"n={n}")
    for b, ls in styles.items():
        ax.plot([], [], color="grey", ls=ls, label=f"B_p={b}")
    ax.set(
        xscale="log",
        xlabel="compute C (rollouts; base at 1)",
        ylabel=f"validation {metric.replace('_at_', '@')}",
        title=f"{subset}: learning curves, every run",
    )
    ax.legend(fontsize=6, ncol=2)
    return save(fig, f"curves_{subset}", out_dir)


def figures(curves: pd.DataFrame, analysis: dict, out_dir: Path | None) -> list[tuple[str, str]]:
    """(caption, inline SVG) for every figure, in the report's order."""
    metric, out = analysis["metric"], []
    for subset, res in analysis["subsets"].items():
        cur = curves[curves["subset"] == subset]
        out.append((f"{subset}: the compute frontier", frontier_figure(cur, res, metric, subset, out_dir)))
        svg = n_star_figure(res, subset, out_dir)
        if svg:
            out.append((f"{subset}: n*(C)", svg))
    out.append(("best@k and worst@k against n at matched compute", best_worst_figure(analysis, out_dir)))
    for subset in analysis["subsets"]:
        out.append(
            (
                f"{subset}: learning curves",
                curves_figure(curves[curves["subset"] == subset], metric, subset, out_dir),
            )
        )
    return out
