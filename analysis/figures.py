"""The report's figures, drawn with matplotlib.

Each figure is returned as inline SVG (no XML prologue, so the report stays one offline file; text is
SVG text, which matplotlib escapes) and, given ``out_dir``, also saved as ``out_dir/<name>.svg`` and
``.pdf`` for a paper. :func:`figure` and :func:`save` are shared by every report section.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd


def figure(width: float = 5.2, height: float = 3.4, ncols: int = 1):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "oxbench", "font.size": 9})
    return plt.subplots(1, ncols, figsize=(width, height), squeeze=ncols == 1)


def save(
    fig, name: str, out_dir: Path | None, *, css: str | None = None, label: str = "", tight: bool = True
) -> str:
    """The figure as inline SVG (its root tagged ``class=css`` and ``aria-label=label`` when given;
    without namespace declarations and metadata, which HTML does not need); also ``out_dir/name.svg``
    and ``.pdf`` (whole). Log axes keep their major labels only (minor ones overlap)."""
    import matplotlib.pyplot as plt
    from markupsafe import escape
    from matplotlib.ticker import NullFormatter

    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_minor_formatter(NullFormatter())
    if tight:
        fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{name}.svg").write_text(svg, encoding="utf-8")
        fig.savefig(out_dir / f"{name}.pdf", metadata={"CreationDate": None, "ModDate": None})
    plt.close(fig)
    # inline in HTML5 the namespace declarations and the RDF metadata block are noise (and URLs)
    svg = re.sub(
        r'\s+xmlns(:\w+)?="[^"]*"',
        "",
        re.sub(r"<metadata>.*?</metadata>\s*", "", svg[svg.index("<svg") :], flags=re.S),
    )
    if css is not None:
        svg = svg.replace("<svg ", f'<svg class="{css}" role="img" aria-label="{escape(label)}" ', 1)
    return svg


def _dash(pattern: str):
    """A report style's SVG dash pattern ("6 3") as a matplotlib line style."""
    return "-" if not pattern else (0, tuple(float(x) / 1.5 for x in pattern.split()))


def _short(name: str, limit: int = 26) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _scale_ticks(ax, scales: list[str], params: dict[str, str]) -> None:
    ax.set_xticks(range(len(scales)), [f"{_short(s, 22)}\n{params[s]}" for s in scales])
    ax.set_xlim(-0.5, len(scales) - 0.5)


def scale_figure(
    summary: pd.DataFrame, scales, params: dict[str, str], style: dict, metric: str, out_dir
) -> str:
    """Mean metric (%) per method across scales; band = t-interval over seeds (a bar where isolated)."""
    fig, ax = figure(max(5.0, 1.3 * len(scales) + 2.6), 3.4)
    for m in sorted(summary["method"].unique()):
        rows = summary[summary["method"] == m].set_index("scale")
        xs = [i for i, s in enumerate(scales) if s in rows.index]
        r = rows.loc[[scales[i] for i in xs]]
        color, dash = style[m]
        ax.plot(xs, 100 * r["mean"], marker="o", ms=4, color=color, ls=_dash(dash), lw=1.8, label=_short(m))
        lo, hi = 100 * r["ci_low"].to_numpy(float), 100 * r["ci_high"].to_numpy(float)
        if len(xs) > 1:
            ax.fill_between(xs, lo, hi, color=color, alpha=0.15, lw=0)
        elif len(xs) == 1 and not math.isnan(lo[0]):
            ax.vlines(xs, lo, hi, color=color, lw=1.5)
    _scale_ticks(ax, list(scales), params)
    ax.set_ylabel(f"{metric} (%)")
    ax.grid(axis="y", color="#e5e5e5")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return save(fig, f"{metric}_vs_scale", out_dir, css="plot", label="metric vs scale")


def forest_figure(rows: list[dict], scales, baseline: str, out_dir) -> str:
    """Δ vs the baseline (pp) per scale and method: dark = Welch CI, light = Bonferroni CI, filled dot =
    significant after correction."""
    labels, ys, y = [], [], 0
    fig, ax = figure(6.0, 0.3 * (len(rows) + len(scales)) + 0.9)
    for s in scales:
        labels.append((y, _short(s, 30), True))
        y += 1
        for r in (r for r in rows if r["scale"] == s):
            if not math.isnan(r["adj_lo"]):
                ax.hlines(y, 100 * r["adj_lo"], 100 * r["adj_hi"], color="#9ecae1", lw=6)
            if not math.isnan(r["lo"]):
                ax.hlines(y, 100 * r["lo"], 100 * r["hi"], color="#08519c", lw=1.8)
            ax.plot(
                100 * r["delta"], y, "o", ms=5, mec="#08519c", mfc="#08519c" if r["significant"] else "white"
            )
            labels.append((y, _short(r["method"], 30), False))
            ys.append(y)
            y += 1
    ax.axvline(0, color="#333", ls=(0, (3, 3)), lw=1)
    ax.set_yticks([p for p, _, _ in labels], [t for _, t, _ in labels])
    for tick, (_, _, bold) in zip(ax.get_yticklabels(), labels):
        tick.set_fontweight("bold" if bold else "normal")
    ax.set_ylim(y - 0.5, -0.5)
    ax.set_xlabel(f"Δ vs {_short(baseline, 30)} (percentage points)")
    ax.grid(axis="x", color="#e5e5e5")
    return save(fig, f"forest_delta_vs_{_slug(baseline)}", out_dir, css="plot", label="forest plot")


