"""Apply the pre-registered collapse rule (docs/collapse_rule.md) to every committed online record and
recompute η_max(S) of the staleness study from the new labels; no run is re-run.

    python -m analysis.relabel_staleness [--results results] [--out results/staleness_relabelled]
        [--boot 2000]

The primary labels are the rule's version 3 (the reward window counts prompts, W = max(4, ⌈64 / B_p⌉)
rounds) with its fractions at 0.5; every verdict (η_max(S), brackets, slope, comparisons) comes from
them. Beside them: version 2 (the window of 256 rollouts) on every record, and the η_max(S) verdicts
with both fractions at 0.4 and 0.6 (the cut-off sensitivity, issue 40 item 3).

Writes under ``--out``: ``labels.csv`` (one row per online record of every grid but the board's, version 3: each
condition of the rule, the old and the new label, the step scale and the fingerprint), ``eta_max.csv``
(per correction and S: η_max and its bracket, before and after, nominal and effective η),
``version_changes.csv`` (every record whose label differs between versions 2 and 3),
``cutoff_verdicts.csv`` (each rule-dependent verdict at fractions 0.4, 0.5 and 0.6),
``cutoff_eta_max.csv`` (η_max and its bracket at each fraction), ``summary.json`` (every number the
markdown quotes) and ``README.md`` (the summary results/README.md cites). Prints the README.
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from pathlib import Path

import pandas as pd

from analysis import staleness as st
from analysis import staleness_relabel as sr
from analysis.collapse_rule import VERSION, label_runs

SHORT = {"none": "coupled clip", "tis_token": "token TIS (cap 2)", "decoupled": "decoupled + √ESS LR"}
LABELS = {
    "old": "old rule (first window)",
    "failed": "new rule, version 3 (R or A or C or N)",
    "R": "R alone",
    "A": "A alone",
    "A_verified": "A on verified-flexible",
}


def short(correction: str) -> str:
    """A correction's name in the tables (its ``loss.is_correction``)."""
    for token in correction.split():
        if token.startswith("loss.is_correction="):
            return SHORT.get(token.split("=", 1)[1], token)
    return correction


# the same base and settings, pooled
STUDY = (
    "staleness",
    "staleness_seeds",
    "staleness_seeds_lr",
    "staleness_seeds_mid",
    "staleness_seeds_tis",
    "staleness_seeds_bracket",
    # the curve read whole (issue 40, item 3; pre-registered in docs/staleness_model.md): the coupled
    # clip at η = 4.2e-4 for every S, and seeds 0-1 at 2.4e-4 for S = 1, 2, 4; the study's settings
    "staleness_whole",
    "staleness_whole_seeds",
)


#: grids the relabel leaves out, each with why: their own analysis reads no collapse label, and their records
#: would move the counts results/README.md and docs/collapse_rule.md quote for the studies above
NOT_RELABELLED = {
    "board_tune": "the board's tuning cells (issue 41): analysis.board ranks by accuracy, not by a collapse label",
    "board": "the board's final cells (issue 41): analysis.board ranks by accuracy, not by a collapse label",
}


#: the fractions of the cut-off sensitivity (REWARD_FRACTION and ACCURACY_FRACTION together; 0.5: the rule)
CUTOFFS = (0.4, 0.5, 0.6)
PRIMARY_CUTOFF = 0.5


def label_all(results: Path, *, version: int = VERSION, fraction: float = PRIMARY_CUTOFF) -> pd.DataFrame:
    """:func:`analysis.collapse_rule.label_runs` (rule ``version``, both fractions at ``fraction``) over
    every grid directory under ``results`` but those :data:`NOT_RELABELLED` names."""
    frames = []
    rule = {"version": version, "reward_fraction": fraction, "accuracy_fraction": fraction}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for d in sorted(p for p in results.iterdir() if p.is_dir()):
            if d.name not in NOT_RELABELLED and any(d.rglob("run.json")):
                lab = label_runs(d, **rule)
                if len(lab):
                    frames.append(lab.assign(directory=d.name))
    return pd.concat(frames, ignore_index=True)


