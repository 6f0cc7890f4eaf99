r"""The self-contained HTML leaderboard: ``oxbench report DIR`` writes ``DIR/report.html``.

One file and no network: tables are plain HTML sorted by a few lines of inline JavaScript
(``templates/sort_script.html``), plots are inline SVG drawn here in Python. Every string that
comes from a run record, a config or a plugin (method, scale, error, package names, ...) is
escaped: Jinja2 autoescapes the templates and the SVG builder :func:`_tag` escapes every
attribute value and text node. A Content-Security-Policy ``<meta>`` allowing no source at all,
and only the report's own script (by its SHA-256), is a second line of defence.

What is shown, and from which function of :mod:`analysis`:

* per scale, a leaderboard with **seeds and test problems as crossed sources of variation** (the
  default unit, issue 40): :func:`~analysis.crossed.two_way_summary` (mean over seeds with the
  two-way interval, inside [0, 100] %), the seed-only t-interval beside it, the per-seed values as
  dots, and :func:`~analysis.crossed.two_way_vs_baseline` (Δ in points with its two-way interval,
  ``p_adj`` after ``correction`` over the m methods compared at that scale, significance ``p_adj <
  alpha`` on the two-way test, the seed-only ``p_adj`` beside it, Hedges' g over seeds); OOD accuracy
  and best@k when the runs report them. A cell without per-problem outcomes falls back to the seed-only
  numbers and its interval says so;
* accuracy vs scale (scales ordered by ``scale_params``; only with two scales or more) with the
  interval as a band;
* a forest plot of Δ vs the baseline with the two-way :math:`1-\alpha` interval and, for
  ``bonferroni``/``holm``, the simultaneous Bonferroni interval at level :math:`1-\alpha/m`.
  ``p_adj = min(1, m p) < \alpha`` exactly when that interval excludes 0; Holm rejects at least as
  often, so for Holm it is conservative;
* :func:`~analysis.leverage` (range in points and :math:`\eta^2` per factor);
  :func:`~analysis.rank_table` as a bump chart with :func:`~analysis.rank_inversions` (Kendall τ
  between consecutive scales); :func:`~analysis.task_leverage` (ID vs OOD spread) with OOD data;
  :func:`~analysis.paired_vs_baseline` (McNemar and paired bootstrap) per split with eval.jsonl;
* failed runs (:func:`~analysis.load_failed`) and provenance (git shas, config hashes, the union
  of package versions, loss versions, ``data_order_sha`` per run).

Every row is an arm (the ``arm`` column of :func:`~analysis.load_runs`): a method, plus the grid
axes that vary other than scale and seed (``"sgrpo lr=0.0001"``), so seeds are pooled within an
arm only. When the grid ran both full fine-tuning and LoRA, LoRA arms are shown as
``"<arm> (LoRA)"`` so that no cell mixes the two. ``baseline`` names an arm or a method; a method
that ran as several arms is compared through its first arm (alphabetically) and the report says
so. When ``baseline`` was not run, the first arm (alphabetically) present at every scale is used
instead and the report says so.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import re
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import pandas as pd
from markupsafe import Markup

from analysis import figures as figs
from analysis.crossed import BOTH, two_way_summary, two_way_vs_baseline
from analysis.domains import family_spread
from analysis.leverage import leverage, task_leverage
from analysis.runs import (
    RUN_COLUMNS,
    BadRecordWarning,
    _records,
    duplicate_run_ids,
    load_failed,
    load_problem_outcomes,
    load_runs,
)
from analysis.stats import (
    CORRECTIONS,
    paired_vs_baseline,
    rank_inversions,
    rank_table,
    welch,
)
from analysis.units import drop_duplicate_arms, duplicate_arms, duplicate_note

TEMPLATES = Path(__file__).with_name("templates")
OOD = "ood_accuracy"
DOMAIN = re.compile(r"domain_(?!.*_chance$).+")  # a task family's score (analysis.runs.domain_metrics)
BEST_AT = re.compile(r"best_at_(\d+)$")
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#79706e",
)
DASHES = ("", "6 3", "2 3")


def write_report(directory: str | Path, **options) -> Path:
    """Write ``directory/report.html`` and return its path: :func:`render_report` of ``directory`` with
    ``options`` (``baseline``, ``metric``, ``correction``, ``alpha``, ``strict``)."""
    started = time.time()
    html = render_report(directory, **options)
    _drop_stale_figures(Path(directory) / "figures", started)
    path = Path(directory) / "report.html"
    tmp = path.with_name(f".report.html.{os.getpid()}.tmp")  # atomic: a reader never sees half a report
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException as exc:  # a full disk: no temp file left, the old report kept, the path named
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    return path


def _drop_stale_figures(figures: Path, since: float) -> None:
    """Remove the figure files this report did not write (every figure is written on each render, so
    an older one belongs to an earlier report: another metric, baseline or set of runs). The margin
    covers file clocks that lag ``time.time()`` by a tick."""
    for f in (p for ext in ("svg", "pdf") for p in figures.glob(f"*.{ext}")):
        if f.stat().st_mtime < since - 2.0:
            f.unlink(missing_ok=True)


def render_report(
    directory: str | Path,
    *,
    baseline: str = "dpo",
    metric: str = "accuracy",
    correction: str = "bonferroni",
    alpha: float = 0.05,
    strict: bool = False,
) -> str:
    """The report on every run record under ``directory``, as one self-contained HTML string.

    Raises a one-line ``ValueError`` when ``directory`` holds no run.json, when finished runs
    exist but none reports ``metric``, or for a bad ``correction``/``alpha``.
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; expected one of {CORRECTIONS}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    data = _load(Path(directory), metric, strict)
    return _render(_context(data, baseline, metric, correction, alpha))


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


