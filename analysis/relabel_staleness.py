"""Apply the pre-registered collapse rule (docs/collapse_rule.md) to every committed online record and
recompute η_max(S) of the staleness study from the new labels; no run is re-run.

    python -m analysis.relabel_staleness [--results results] [--out results/staleness_relabelled]
        [--boot 2000]

Writes under ``--out``: ``labels.csv`` (one row per online record of every grid: each condition of the
rule, the old and the new label, the step scale and the fingerprint), ``eta_max.csv`` (per correction
and S: η_max and its bracket, before and after, nominal and effective η), ``summary.json`` (every
number the markdown quotes) and ``README.md`` (the summary results/README.md cites). Prints the
README.
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
from analysis.collapse_rule import label_runs

SHORT = {"none": "coupled clip", "tis_token": "token TIS (cap 2)", "decoupled": "decoupled + √ESS LR"}
LABELS = {
    "old": "old rule (first window)",
    "failed": "new rule (R or A or C or N)",
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
)


def label_all(results: Path) -> pd.DataFrame:
    """:func:`analysis.collapse_rule.label_runs` over every grid directory under ``results``."""
    frames = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for d in sorted(p for p in results.iterdir() if p.is_dir()):
            if any(d.rglob("run.json")):
                lab = label_runs(d)
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


def slopes(runs: pd.DataFrame, table: pd.DataFrame, n_boot: int) -> list[dict]:
    """Per correction, label and axis: the slope, its grid-resolution and bootstrap intervals, the
    verdict (pre-registered wording) and the two-constraint fit min(a/S, b) (nominal η)."""
    out = []
    for (corr, label, axis), g in table.groupby(["correction", "label", "lr_axis"]):
        if label not in ("old", "failed"):
            continue
        si = sr.slope_intervals(g)
        boot = sr.bootstrap_slope(runs, corr, label=label, effective=axis == "effective", n_boot=n_boot)
        fit = st.fit_eta_max(g[["S", "eta_max"]]) if axis == "nominal" else {}
        verdict = sr.slope_verdict((si["grid_lo"], si["grid_hi"]), boot["ci"])
        split = sorted(int(s) for s in g.loc[(g["S"] >= 1) & g["split"], "S"])
        if split:
            verdict += f" (one seed decides the bracket at S = {', '.join(map(str, split))})"
        out.append(
            {
                "correction": short(corr),
                "label": label,
                "axis": axis,
                **si,
                "boot_lo": boot["ci"][0],
                "boot_hi": boot["ci"][1],
                "verdict": verdict,
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
    changed = u[~u["old"] & u["failed"]]
    lines = [
        "# The staleness study relabelled by the pre-registered collapse rule",
        "",
        "Written by `python -m analysis.relabel_staleness` from the committed records only; the rule is "
        "`docs/collapse_rule.md`. Units: a run (one seed) is the unit of every count; η_max comes from the "
        "share of seeds stable per (S, η) cell.",
        "",
        "## Every online record",
        "",
        counts.to_markdown(index=False),
        "",
        f"Staleness grid: {len(runs)} records, {len(u)} runs once S = 0 is counted once; old rule "
        f"{int((~u['old']).sum())} stable, new rule {int((~u['failed']).sum())} stable; "
        f"{len(changed)} runs change from stable to failed ({changed['reasons'].value_counts().to_dict()}), "
        f"none from failed to stable.",
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--out", type=Path, default=Path("results/staleness_relabelled"))
    ap.add_argument("--boot", type=int, default=2000)
    args = ap.parse_args()
    labels = label_all(args.results)
    counts = grid_counts(labels)
    assert counts["stable_below_half"].sum() == 0, "a stable run ends below half its base's flexible accuracy"
    scaled = labels[labels["ess_lr"] == "none"]
    assert (scaled["step_scale"].dropna() == 1.0).all(), "lr_effective != the scheduled lr without ess_lr"
    runs = labels[labels["directory"].isin(STUDY)]  # the study and the seeds added to it (issue 27.1)
    runs = runs.assign(correction=runs["arm"].map(sr.canonical_correction))  # one name per correction
    table = eta_tables(runs)
    slope_rows, comps = slopes(runs, table, args.boot), comparisons(table)
    args.out.mkdir(parents=True, exist_ok=True)
    labels.to_csv(args.out / "labels.csv", index=False)
    table.to_csv(args.out / "eta_max.csv", index=False)
    summary = {
        "counts": counts.to_dict("records"),
        "slopes": slope_rows,
        "comparisons": comps,
        "shared_S0": sr.shared_runs(runs[runs["S"] == 0]).drop(columns="S").to_dict("records"),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    text = markdown(counts, table, slope_rows, comps, runs)
    (args.out / "README.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