def grid_counts(labels: pd.DataFrame) -> pd.DataFrame:
    """Per results directory: records, runs counted once, old and new failures, changes and why."""
    rows = []
    for d, g in labels.groupby("directory", sort=False):
        u = sr.unique_runs(g)
        changed = u[u["old"] != u["failed"]]
        rows.append(
            {
                "directory": d,
                "records": len(g),
                "runs": len(u),
                "old_failed": int(u["old"].sum()),
                "new_failed": int(u["failed"].sum()),
                "changed": len(changed),
                "why": ", ".join(f"{k or '-'} {v}" for k, v in changed["reasons"].value_counts().items()),
                "R_not_judged": int((~u["judged"]).sum()),
                "stable_below_half": int((~u["failed"] & u["A"]).sum()),
            }
        )
    return pd.DataFrame(rows)


def eta_tables(runs: pd.DataFrame) -> pd.DataFrame:
    """η_max and brackets per correction and S: before (old labels, nominal η) and after (new labels,
    nominal and effective η), and the sensitivity labels on the nominal axis."""
    parts = [sr.eta_brackets(runs, label="old").assign(label="old")]
    parts += [
        sr.eta_brackets(runs, label="failed", effective=e).assign(label="failed") for e in (False, True)
    ]
    parts += [sr.eta_brackets(runs, label=k).assign(label=k) for k in ("R", "A", "A_verified")]
    out = pd.concat(parts, ignore_index=True)
    out.insert(1, "name", out["correction"].map(short))
    return out


def slopes(
    runs: pd.DataFrame, table: pd.DataFrame, n_boot: int, labels: tuple[str, ...] = ("old", "failed")
) -> list[dict]:
    """Per correction, label (of ``labels``) and axis: the slope, its grid-resolution and bootstrap
    intervals, the verdict (pre-registered wording; ``wording`` without the note of the split cells,
    ``split_S``) and the two-constraint fit min(a/S, b) (nominal η)."""
    out = []
    for (corr, label, axis), g in table.groupby(["correction", "label", "lr_axis"]):
        if label not in labels:
            continue
        si = sr.slope_intervals(g)
        boot = sr.bootstrap_slope(runs, corr, label=label, effective=axis == "effective", n_boot=n_boot)
        fit = st.fit_eta_max(g[["S", "eta_max"]]) if axis == "nominal" else {}
        wording = sr.slope_verdict((si["grid_lo"], si["grid_hi"]), boot["ci"])
        split = sorted(int(s) for s in g.loc[(g["S"] >= 1) & g["split"], "S"])
        note = f" (one seed decides the bracket at S = {', '.join(map(str, split))})" if split else ""
        out.append(
            {
                "correction": short(corr),
                "label": label,
                "axis": axis,
                **si,
                "boot_lo": boot["ci"][0],
                "boot_hi": boot["ci"][1],
                "verdict": wording + note,
                "wording": wording,
                "split_S": split,
                **{k: fit.get(k, math.nan) for k in ("a", "b", "S_knee")},
            }
        )
    return out


def comparisons(table: pd.DataFrame) -> list[dict]:
    """Each correction against the coupled clip at every S, on the new labels (effective η for the
    LR-scaling arm, nominal for the others), by bracket: raises / lowers / not separable."""
    new = table[table["label"] == "failed"]
    scaled = {c for c in new["correction"] if "ess_lr=sqrt" in c}
    axis = new[(new["lr_axis"] == "effective") == new["correction"].isin(scaled)]
    coupled = next(c for c in axis["correction"].unique() if short(c) == "coupled clip")
    return [
        {"correction": short(c), "S": int(s), "vs coupled clip": sr.separable(axis, c, coupled, s)}
        for c in sorted(axis["correction"].unique())
        if c != coupled
        for s in sorted(axis["S"].unique())
    ]