@dataclass
class _Data:
    root: Path
    records: list[dict]
    runs: pd.DataFrame  # finished runs, as load_runs gives them
    arms: pd.DataFrame  # the same with LoRA arms relabelled
    failed: pd.DataFrame
    outcomes: pd.DataFrame


def _load(root: Path, metric: str, strict: bool = False) -> _Data:
    """The records under ``root`` (a bad one is skipped with a warning naming it, or raises if ``strict``)."""
    if not root.is_dir():
        raise ValueError(f"{root}: no such results directory")
    with warnings.catch_warnings():  # each bad record is named once, by the first reader
        records = _records(root, strict)
        warnings.simplefilter("ignore", BadRecordWarning)
        return _loaded(root, metric, records)


def _loaded(root: Path, metric: str, records: list[dict]) -> _Data:
    if not records:
        raise ValueError(f"{root}: no run records (run.json) found")
    runs = load_runs(root)
    if len(runs) and (metric not in runs.columns or runs[metric].isna().all()):
        have = [c for c in runs.columns if c not in RUN_COLUMNS]
        raise ValueError(f"{root}: no finished run reports metric {metric!r}; metrics present: {have}")
    return _Data(root, records, runs, _arms(runs), load_failed(root), load_problem_outcomes(root))


def _arms(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with ``method`` relabelled as their arm, and ``"<arm> (LoRA)"`` for LoRA runs if both
    settings ran (``arm`` follows, so the statistics group by that label; ``method_name`` keeps the
    method)."""
    arms = runs.copy()
    arms["method_name"] = arms["method"]
    if "arm" in arms.columns:
        arms["method"] = arms["arm"]
    if arms["lora"].nunique() > 1:
        lora = arms["lora"].astype(bool) & ~arms["method"].str.endswith(" (LoRA)")
        arms.loc[lora, "method"] = arms.loc[lora, "method"] + " (LoRA)"
    arms["arm"] = arms["method"]
    return arms


def _resolve_baseline(arms: pd.DataFrame, baseline: str, metric: str) -> tuple[str | None, str | None]:
    """(baseline used, note) — the requested one if it ran, else the fallback described above."""
    if not len(arms):
        return None, None
    scored = arms.dropna(subset=[metric])
    if baseline in set(scored["method"]):
        return baseline, None
    # the method ran as several arms (a grid axis such as train.lr varies): its first arm
    own = sorted(
        m for m in set(scored.loc[scored["method_name"] == baseline, "method"]) if not m.endswith(" (LoRA)")
    )
    if own:
        return own[0], f"Baseline {baseline!r} ran as arms {', '.join(own)}; comparing against {own[0]!r}."
    scales = scored.groupby("method")["scale"].nunique()
    everywhere = sorted(scales[scales == scored["scale"].nunique()].index)
    if everywhere:
        chosen, why = everywhere[0], "the first method alphabetically present at every scale"
    else:
        chosen, why = sorted(scales.index, key=lambda m: (-scales[m], m))[0], "the method run at most scales"
    return chosen, f"Baseline {baseline!r} has no finished run; comparing against {chosen!r} ({why})."


# ---------------------------------------------------------------------------------------------
# Tables (rendered by the `table` macro of report.html)
# ---------------------------------------------------------------------------------------------


@dataclass
class Cell:
    """One table cell: ``text`` (escaped by Jinja2) or ``html`` (Markup built here), plus its sort key."""

    text: str = ""
    sort: str | None = None
    html: Markup | None = None
    title: str | None = None
    cls: str = ""


@dataclass
class Column:
    label: str
    kind: str = "text"  # "text", "number" or "none" (not sortable)
    title: str | None = None


@dataclass
class Table:
    id: str
    columns: list[Column]
    rows: list[list[Cell]] = field(default_factory=list)
    foot: list[list[Cell]] = field(default_factory=list)  # reference rows (base model, chance): not sorted


def _key(x: float | None) -> str:
    """The data-sort value of a number: '' for NaN/None (sorted last), ±Infinity for infinities."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(float(x))


def _pct(x: float, digits: int = 1, sign: bool = False) -> str:
    """100·x with ``digits`` decimals ('—' for NaN)."""
    if x is None or math.isnan(x):
        return "—"
    return f"{100 * x:+.{digits}f}" if sign else f"{100 * x:.{digits}f}"


def _p(p: float) -> str:
    if p is None or math.isnan(p):
        return "—"
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def _fixed(x: float, digits: int = 2, sign: bool = False) -> str:
    if x is None or math.isnan(x):
        return "—"
    if math.isinf(x):
        return "+∞" if x > 0 else "−∞"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _params(n: int) -> str:
    """A parameter count as 1.0M, 494M, 1.5B."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            v = n / size
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return str(n)


def _mean_ci(row: pd.Series | None) -> Cell:
    """'mean [low, high]' in % from a :func:`~analysis.crossed.two_way_summary` row (no interval with one
    seed); the title names the interval's unit and gives the seed-only one."""
    if row is None:
        return Cell("—", "")
    if math.isnan(row["ci_low"]):
        return Cell(_pct(row["mean"]), _key(row["mean"]), title="one seed: no interval")
    text = f"{_pct(row['mean'])} [{_pct(row['ci_low'])}, {_pct(row['ci_high'])}]"
    unit = row.get("unit", "seeds")
    title = f"95% interval over {unit}, n = {row['n']} seeds"
    if unit == BOTH:
        title += f" × {int(row['n_problems'])} problems; seeds only: {_interval(row, 'seed_ci')}"
    return Cell(text, _key(row["mean"]), title=title)


def _interval(row: pd.Series, prefix: str) -> str:
    """'[low, high]' in % of the ``prefix``_low / _high columns of ``row``."""
    return f"[{_pct(row[f'{prefix}_low'])}, {_pct(row[f'{prefix}_high'])}]"


# ---------------------------------------------------------------------------------------------
# Report context
# ---------------------------------------------------------------------------------------------


def _context(data: _Data, requested: str, metric: str, correction: str, alpha: float) -> dict:
    baseline, note = _resolve_baseline(data.arms, requested, metric)
    ctx = {
        "title": f"oxbench report: {data.root.name or data.root}",
        "root": str(data.root),
        "metric": metric,
        "baseline": baseline,
        "baseline_note": note,
        "duplicates": duplicate_run_ids(data.root),
        "correction": correction,
        "alpha": alpha,
        "counts": Counter(r["status"] for r in data.records),
        "failed": _failed_table(data),
        "provenance": _provenance(data.records),
        "isocompute": _isocompute_section(data.root),
        "staleness": _staleness_section(data.root),
        "tuning": _tuning_section(data.root),
    }
    if baseline is not None:
        ctx.update(_results(data, baseline, metric, correction, alpha))
    return ctx


def _results(data: _Data, baseline: str, metric: str, correction: str, alpha: float) -> dict:
    arms = data.arms
    summary = two_way_summary(arms, data.outcomes, metric)
    tests = two_way_vs_baseline(arms, data.outcomes, metric, baseline, correction=correction, alpha=alpha)
    scales = list(dict.fromkeys(summary["scale"]))
    params = arms.groupby("scale")["scale_params"].first()
    style = _styles(sorted(arms["method"].unique()))
    ood = OOD in arms.columns and arms[OOD].notna().any()
    dups = duplicate_arms(arms)  # one algorithm run under two names counts once in spreads and η²
    once = drop_duplicate_arms(arms, dups)
    paired, paired_errors = _paired_tables(data.outcomes, arms, baseline, correction, alpha)
    tested = tests.groupby("scale", sort=False)["p"].count().to_dict()  # m per scale
    out_dir = data.root / "figures"
    labels = {s: _params(int(params[s])) for s in scales}
    return {
        "single_seed": bool(summary["n"].max() < 2),
        "scales": _scale_sections(
            arms, data.outcomes, summary, tests, scales, params, metric, baseline, style
        ),
        "scale_plot": Markup(figs.scale_figure(summary, scales, labels, style, metric, out_dir))
        if len(scales) > 1
        else None,
        "unit": BOTH if (summary["unit"] == BOTH).any() else "seeds",
        "forest": _forest(arms, tests, scales, metric, baseline, correction, alpha, out_dir),
        "forest_m": tested,
        "forest_adjusted": correction != "none" and any(m > 1 for m in tested.values()),
        "leverage": _leverage_section(drop_duplicate_arms(data.runs, dups), metric, out_dir),
        "ranks": _rank_section(arms, metric, scales, style, labels, out_dir),
        "ood": _ood_section(once, metric, out_dir) if ood else None,
        "domains": _domain_section(once, out_dir),
        "duplicates_note": duplicate_note(dups),
        "paired": paired,
        "paired_errors": paired_errors,
    }


def _styles(methods: Sequence[str]) -> dict[str, tuple[str, str]]:
    """method -> (colour, dash pattern), stable for the whole report."""
    return {
        m: (PALETTE[i % len(PALETTE)], DASHES[i // len(PALETTE) % len(DASHES)]) for i, m in enumerate(methods)
    }


# ---------------------------------------------------------------------------------------------
# Per-scale leaderboards
# ---------------------------------------------------------------------------------------------


def _extra_metrics(arms: pd.DataFrame, metric: str) -> list[tuple[str, str]]:
    """(column, label) for the greedy accuracies the leaderboard does not rank by (strict, verified,
    flexible, verified-flexible), OOD accuracy, each lm-eval task family and each best@k in the runs."""
    present = [c for c in arms.columns if c not in RUN_COLUMNS and arms[c].notna().any() and c != metric]
    honest = [
        ("accuracy", "strict (%)"),
        ("accuracy_verified", "verified (%)"),
        ("accuracy_flexible", "flexible (%)"),
        ("accuracy_verified_flexible", "verified-flexible (%)"),
    ]
    extra = [(c, label) for c, label in honest if c in present]
    extra += [(OOD, "OOD acc. (%)")] if OOD in present else []
    extra += [(c, f"{c.removeprefix('domain_')} (%)") for c in present if DOMAIN.fullmatch(c)]
    best = sorted((int(m.group(1)), c) for c in present if (m := BEST_AT.match(c)))
    return extra + [(c, f"best@{k} (%)") for k, c in best]


def _scale_sections(arms, outcomes, summary, tests, scales, params, metric, baseline, style) -> list[dict]:
    extra = [
        (label, two_way_summary(arms, outcomes, col).set_index(["scale", "method"]))
        for col, label in _extra_metrics(arms, metric)
    ]
    paradigm = arms.groupby("method")["paradigm"].first()
    sections = []
    for i, scale in enumerate(scales):
        cells = summary[summary["scale"] == scale].set_index("method")
        welch_rows = tests[tests["scale"] == scale].set_index("method")
        table = Table(f"leaderboard-{i}", _leaderboard_columns(metric, extra))
        lo, hi = _value_range(cells["values"])
        for method, row in cells.sort_values("mean", ascending=False).iterrows():
            test = welch_rows.loc[method] if method in welch_rows.index else None
            table.rows.append(
                [
                    Cell(method, method, cls="name"),
                    Cell(paradigm[method], paradigm[method]),
                    Cell(str(row["n"]), _key(row["n"])),
                    _mean_ci(row),
                    Cell(_interval(row, "seed_ci") if not math.isnan(row["seed_ci_low"]) else "—", ""),
                    Cell(
                        html=Markup(figs.dots(row["values"], row["mean"], lo, hi, style[method][0])), sort=""
                    ),
                    *_test_cells(test, method == baseline),
                    *[
                        _mean_ci(s.loc[(scale, method)] if (scale, method) in s.index else None)
                        for _, s in extra
                    ],
                ]
            )
        table.foot = _reference_rows(
            arms[arms["scale"] == scale], metric, [c for c, _ in _extra_metrics(arms, metric)]
        )
        sections.append(
            {
                "id": f"scale-{i}",
                "scale": scale,
                "params": _params(int(params[scale])),
                "table": table,
                "has_baseline": baseline in cells.index,
                "floor": _floor_line(arms[arms["scale"] == scale]),
            }
        )
    return sections


def _reference_rows(runs: pd.DataFrame, metric: str, extra_cols: list[str]) -> list[list[Cell]]:
    """A leaderboard's reference rows: the base model before post-training (its ``base_*`` metrics,
    from the runs' records) and the task's chance level, where the records carry them."""
    rows = []
    for label, prefix, title in (
        ("base model", "base_", "the untrained base, evaluated like every arm"),
        ("chance", None, "what guessing scores on this task"),
    ):
        col = f"{prefix}{metric}" if prefix else "chance"
        if col not in runs.columns or runs[col].isna().all():
            continue
        value = float(runs[col].mean())
        cells = [
            Cell(label, "", cls="name reference", title=title),
            Cell("—", ""),
            Cell("—", ""),
            Cell(_pct(value), _key(value)),
            Cell("", ""),
            Cell("", ""),
        ] + [Cell("", "") for _ in range(5)]
        for ex_col in extra_cols:
            chance = (
                "ood_chance" if ex_col == OOD else f"{ex_col}_chance" if DOMAIN.fullmatch(ex_col) else None
            )
            ref = {"base_": f"base_{ex_col}", None: chance}[prefix]
            ok = ref is not None and ref in runs.columns and runs[ref].notna().any()
            cells.append(Cell(_pct(float(runs[ref].mean())), "") if ok else Cell("—", ""))
        rows.append(cells)
    return rows


def _floor_line(runs: pd.DataFrame) -> str:
    """What every arm of a scale starts from and what guessing scores: the base model's metrics
    (before post-training) and the task's chance level, read from the runs' records."""
    parts = []
    for col, label in (
        ("base_accuracy", "strict"),
        ("base_accuracy_flexible", "flexible"),
        ("base_accuracy_verified", "verified"),
    ):
        if col in runs.columns and runs[col].notna().any():
            parts.append(f"{label} {_pct(float(runs[col].mean()))}%")
    best = sorted((int(m.group(1)), c) for c in runs.columns if (m := re.match(r"base_best_at_(\d+)$", c)))
    if best and runs[best[-1][1]].notna().any():
        k, col = best[-1]
        avg = f"base_avg_at_{k}"
        if avg in runs.columns and runs[avg].notna().any():
            parts.append(f"pass@1 {_pct(float(runs[avg].mean()))}%")
        parts.append(f"pass@{k} {_pct(float(runs[col].mean()))}%")
    line = "Base model: " + ", ".join(parts) if parts else ""
    if "chance" in runs.columns and runs["chance"].notna().any():
        line += ("; " if line else "") + f"chance {_pct(float(runs['chance'].mean()))}%"
    return line


def _leaderboard_columns(metric: str, extra: list) -> list[Column]:
    return [
        Column("Method"),
        Column("Paradigm"),
        Column("n", "number", "seeds"),
        Column(
            f"{metric} (%) [95% CI]", "number", "mean over seeds; interval over seeds × problems (two-way)"
        ),
        Column("seeds only", "none", "the t-interval over seeds alone (test problems held fixed), in %"),
        Column("Seeds", "none", "one dot per seed; the bar is the mean"),
        Column("Δ vs baseline (pp) [95% CI]", "number", "mean difference to the baseline; two-way interval"),
        Column("p_adj", "number", "two-way p-value after correction over the methods at this scale"),
        Column("p_adj, seeds only", "number", "Welch's over seeds alone, after the same correction"),
        Column("Sig.", "text", "p_adj < α (two-way)"),
        Column("Hedges' g", "number", "bias-corrected standardized mean difference over seeds"),
        *[Column(f"{label} [95% CI]", "number", "mean [two-way interval]") for label, _ in extra],
    ]


def _test_cells(test: pd.Series | None, is_baseline: bool) -> list[Cell]:
    """Δ, p_adj, significance and Hedges' g cells of one leaderboard row."""
    if is_baseline:
        return [
            Cell("baseline", "0"),
            Cell("", ""),
            Cell("", ""),
            Cell("baseline", "", cls="base"),
            Cell("", ""),
        ]
    if test is None:
        return [Cell("—", "", title="baseline not run at this scale")] + [Cell("—", "") for _ in range(4)]
    unit = test.get("unit", "seeds")
    ci = f"over {unit}; unadjusted p = {_p(test['p'])}; seeds only: {_interval(test, 'seed_ci')} pp, p = {_p(test['seed_p'])}"
    if math.isnan(test["p"]):
        sig = Cell("n/a", "", title="needs at least 2 seeds on both sides")
    elif test["significant"]:
        sig = Cell("▲ sig." if test["delta"] > 0 else "▼ sig.", "1", cls="sig")
    else:
        sig = Cell("n.s.", "0")
    delta = _pct(test["delta"], sign=True)
    delta += "" if math.isnan(test["ci_low"]) else f" {_interval(test, 'ci')}"
    return [
        Cell(delta, _key(test["delta"]), title=ci),
        Cell(_p(test["p_adj"]), _key(test["p_adj"]), title=f"unit: {unit}"),
        Cell(_p(test["seed_p_adj"]), _key(test["seed_p_adj"])),
        sig,
        Cell(_fixed(test["hedges_g"], sign=True), _key(test["hedges_g"])),
    ]


def _value_range(values: Iterable[list[float]]) -> tuple[float, float]:
    flat = [v for vs in values for v in vs]
    lo, hi = min(flat), max(flat)
    pad = (hi - lo) * 0.08 or 0.01
    return lo - pad, hi + pad


# ---------------------------------------------------------------------------------------------
# Plots (drawn by analysis.figures with matplotlib)
# ---------------------------------------------------------------------------------------------


def _forest(arms, tests, scales, metric, baseline, correction, alpha, out_dir) -> Markup | None:
    """Δ vs baseline (pp) per scale and method: dark = Welch 1−α CI, light = Bonferroni 1−α/m CI."""
    if not len(tests):
        return None
    rows = [
        r
        for s in scales
        for r in _forest_rows(arms, tests[tests["scale"] == s], metric, baseline, correction, alpha)
    ]
    return Markup(figs.forest_figure(rows, scales, baseline, out_dir))


def _forest_rows(arms, tests, metric, baseline, correction, alpha) -> list[dict]:
    m = int(tests["p"].count())
    rows = []
    for _, t in tests.iterrows():
        adj_lo = adj_hi = math.nan
        if correction != "none" and m > 1 and t.get("unit") == BOTH:
            adj_lo, adj_hi = t["adj_ci_low"], t["adj_ci_high"]
        elif correction != "none" and m > 1 and not math.isnan(t["p"]):
            cell = arms[arms["scale"] == t["scale"]].dropna(subset=[metric])
            a = cell.loc[cell["method"] == t["method"], metric]
            b = cell.loc[cell["method"] == baseline, metric]
            adjusted = welch(a, b, alpha / m)
            adj_lo, adj_hi = adjusted["ci_low"], adjusted["ci_high"]
        rows.append(
            {
                "scale": t["scale"],
                "method": t["method"],
                "delta": t["delta"],
                "lo": t["ci_low"],
                "hi": t["ci_high"],
                "adj_lo": adj_lo,
                "adj_hi": adj_hi,
                "significant": bool(t["significant"]),
            }
        )
    return rows


def _leverage_section(runs: pd.DataFrame, metric: str, out_dir) -> dict | None:
    table = leverage(runs, metric)
    if not len(table):
        return None
    rows = Table(
        "leverage",
        [
            Column("Factor"),
            Column("Levels", "number"),
            Column("Range (pp)", "number"),
            Column("η²", "number"),
            Column("Contexts", "number"),
            Column("Runs", "number"),
        ],
    )
    for _, r in table.iterrows():
        rows.rows.append(
            [
                Cell(r["factor"], r["factor"]),
                Cell(str(r["n_levels"]), _key(r["n_levels"])),
                Cell(_fixed(r["range_points"], 1), _key(r["range_points"])),
                Cell(_fixed(r["eta_squared"], 3), _key(r["eta_squared"])),
                Cell(str(r["n_contexts"]), _key(r["n_contexts"])),
                Cell(str(r["n_runs"]), _key(r["n_runs"])),
            ]
        )
    return {"plot": Markup(figs.leverage_figure(table, out_dir)), "table": rows}


def _rank_section(
    arms: pd.DataFrame, metric: str, scales: list[str], style: dict, labels, out_dir
) -> dict | None:
    if len(scales) < 2:
        return None
    ranks = rank_table(arms, metric, by="scale")
    table = _inversion_table(rank_inversions(arms, metric))
    return {"plot": Markup(figs.rank_figure(ranks, scales, labels, style, out_dir)), "table": table}


def _inversion_table(inv: pd.DataFrame) -> Table:
    table = Table(
        "inversions",
        [
            Column("From"),
            Column("To"),
            Column("Methods", "number"),
            Column("Kendall τ", "number"),
            Column("p", "number"),
            Column("Flips", "number"),
            Column("Swapped pairs", "none"),
        ],
    )
    for _, r in inv.iterrows():
        flips = "; ".join(f"{a} > {b} → {b} > {a}" for a, b in r["flips"]) or "none"
        table.rows.append(
            [
                Cell(r["scale_from"], r["scale_from"]),
                Cell(r["scale_to"], r["scale_to"]),
                Cell(str(r["n_methods"]), _key(r["n_methods"])),
                Cell(_fixed(r["tau"], 3, sign=True), _key(r["tau"])),
                Cell(_p(r["p"]), _key(r["p"])),
                Cell(str(r["n_flips"]), _key(r["n_flips"])),
                Cell(flips, ""),
            ]
        )
    return table


def _ood_section(arms: pd.DataFrame, metric: str, out_dir) -> dict | None:
    spread = task_leverage(arms, metric, OOD)
    if not len(spread):
        return None
    table = Table(
        "ood-spread",
        [
            Column("Scale"),
            Column("Methods", "number"),
            Column("ID spread (pp)", "number"),
            Column("OOD spread (pp)", "number"),
            Column("OOD / ID", "number"),
            Column("Best ID"),
            Column("Best OOD"),
        ],
    )
    for _, r in spread.iterrows():
        table.rows.append(
            [
                Cell(r["scale"], r["scale"]),
                Cell(str(r["n_methods"]), _key(r["n_methods"])),
                Cell(_fixed(r["id_spread"], 1), _key(r["id_spread"])),
                Cell(_fixed(r["ood_spread"], 1), _key(r["ood_spread"])),
                Cell(_fixed(r["ratio"], 2), _key(r["ratio"])),
                Cell(r["id_best"], r["id_best"]),
                Cell(r["ood_best"], r["ood_best"]),
            ]
        )
    return {"plot": Markup(figs.spread_figure(spread, out_dir)), "table": table}


def _domain_section(arms: pd.DataFrame, out_dir) -> dict | None:
    """The method spread per task family (:func:`analysis.domains.family_spread`), when runs carry lm-eval
    task families beside the trained task."""
    if not any(c.startswith("domain_") for c in arms.columns):
        return None
    spread = family_spread(arms, n_boot=1000, n_perm=1000)
    if not len(spread):
        return None
    heads = [
        "Scale",
        "Family",
        "Methods",
        "Spread (pp)",
        "95% CI",
        "Permuted (pp)",
        "p",
        "Best",
        "Worst",
        "Base (%)",
        "Chance (%)",
    ]
    table = Table(
        "domain-spread",
        [Column(h, "number" if i in (2, 3, 5, 6, 9, 10) else "text") for i, h in enumerate(heads)],
    )
    for _, r in spread.iterrows():
        ci = f"[{_fixed(r['ci_low'], 1)}, {_fixed(r['ci_high'], 1)}]"
        table.rows.append(
            [
                Cell(r["scale"], r["scale"]),
                Cell(r["family"], r["family"]),
                Cell(str(r["n_methods"]), _key(r["n_methods"])),
                Cell(_fixed(r["spread"], 2), _key(r["spread"])),
                Cell(ci, ci),
                Cell(_fixed(r["null_spread"], 2), _key(r["null_spread"])),
                Cell(_p(r["p"]), _key(r["p"])),
                Cell(r["best"], r["best"]),
                Cell(r["worst"], r["worst"]),
                Cell(_fixed(r["base"], 1), _key(r["base"])),
                Cell(_fixed(r["chance"], 1), _key(r["chance"])),
            ]
        )
    return {"plot": Markup(figs.domain_figure(spread, out_dir)), "table": table}


# ---------------------------------------------------------------------------------------------
# Paired tests, failed runs, provenance
# ---------------------------------------------------------------------------------------------


def _paired_tables(outcomes, arms, baseline, correction, alpha) -> tuple[list[dict], list[str]]:
    """One McNemar / paired-bootstrap table per eval split ('test' first); errors become notes."""
    if not len(outcomes) or not len(arms):
        return [], []
    tables, errors = [], []
    for i, split in enumerate(sorted(outcomes["split"].unique(), key=lambda s: (s != "test", s))):
        try:
            df = paired_vs_baseline(outcomes, arms, baseline, split=split, correction=correction)
        except ValueError as err:
            errors.append(f"split {split!r}: {err}")
            continue
        if len(df):
            tables.append({"split": split, "table": _paired_table(df, alpha, f"paired-{i}")})
    return tables, errors


def _paired_table(df: pd.DataFrame, alpha: float, table_id: str) -> Table:
    table = Table(
        table_id,
        [
            Column("Scale"),
            Column("Method"),
            Column("Seeds", "number", "seeds pooled per problem (majority vote) / baseline seeds"),
            Column("Problems", "number"),
            Column("Acc. (%)", "number"),
            Column("Baseline (%)", "number"),
            Column("Δ (pp)", "number"),
            Column("Only method / only baseline", "none"),
            Column("McNemar p_adj", "number"),
            Column("Bootstrap 95% CI (pp)", "none"),
            Column("Bootstrap p_adj", "number"),
            Column("Sig.", "text", "McNemar p_adj < α"),
        ],
    )
    for _, r in df.iterrows():
        sig = "n/a" if math.isnan(r["mcnemar_p_adj"]) else "sig." if r["mcnemar_p_adj"] < alpha else "n.s."
        table.rows.append(
            [
                Cell(r["scale"], r["scale"]),
                Cell(r["method"], r["method"], cls="name"),
                Cell(f"{r['n_seeds']} / {r['baseline_n_seeds']}", _key(r["n_seeds"])),
                Cell(str(r["n_problems"]), _key(r["n_problems"])),
                Cell(_pct(r["accuracy"]), _key(r["accuracy"])),
                Cell(_pct(r["baseline_accuracy"]), _key(r["baseline_accuracy"])),
                Cell(_pct(r["delta"], sign=True), _key(r["delta"])),
                Cell(f"{_fixed(r['n_method_only'], 0)} / {_fixed(r['n_baseline_only'], 0)}", ""),
                Cell(_p(r["mcnemar_p_adj"]), _key(r["mcnemar_p_adj"])),
                Cell(f"[{_pct(r['boot_low'], sign=True)}, {_pct(r['boot_high'], sign=True)}]", ""),
                Cell(_p(r["boot_p_adj"]), _key(r["boot_p_adj"])),
                Cell(sig, sig),
            ]
        )
    return table


def _failed_table(data: _Data) -> Table | None:
    if not len(data.failed):
        return None
    tracebacks = {r["run_id"]: r.get("traceback") for r in data.records}
    table = Table(
        "failed",
        [Column("Run"), Column("Scale"), Column("Method"), Column("Seed", "number"), Column("Error")],
    )
    for _, r in data.failed.iterrows():
        error = r["error"] if isinstance(r["error"], str) else "(no error recorded)"
        trace = tracebacks.get(r["run_id"])
        html = None
        if isinstance(trace, str) and trace:
            html = Markup("{}<details><summary>traceback</summary><pre>{}</pre></details>").format(
                error, trace
            )
        table.rows.append(
            [
                Cell(r["run_id"], r["run_id"], cls="name"),
                Cell(r["scale"], r["scale"]),
                Cell(r["method"], r["method"]),
                Cell(str(r["seed"]), _key(r["seed"])),
                Cell(error, error, html=html, cls="error"),
            ]
        )
    return table


def _provenance(records: list[dict]) -> dict:
    """Git shas and config hashes with run counts, the union of package versions, per-run details."""
    shas = Counter(str(r.get("git_sha") or "unknown") for r in records)
    packages: dict[str, Counter] = {}
    for r in records:
        if isinstance(r.get("packages"), dict):
            for name, version in r["packages"].items():
                packages.setdefault(str(name), Counter())[str(version)] += 1
    loss_versions: dict[str, set[str]] = {}
    for r in records:
        loss_versions.setdefault(r["method"], set()).add(str(r.get("loss_version", "—")))
    return {
        "git_shas": shas.most_common(),
        "config_hashes": len({r.get("config_hash") for r in records} - {None}),
        "packages": [(n, sorted(v.items())) for n, v in sorted(packages.items())],
        "loss_versions": sorted((m, sorted(v)) for m, v in loss_versions.items()),
        "runs": _provenance_table(records),
    }


def _provenance_table(records: list[dict]) -> Table:
    table = Table(
        "provenance",
        [
            Column("Run"),
            Column("Status"),
            Column("Scale"),
            Column("Method"),
            Column("Seed", "number"),
            Column("git sha"),
            Column("Config hash"),
            Column("Loss version"),
            Column("data_order_sha"),
            Column("Total (s)", "number"),
        ],
    )
    for r in sorted(records, key=lambda r: r["run_id"]):
        timing = r.get("timing") if isinstance(r.get("timing"), dict) else {}
        total = timing.get("total_s")
        total = float(total) if isinstance(total, (int, float)) and not isinstance(total, bool) else math.nan
        values = [r["run_id"], r["status"], r["scale"], r["method"]]
        texts = [
            str(r.get(k) if r.get(k) is not None else "—")
            for k in ("git_sha", "config_hash", "loss_version", "data_order_sha")
        ]
        table.rows.append(
            [Cell(v, v) for v in values]
            + [Cell(str(r["seed"]), _key(r["seed"]))]
            + [Cell(t, t, cls="hash") for t in texts]
            + [Cell(_fixed(total, 1), _key(total))]
        )
    return table


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _isocompute_section(root: Path, n_boot: int = 200) -> dict | None:
    """Tables and figures of :mod:`analysis.isocompute_report` when the runs have learning curves."""
    from analysis import isocompute_report as isor
    from analysis.isocompute import load_curves

    curves = load_curves(root)
    if curves.empty or not any(isor.AVG_AT.match(str(c)) for c in curves.columns):
        return None  # no learning curves, or curves without the sampled metrics (eval.k = 0)
    res = isor.analyse(curves, n_boot=n_boot)
    tables, errors = [], []
    for subset, r in res["subsets"].items():
        if "fit_error" in r:
            errors.append(f"{subset}: no sigmoid fit ({r['fit_error']})")
            continue
        tables.append({"caption": f"{subset}: per-n sigmoid fits", "table": _fits_table(subset, r["fits"])})
        tables.append({"caption": f"{subset}: n*(C) fit", "table": _n_star_table(subset, r)})
    from analysis.isocompute_confound import share_note  # issue 27.2: the imbalance beside every share

    notes = "; ".join(f"{s}: {share_note(r['at'], res['metric'])}" for s, r in res["subsets"].items())
    tables.append(
        {
            "caption": f"At matched compute: variance shares ({notes}) and paired tests over problems "
            "(unit: problems)",
            "table": _matched_table(res),
        }
    )
    figures = [(caption, Markup(svg)) for caption, svg in isor.figures(curves, res, root / "figures")]
    return {
        "metric": res["metric"],
        "runs": int(curves["run_id"].nunique()),
        "boot": n_boot,
        "tables": tables,
        "figures": figures,
        "errors": errors,
    }


def _tuning_section(root: Path) -> dict | None:
    """Each arm's pick and sweep when the grid was tuned (:func:`analysis.board.tuning_section`)."""
    if not (root.with_name(root.name + "_tune") / "picks.json").is_file():
        return None  # not tuned: analysis.board (and scipy.stats under it, 0.8 s) is not imported
    from analysis.board import tuning_section

    section = tuning_section(root)
    if section is not None:
        section["figure"] = Markup(section["figure"])
    return section


def _staleness_section(root: Path, n_boot: int = 200) -> dict | None:
    """Tables and figures of :mod:`analysis.staleness_report` when the runs vary the rollout lag S."""
    from analysis import staleness_report as str_
    from analysis.staleness import load_histories, load_stability

    runs = load_stability(root)
    if runs.empty or runs["S"].nunique() < 2 and (runs["S"] == 0).all():
        return None
    histories = load_histories(root)
    res = str_.analyse(runs, histories, n_boot=n_boot)
    t = Table(
        "stale-eta",
        [Column("correction"), Column("S", "number"), Column("η_max", "number"), Column("censored")],
    )
    for r in res["eta_max"].itertuples():
        t.rows.append(
            [
                Cell(r.correction),
                Cell(str(r.S), _key(r.S)),
                Cell(f"{r.eta_max:.3g}", _key(r.eta_max)),
                Cell(r.censored or "—"),
            ]
        )
    fits = Table(
        "stale-fit",
        [
            Column("correction"),
            Column("slope (S ≥ 1)", "number"),
            Column("a", "number"),
            Column("b", "number"),
            Column("S_knee = a/b", "number"),
        ],
    )
    for corr, f in res["fits"].items():
        cells = [Cell(corr)]
        for k in ("slope", "a", "b", "S_knee"):
            lo, hi = f["ci"][k]
            cells.append(Cell(f"{f['fit'][k]:.3g} [{lo:.3g}, {hi:.3g}]", _key(f["fit"][k])))
        fits.rows.append(cells)
    alarm = res["alarm"]
    note = (
        f"ESS < {res['threshold']:g} before collapse: hit rate {alarm['hit_rate']:.2f}, false-alarm rate "
        f"{alarm['false_alarm_rate']:.2f}, median lead {alarm['median_lead']:g} steps"
        if alarm
        else "no ESS logged"
    )
    figures = [
        (caption, Markup(svg)) for caption, svg in str_.figures(runs, histories, res, root / "figures")
    ]
    return {
        "tables": [
            {"caption": "η_max per lag and correction", "table": t},
            {"caption": "Fit of η_max(S) = min(a/S, b), with 95% seed-bootstrap intervals", "table": fits},
        ],
        "note": note,
        "figures": figures,
        "runs": len(runs),
        "collapsed": int(runs["collapsed"].sum()),
    }


def _fits_table(subset: str, fits: pd.DataFrame) -> Table:
    t = Table(
        f"iso-fits-{subset}",
        [
            Column("n", "number"),
            Column("lo", "number"),
            Column("hi", "number"),
            Column("C_mid", "number"),
            Column("slope", "number"),
            Column("rmse", "number"),
        ],
    )
    for r in fits.itertuples():
        vals = (r.lo, r.hi, math.exp(r.mid), r.slope, r.rmse)
        t.rows.append([Cell(str(r.n), _key(r.n))] + [Cell(f"{v:.3g}", _key(v)) for v in vals])
    return t


def _n_star_table(subset: str, r: dict) -> Table:
    t = Table(
        f"iso-nstar-{subset}", [Column("parameter"), Column("fit", "number"), Column("95% interval", "none")]
    )
    fit, ci = r["n_star"]["fit"], r["n_star"]["ci"]
    for key in ("n_lo", "n_hi", "C_mid", "slope"):
        interval = ci.get(key)
        t.rows.append(
            [
                Cell(key),
                Cell(f"{fit[key]:.3g}", _key(fit[key])),
                Cell(f"[{interval[0]:.3g}, {interval[1]:.3g}]" if interval else "—"),
            ]
        )
    t.rows.append(
        [
            Cell("replicates (failed)"),
            Cell(f"{r['n_star']['replicates']} ({r['n_star']['failed']})"),
            Cell(""),
        ]
    )
    return t


def _matched_table(res: dict) -> Table:
    cols = [
        "subset",
        "C",
        "runs",
        "η² n",
        "η² B_p",
        "residual",
        "test",
        "n_a → n_b",
        "a",
        "b",
        "Δ",
        "p",
        "wins b/a",
    ]
    t = Table("iso-matched", [Column(c, "number" if c in ("C", "runs", "Δ", "p") else "text") for c in cols])
    for subset, r in res["subsets"].items():
        share = r["share"] or {}
        head = [
            subset,
            f"{r['c_match']:,.0f}",
            str(r["runs"]),
            *(f"{share.get(f, math.nan):.2f}" for f in ("n", "B_p", "residual")),
        ]
        for p in r.get("paired") or [{}]:
            tail = (
                [
                    f"{p['kind']}@{res['k']}",
                    f"{p['n_a']} → {p['n_b']}",
                    f"{p['a']:.3f}",
                    f"{p['b']:.3f}",
                    f"{p['delta']:+.3f}",
                    f"{p['p']:.2g}",
                    f"{p['b_wins']}/{p['a_wins']}",
                ]
                if p
                else ["—"] * 7
            )
            t.rows.append([Cell(v) for v in head + tail])
    return t


def _render(ctx: dict) -> str:
    """Render report.html; the inline script is allowed by the CSP through its SHA-256 hash."""
    env = _environment()
    script = env.get_template("sort_script.html").render()
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = (
        "default-src 'none'; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
    return env.get_template("report.html").render(**ctx, script=Markup(script), csp=csp)
