"""The staleness section of the report, for results whose runs vary ``online.staleness``.

Figures (matplotlib, inlined as SVG, also saved as ``figures/<name>.svg`` and ``.pdf``):

* ``stability_<correction>``: the S × η map, each cell the share of seeds that collapsed, annotated
  with the mean final reward;
* ``eta_max``: η_max(S) per correction with the two-constraint fit min(a/S, b);
* ``ess_at_collapse``: the ESS of every collapsed run against steps before its collapse;
* ``throughput``: rollouts per second by source (sync, delayed, async) at each S.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis import staleness as st
from analysis.figures import figure, save


def analyse(
    runs: pd.DataFrame, histories: pd.DataFrame, *, n_boot: int = 200, threshold: float = 0.5
) -> dict:
    table = st.eta_max(runs)
    fits = {}
    for corr in sorted(runs["correction"].unique()):
        sub = table[table["correction"] == corr]
        if sub["S"].nunique() >= 2:
            fits[corr] = st.bootstrap_eta_max(runs, corr, n_boot=n_boot)
    alarm = st.ess_lead_time(runs, histories, threshold=threshold) if "ess" in histories else None
    return {"eta_max": table, "fits": fits, "alarm": alarm, "threshold": threshold}


def stability_figure(runs: pd.DataFrame, corr: str, out_dir) -> str:
    sub = runs[runs["correction"] == corr]
    ss, lrs = sorted(sub["S"].unique()), sorted(sub["lr"].unique())
    share = sub.pivot_table(index="S", columns="lr", values="collapsed", aggfunc="mean").reindex(
        index=ss, columns=lrs
    )
    reward = sub.pivot_table(index="S", columns="lr", values="reward", aggfunc="mean").reindex(
        index=ss, columns=lrs
    )
    fig, ax = figure(4.8, 3.2)
    im = ax.imshow(share.to_numpy(float), cmap="Reds", vmin=0, vmax=1, origin="lower", aspect="auto")
    for i in range(len(ss)):
        for j in range(len(lrs)):
            v = reward.iat[i, j]
            ax.text(j, i, "" if math.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7)
    ax.set(
        xticks=range(len(lrs)),
        xticklabels=[f"{x:g}" for x in lrs],
        yticks=range(len(ss)),
        yticklabels=ss,
        xlabel="learning rate η",
        ylabel="staleness S",
        title=f"{corr}: share collapsed (text: final reward)",
    )
    fig.colorbar(im, ax=ax, shrink=0.8)
    return save(fig, f"stability_{_slug(corr)}", out_dir)


def eta_max_figure(res: dict, out_dir) -> str:
    fig, ax = figure()
    table = res["eta_max"]
    for corr, g in table.groupby("correction"):
        x = g["S"].clip(lower=0.5)  # S = 0 drawn at 0.5 on the log axis
        line = ax.plot(x, g["eta_max"], "o", label=corr)[0]
        cens = g[g["censored"] != ""]
        ax.plot(cens["S"].clip(lower=0.5), cens["eta_max"], "x", color=line.get_color())
        if corr in res["fits"]:
            f = res["fits"][corr]["fit"]
            grid = np.geomspace(0.5, max(1.0, g["S"].max()), 50)
            ax.plot(grid, np.minimum(f["a"] / grid, f["b"]), color=line.get_color(), lw=1)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="staleness S (S = 0 at 0.5)",
        ylabel="η_max",
        title="η_max(S) with min(a/S, b); x: censored",
    )
    ax.legend(fontsize=7)
    return save(fig, "eta_max", out_dir)


def ess_figure(runs: pd.DataFrame, histories: pd.DataFrame, threshold: float, out_dir) -> str | None:
    collapsed = runs[runs["collapsed"]]
    if collapsed.empty or "ess" not in histories:
        return None
    fig, ax = figure()
    for r in collapsed.itertuples():
        h = histories[histories["run_id"] == r.run_id]
        ax.plot(h["step"] - r.collapse_step, h["ess"], lw=0.8, alpha=0.7)
    ax.axhline(threshold, color="grey", ls="--", lw=0.8)
    ax.axvline(0, color="black", lw=0.8)
    ax.set(
        xlabel="steps relative to collapse",
        ylabel="ESS ratio",
        title="ESS of collapsed runs, aligned at collapse",
    )
    return save(fig, "ess_at_collapse", out_dir)


def throughput_figure(histories: pd.DataFrame, runs: pd.DataFrame, out_dir) -> str | None:
    if "rollouts_per_s" not in histories or "source" not in runs:
        return None
    per_run = histories.groupby("run_id")["rollouts_per_s"].median().rename("rps").reset_index()
    data = runs.merge(per_run, on="run_id").groupby(["source", "S"])["rps"].median().unstack(0)
    if data.shape[1] < 2:
        return None
    fig, ax = figure(4.4, 3.0)
    data.plot(kind="bar", ax=ax)
    ax.set(
        xlabel="staleness S", ylabel="rollouts / s (median over steps and runs)", title="throughput by source"
    )
    return save(fig, "throughput", out_dir)


def figures(runs: pd.DataFrame, histories: pd.DataFrame, res: dict, out_dir) -> list[tuple[str, str]]:
    out = [
        (f"{c}: stability map", stability_figure(runs, c, out_dir))
        for c in sorted(runs["correction"].unique())
    ]
    out.append(("η_max(S)", eta_max_figure(res, out_dir)))
    for caption, svg in (
        ("ESS before collapse", ess_figure(runs, histories, res["threshold"], out_dir)),
        ("Throughput by source", throughput_figure(histories, runs, out_dir)),
    ):
        if svg:
            out.append((caption, svg))
    return out


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_")[:60]