def _fmt(x: float) -> str:
    """2.4e-4 style; 0 (censored below) as —, inf (censored above) as ∞."""
    if x == 0:
        return "—"
    if math.isinf(x):
        return "∞"
    mant, exp = f"{x:.1e}".split("e")
    return f"{mant}e{int(exp)}"


def eta_markdown(table: pd.DataFrame, label: str, axis: str) -> list[str]:
    """One markdown table: per correction, η_max [bracket] at each S (S = 0 once, shared)."""
    t = table[(table["label"] == label) & (table["lr_axis"] == axis)]
    ss = sorted(t["S"].unique())
    lines = ["| correction | " + " | ".join(f"S = {s}" for s in ss) + " |", "|---" * (len(ss) + 1) + "|"]
    for name, g in t.groupby("name", sort=False):
        cells = []
        for r in g.sort_values("S").itertuples():
            mark = "≤ " if r.censored == "below" else "≥ " if r.censored == "above" else ""
            shared = f" (one cell for {r.shared} corrections)" if r.shared > 1 else ""
            split = " *" if r.split else ""
            cells.append(f"{mark}{_fmt(r.eta_max)} [{_fmt(r.lo)}, {_fmt(r.hi)}]{split}{shared}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def identity_lines(runs: pd.DataFrame) -> list[str]:
    """How the S = 0 records of the corrections repeat one another (rule page: S = 0 counted once)."""
    s0 = runs[runs["S"] == 0]
    return [
        f"S = 0: {len(s0)} records ({s0['correction'].nunique()} corrections × η × seeds) are "
        f"{s0.groupby(['lr', 'seed']).ngroups} on-policy runs, counted once. "
        f"{len(s0) - s0['fingerprint'].nunique()} of the {len(s0)} records repeat another record's training reward "
        f"in every round and its test completions byte for byte ({s0['fingerprint'].nunique()} distinct); "
        f"identical in every logged number (losses and diagnostics too): "
        f"{len(s0) - s0['fingerprint_full'].nunique()} (the coupled clip's loss rounds differently in the 8th digit)."
    ]


def reward_only_lines(u: pd.DataFrame) -> list[str]:
    """The failed runs whose accuracy is intact (R alone fired): the reward rule's judgement only."""
    r_only = u[u["failed"] & ~u["A"] & ~u["C"]]
    lines = [
        f"Failed by the reward condition alone (flexible accuracy at least half the base's): {len(r_only)} run(s)."
    ]
    for r in r_only.itertuples():
        lines.append(
            f"- {r.directory} {r.run_id}: {short(r.correction)}, S = {r.S}, η = {_fmt(r.lr)}, seed {r.seed}; "
            f"last window {r.last:.3f} < 0.5 × peak {r.peak:.3f}; test strict {r.accuracy:.3f}, flexible "
            f"{r.accuracy_flexible:.3f} (base {r.base_accuracy_flexible:.3f}); old rule: "
            f"{'collapsed' if r.old else 'stable'}"
        )
    return lines


def study_lines(u: pd.DataFrame, records: int) -> list[str]:
    """The staleness study's runs (counted once) under the old rule and the new, and the changes either way."""
    up, down = u[~u["old"] & u["failed"]], u[u["old"] & ~u["failed"]]
    cleared = ", ".join(f"{r.run_id} (S = {r.S}, η = {_fmt(r.lr)}, seed {r.seed})" for r in down.itertuples())
    return [
        f"Staleness grid: {records} records, {len(u)} runs once S = 0 is counted once; old rule "
        f"{int((~u['old']).sum())} stable, new rule {int((~u['failed']).sum())} stable; "
        f"{len(up)} runs change from stable to failed ({up['reasons'].value_counts().to_dict()}), "
        f"{len(down)} from failed (the engine's flag) to stable{': ' + cleared if len(down) else ''}."
    ]


def slope_markdown(rows: list[dict]) -> str:
    """The slope table with readable numbers."""
    lines = [
        "| correction | labels | η axis | slope | grid interval | bootstrap | b | S_knee | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        grid = f"[{r['grid_lo']:+.2f}, {r['grid_hi']:+.2f}]".replace("inf", "∞")
        fit = (_fmt(r["b"]), f"{r['S_knee']:.1f}") if math.isfinite(r["b"]) else ("", "")
        lines.append(
            f"| {r['correction']} | {r['label']} | {r['axis']} | {r['slope']:+.2f} | {grid} | "
            f"[{r['boot_lo']:+.2f}, {r['boot_hi']:+.2f}] | {fit[0]} | {fit[1]} | {r['verdict']} |"
        )
    return "\n".join(lines)


def markdown(
    counts: pd.DataFrame, table: pd.DataFrame, slope_rows: list[dict], comps: list[dict], runs: pd.DataFrame
) -> str:
    """The README of the relabelling output."""
    u = sr.unique_runs(runs)
    lines = [
        "# The staleness study relabelled by the pre-registered collapse rule",
        "",
        "Written by `python -m analysis.relabel_staleness` from the committed records only; the rule is "
        f"`docs/collapse_rule.md`, version {VERSION} (the reward window counts prompts: W = max(4, ⌈64 / B_p⌉) "
        f"rounds), fractions {PRIMARY_CUTOFF}. 'New rule' below is this version; version 2's labels and "
        "the cut-offs 0.4 and 0.6 are at the end. Units: a run (one seed) is the unit of every count; η_max "
        "comes from the share of seeds stable per (S, η) cell.",
        "",
        "## Every online record",
        "",
        counts.to_markdown(index=False),
        "",
        *study_lines(u, len(runs)),
        "",
        *identity_lines(runs),
        "",
        *reward_only_lines(u),
        "",
    ]
    for label, axis, title in (
        ("old", "nominal", "Before: old labels, nominal η"),
        ("failed", "nominal", "After: new labels, nominal η"),
        ("failed", "effective", "After: new labels, effective η (mean √ESS-scaled step)"),
    ):
        lines += [
            f"## {title}",
            "",
            "η_max [bracket on the grid; — = below the grid, ∞ = above; * = a bracketing "
            "cell is split 1/2, so one seed decides the bracket]",
            "",
        ]
        lines += eta_markdown(table, label, axis) + [""]
    lines += [
        "## Slope of log η_max in log S (S ≥ 1)",
        "",
        "Slope: least squares over S = 1, 2, 4, 8; *grid*: the "
        "extreme slopes with each η_max anywhere in its bracket; *bootstrap*: 95% percentile interval over "
        "seeds resampled within cells; b: the on-policy ceiling and S_knee = a/b of min(a/S, b) (nominal η "
        "only). Unit: seeds, within (S, η) cells.",
        "",
        slope_markdown(slope_rows),
        "",
        "## Corrections against the coupled clip (new labels, by bracket)",
        "",
        pd.DataFrame(comps).pivot(index="correction", columns="S", values="vs coupled clip").to_markdown(),
        "",
    ]
    lines += ["## Sensitivity (nominal η)", ""]
    for label in ("R", "A", "A_verified"):
        lines += [f"### {LABELS[label]}", ""] + eta_markdown(table, label, "nominal") + [""]
    return "\n".join(lines)


def study_runs(labels: pd.DataFrame) -> pd.DataFrame:
    """The staleness study's records (the grids of :data:`STUDY`: the study and the seeds added to it,
    issue 27.1), each correction under one name."""
    runs = labels[labels["directory"].isin(STUDY)]
    return runs.assign(correction=runs["arm"].map(sr.canonical_correction))


KEY = ["directory", "run_id"]
#: the columns of ``version_changes.csv``
CHANGE_COLUMNS = [
    *("directory", "grid", "run_id", "arm", "S", "lr", "seed", "B_p", "n", "rounds"),
    *("window_v2", "window_v3", "label_v2", "label_v3", "reasons_v2", "reasons_v3", "old"),
    *("peak_v2", "last_v2", "peak_v3", "last_v3", "accuracy_flexible", "base_accuracy_flexible"),
]


def versions_side_by_side(v2: pd.DataFrame, v3: pd.DataFrame) -> pd.DataFrame:
    """Every record with both versions' window, label, reasons and reward windows (``*_v2``, ``*_v3``),
    ``label_v2``/``label_v3`` in words and ``changed`` (the labels differ)."""
    kept = ["window", "failed", "reasons", "peak", "last", "judged"]
    both = v3.merge(v2[KEY + kept], on=KEY, suffixes=("_v3", "_v2"), validate="one_to_one")
    words = {True: "failed", False: "stable"}
    return both.assign(
        label_v2=both["failed_v2"].map(words),
        label_v3=both["failed_v3"].map(words),
        changed=both["failed_v2"] != both["failed_v3"],
    )


def version_counts(both: pd.DataFrame) -> pd.DataFrame:
    """Per results directory: records, runs (counted once), the windows (v2 → v3), failures under each
    version, the runs whose label changed (either way) and those whose reasons changed, label kept."""
    rows = []
    for d, g in both.groupby("directory", sort=False):
        u = sr.unique_runs(g)
        pairs = sorted(set(zip(g["window_v2"], g["window_v3"])), reverse=True)
        rows.append(
            {
                "directory": d,
                "records": len(g),
                "runs": len(u),
                "window v2 → v3": ", ".join(f"{a} → {b}" for a, b in pairs),
                "failed_v2": int(u["failed_v2"].sum()),
                "failed_v3": int(u["failed_v3"].sum()),
                "changed": int(u["changed"].sum()),
                "to_failed": int((u["changed"] & u["failed_v3"]).sum()),
                "to_stable": int((u["changed"] & u["failed_v2"]).sum()),
                "changed_records": int(g["changed"].sum()),
                "reasons_only": int((~u["changed"] & (u["reasons_v2"] != u["reasons_v3"])).sum()),
            }
        )
    return pd.DataFrame(rows)


def study_version_lines(both: pd.DataFrame) -> list[str]:
    """What version 3 does to the staleness study's labels (the rule page expected nothing: erratum)."""
    study = sr.unique_runs(both[both["directory"].isin(STUDY)])
    cells = ", ".join(f"B_p = {a}, n = {b}" for a, b in sorted(set(zip(study["B_p"], study["n"]))))
    windows = ", ".join(f"{a} → {b}" for a, b in sorted(set(zip(study["window_v2"], study["window_v3"]))))
    moved = study[study["changed"]]
    which = ", ".join(f"{r.run_id} {r.label_v2} → {r.label_v3}" for r in moved.itertuples()) or "none"
    return [
        f"The staleness study ({len(study)} runs counted once; {cells}): window {windows} rounds; "
        f"{len(moved)} label(s) change ({which}); {int(study['failed_v2'].sum())} runs failed under "
        f"version 2, {int(study['failed_v3'].sum())} under version 3. The rule page's version 3 paragraph "
        "expected W = 4 and no change here (it took B_p = 16); its erratum says why the formula is "
        "applied as written."
    ]


def versions_markdown(counts: pd.DataFrame, both: pd.DataFrame) -> list[str]:
    """The README section on versions 2 and 3: the counts per directory and every changed record."""
    changed = both.loc[both["changed"], CHANGE_COLUMNS]
    total = counts[["records", "runs", "changed", "changed_records"]].sum()
    return [
        "## Version 2 against version 3 (the window)",
        "",
        "Version 3 (the primary labels) counts the reward window in prompts, W = max(4, ⌈64 / B_p⌉) "
        "rounds; version 2 counted rollouts, W = max(4, ⌈256 / (B_p · n)⌉). Everything else is the same. "
        f"Over every online record (the board's grids left out: `NOT_RELABELLED`): {total['records']} records, {total['runs']} runs (counted once); "
        f"{total['changed']} runs ({total['changed_records']} records) change label. Per directory "
        "(runs counted once; *reasons_only*: the same label for other reasons):",
        "",
        counts.to_markdown(index=False),
        "",
        *study_version_lines(both),
        "",
        f"Every record whose label changed ({len(changed)}; `version_changes.csv`):",
        "",
        changed.drop(columns=["arm", "grid"]).to_markdown(index=False, floatfmt=".3g")
        if len(changed)
        else "(none)",
        "",
    ]


def _slope_on(row: dict) -> str:
    return f"slope of log η_max in log S: {row['correction']}, {row['axis']} η"


def _comparison_on(row: dict) -> str:
    return f"{row['correction']} against the coupled clip at S = {row['S']}"


def primary_agrees(verdicts: pd.DataFrame, slope_rows: list[dict], comps: list[dict]) -> bool:
    """Whether the cut-off study at the rule's own fraction gives the primary verdicts, one for one."""
    at = verdicts[verdicts["fraction"] == PRIMARY_CUTOFF]
    mine = {_slope_on(r): r["wording"] for r in slope_rows if r["label"] == "failed"}
    mine |= {_comparison_on(c): c["vs coupled clip"] for c in comps}
    return dict(zip(at["verdict on"], at["verdict"])) == mine


def cutoff_study(runs_by_cutoff: dict[float, pd.DataFrame], n_boot: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per fraction of the rule (both at once): the new labels' η_max tables (nominal and effective η)
    and every verdict drawn from them: the slope's (pre-registered wording, with its intervals) and each
    correction against the coupled clip. Returns (verdicts, η_max tables), both with ``fraction``."""
    verdicts, tables = [], []
    for f, runs in runs_by_cutoff.items():
        parts = [sr.eta_brackets(runs, effective=e).assign(label="failed") for e in (False, True)]
        table = pd.concat(parts, ignore_index=True)
        table.insert(1, "name", table["correction"].map(short))
        tables.append(table.assign(fraction=f))
        for r in slopes(runs, table, n_boot, labels=("failed",)):
            numbers = {k: r[k] for k in ("slope", "grid_lo", "grid_hi", "boot_lo", "boot_hi", "split_S")}
            where = {"correction": r["correction"], "axis": r["axis"], "S": math.nan}
            verdicts.append(
                {"fraction": f, "verdict on": _slope_on(r), **where, "verdict": r["wording"], **numbers}
            )
        for c in comparisons(table):
            where = {"correction": c["correction"], "axis": "", "S": c["S"]}
            verdict = {"verdict": c["vs coupled clip"]}
            verdicts.append({"fraction": f, "verdict on": _comparison_on(c), **where, **verdict})
    return pd.DataFrame(verdicts), pd.concat(tables, ignore_index=True)


def cutoff_markdown(verdicts: pd.DataFrame, tables: pd.DataFrame, failed: pd.DataFrame) -> list[str]:
    """The README section on the cut-off sensitivity: verdict × fraction, the slopes, η_max at 0.4 and
    0.6, and the failures per directory at each fraction."""
    order = list(dict.fromkeys(verdicts["verdict on"]))
    grid = verdicts.pivot(index="verdict on", columns="fraction", values="verdict").loc[order]
    grid["the same at all three"] = (grid.nunique(axis=1) == 1).map({True: "yes", False: "**no**"})
    slope = verdicts.dropna(subset=["slope"])
    lines = [
        "## Cut-off sensitivity (issue 40, item 3)",
        "",
        "The rule's two fractions (REWARD_FRACTION and ACCURACY_FRACTION, 0.5 as pre-registered) set "
        "together to 0.4 and 0.6, version 3's window; every verdict above that depends on the labels, "
        "recomputed (0.5 is the primary verdict). Slopes: grid-resolution and 95% bootstrap intervals "
        "(unit: seeds within (S, η) cells).",
        "",
        grid.rename(columns=lambda c: f"{c:.1f}" if isinstance(c, float) else c).to_markdown(),
        "",
        "| fraction | slope of | slope | grid interval | bootstrap | split cells (S) |",
        "|---|---|---|---|---|---|",
    ]
    for r in slope.itertuples():
        grid_iv = f"[{r.grid_lo:+.2f}, {r.grid_hi:+.2f}]".replace("inf", "∞")
        lines.append(
            f"| {r.fraction:.1f} | {r.correction}, {r.axis} η | {r.slope:+.2f} | {grid_iv} | "
            f"[{r.boot_lo:+.2f}, {r.boot_hi:+.2f}] | {', '.join(map(str, r.split_S)) or '—'} |"
        )
    lines += ["", "Failed runs (counted once) per directory at each fraction:", "", failed.to_markdown(), ""]
    for f in (c for c in CUTOFFS if c != PRIMARY_CUTOFF):
        for axis in ("nominal", "effective"):
            lines += [f"### η_max at fraction {f:.1f}, {axis} η", ""]
            lines += eta_markdown(tables[tables["fraction"] == f], "failed", axis) + [""]
    return lines


def check(labels: pd.DataFrame) -> pd.DataFrame:
    """The rule page's checks on the primary labels; returns their per-directory counts."""
    counts = grid_counts(labels)
    assert counts["stable_below_half"].sum() == 0, "a stable run ends below half its base's flexible accuracy"
    scaled = labels[labels["ess_lr"] == "none"]
    assert (scaled["step_scale"].dropna() == 1.0).all(), "lr_effective != the scheduled lr without ess_lr"
    return counts


def failed_by_cutoff(labels: dict[float, pd.DataFrame]) -> pd.DataFrame:
    """Failed runs (counted once) per directory (rows) at each fraction (columns)."""
    cols = {
        f"{f:.1f}": lab.groupby("directory", sort=False).apply(
            lambda g: int(sr.unique_runs(g)["failed"].sum()), include_groups=False
        )
        for f, lab in labels.items()
    }
    return pd.DataFrame(cols).rename_axis("directory")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--out", type=Path, default=Path("results/staleness_relabelled"))
    ap.add_argument("--boot", type=int, default=2000)
    args = ap.parse_args()
    at = {f: label_all(args.results, fraction=f) for f in CUTOFFS}  # version 3
    labels = at[PRIMARY_CUTOFF]
    both = versions_side_by_side(label_all(args.results, version=2), labels)
    counts, vcounts = check(labels), version_counts(both)
    runs = study_runs(labels)
    table = eta_tables(runs)
    slope_rows, comps = slopes(runs, table, args.boot), comparisons(table)
    verdicts, cut_tables = cutoff_study({f: study_runs(lab) for f, lab in at.items()}, args.boot)
    assert primary_agrees(verdicts, slope_rows, comps), "fraction 0.5 gives other verdicts than the primary"
    failed = failed_by_cutoff(at)
    args.out.mkdir(parents=True, exist_ok=True)
    labels.to_csv(args.out / "labels.csv", index=False)
    table.to_csv(args.out / "eta_max.csv", index=False)
    both.loc[both["changed"], CHANGE_COLUMNS].to_csv(args.out / "version_changes.csv", index=False)
    verdicts.to_csv(args.out / "cutoff_verdicts.csv", index=False)
    cut_tables.to_csv(args.out / "cutoff_eta_max.csv", index=False)
    summary = {
        "rule": {"version": VERSION, "reward_fraction": PRIMARY_CUTOFF, "accuracy_fraction": PRIMARY_CUTOFF},
        "counts": counts.to_dict("records"),
        "slopes": slope_rows,
        "comparisons": comps,
        "shared_S0": sr.shared_runs(runs[runs["S"] == 0]).drop(columns="S").to_dict("records"),
        "versions": vcounts.to_dict("records"),
        "cutoff_verdicts": verdicts.to_dict("records"),
        "cutoff_failed": failed.reset_index().to_dict("records"),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    text = "\n".join(
        [markdown(counts, table, slope_rows, comps, runs), *versions_markdown(vcounts, both)]
        + cutoff_markdown(verdicts, cut_tables, failed)
    )
    (args.out / "README.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