def leverage_figure(table: pd.DataFrame, out_dir) -> str:
    """Per factor: the range of level means (pp) and η², side by side."""
    fig, axes = figure(6.4, 0.32 * len(table) + 0.9, ncols=2)
    names = table["factor"].tolist()
    for ax, col, color, title, fmt in (
        (axes[0][0], "range_points", "#4e79a7", "range (pp)", "{:.1f}"),
        (axes[0][1], "eta_squared", "#f28e2b", "η²", "{:.2f}"),
    ):
        values = table[col].to_numpy(float)
        ax.barh(range(len(names)), np.nan_to_num(values), color=color)
        for i, v in enumerate(values):
            ax.text(
                0 if math.isnan(v) else v, i, " " + ("—" if math.isnan(v) else fmt.format(v)), va="center"
            )
        ax.set_yticks(range(len(names)), names if ax is axes[0][0] else [""] * len(names))
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        ax.set_xlim(0, max(1e-9, np.nanmax(values, initial=0.0)) * 1.3 or 1)
    return save(fig, "leverage", out_dir, css="plot", label="leverage")


def rank_figure(ranks: pd.DataFrame, scales, params: dict[str, str], style: dict, out_dir) -> str:
    """Each method's rank (1 = best mean) at each scale: crossing lines are rank inversions."""
    n = int(ranks["rank"].max())
    fig, ax = figure(max(5.0, 1.3 * len(scales) + 2.6), 0.32 * n + 1.4)
    ends: dict[tuple, list[str]] = {}
    for m in sorted(ranks["method"].unique()):
        mine = ranks[ranks["method"] == m].set_index("scale")["rank"]
        pts = [(i, mine[s]) for i, s in enumerate(scales) if s in mine.index and not pd.isna(mine[s])]
        color, dash = style[m]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=5, color=color, ls=_dash(dash), lw=2)
        ends.setdefault(pts[-1], []).append(m)
    for end, names in ends.items():  # tied methods share one label
        color = style[names[0]][0] if len(names) == 1 else "#333"
        ax.annotate(
            ", ".join(map(_short, names)),
            end,
            xytext=(8, 0),
            textcoords="offset points",
            va="center",
            color=color,
        )
    _scale_ticks(ax, list(scales), params)
    ax.set_xlim(-0.5, len(scales) - 0.5 + 0.9)
    ax.set_yticks(range(1, n + 1), [f"#{k}" for k in range(1, n + 1)])
    ax.set_ylim(n + 0.5, 0.5)
    ax.grid(axis="y", color="#e5e5e5")
    return save(fig, "rank_by_scale", out_dir, css="plot", label="rank by scale")


def spread_figure(spread: pd.DataFrame, out_dir) -> str:
    """Per scale, the method spread (max − min of method means, pp) in and out of distribution."""
    fig, ax = figure(6.0, 0.6 * len(spread) + 1.0)
    ys = np.arange(len(spread))
    for off, col, color, name in (
        (-0.2, "id_spread", "#4e79a7", "ID"),
        (0.2, "ood_spread", "#e15759", "OOD"),
    ):
        values = spread[col].to_numpy(float)
        ax.barh(ys + off, np.nan_to_num(values), height=0.38, color=color, label=name)
        for y, v in zip(ys + off, values):
            ax.text(
                0 if math.isnan(v) else v, y, f" {name} {'—' if math.isnan(v) else f'{v:.1f}'}", va="center"
            )
    ax.set_yticks(ys, [_short(s, 28) for s in spread["scale"]])
    ax.invert_yaxis()
    ax.set_xlabel("method spread (max − min of method means, pp)")
    ax.set_xlim(0, max(1.0, np.nanmax(spread[["id_spread", "ood_spread"]].to_numpy(float))) * 1.35)
    return save(fig, "id_vs_ood_spread", out_dir, css="plot", label="ID vs OOD spread")


def domain_figure(spread: pd.DataFrame, out_dir) -> str:
    """Per scale and task family, the method spread (pp) with its bootstrap interval, and the spread of
    permuted labels (where methods do not matter) as a grey tick."""
    fig, ax = figure(6.0, 0.45 * len(spread) + 1.0)
    ys = np.arange(len(spread))
    x = spread["spread"].to_numpy(float)
    err = np.abs(np.vstack([x - spread["ci_low"].to_numpy(float), spread["ci_high"].to_numpy(float) - x]))
    ax.errorbar(x, ys, xerr=err, fmt="o", color="#4e79a7", capsize=3, label="spread (95% bootstrap)")
    ax.plot(spread["null_spread"], ys, "|", ms=12, mew=2, color="#999", label="permuted labels (median)")
    ax.set_yticks(ys, [_short(f"{r['scale']} · {r['family']}", 30) for _, r in spread.iterrows()])
    ax.invert_yaxis()
    ax.set_xlabel("method spread (max − min of method means, pp)")
    ax.legend(loc="lower right", fontsize=7)
    return save(fig, "spread_by_task_family", out_dir, css="plot", label="spread by task family")


def dots(values: list[float], mean: float, lo: float, hi: float, color: str) -> str:
    """A leaderboard row's seeds as dots on the scale's shared axis; the bar is the mean."""
    fig, ax = figure(1.25, 0.2)
    ax.plot(values, [0] * len(values), "o", ms=4, color=color, alpha=0.8)
    ax.axvline(mean, color="#333", lw=1.5)
    ax.set_xlim(lo, hi)
    ax.set_ylim(-1, 1)
    ax.axis("off")
    fig.subplots_adjust(0, 0, 1, 1)
    return save(
        fig,
        "dots",
        None,
        css="dots",
        tight=False,
        label="seeds: " + ", ".join(f"{100 * v:.1f}" for v in values) + " %",
    )


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_") or "baseline"
