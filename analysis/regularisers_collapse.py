"""Do regularisers keep online runs from collapsing? From the records only (issue 27.4).

    python -m analysis.regularisers_collapse [results/regularisers_collapse] [--out DIR]

Every run is labelled failed or stable by the pre-registered rule (docs/collapse_rule.md,
``analysis.collapse_rule.label_runs``). Each arm (its ``loss.*`` settings, within a subset where the
grid has subsets) is compared with the unregularised arm (every ``loss.*`` setting 0): Fisher's exact
test on the failure counts and Welch's t on the final flexible accuracy, each Holm-adjusted over the
arms. Unit of replication: seeds. Writes ``README.md`` and ``summary.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import pandas as pd
from scipy import stats

from analysis.collapse_rule import label_runs
from analysis.stats import adjust_pvalues, welch


def arms(root: str) -> pd.DataFrame:
    """One row per run: its subset, its regulariser settings (``loss.*`` keys, as text), failed and the
    flexible accuracy at the end and of the base."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lab = label_runs(root)
    keys = [json.loads(a) for a in lab["arm"]]
    lab = lab.assign(
        subset=[k.get("data.subset", "all") for k in keys],
        setting=[", ".join(f"{n}={v}" for n, v in sorted(k.items()) if n.startswith("loss.")) for k in keys],
        plain=[all(v == 0 for n, v in k.items() if n.startswith("loss.")) for k in keys],
    )
    return lab[
        ["subset", "setting", "plain", "seed", "failed", "accuracy_flexible", "base_accuracy_flexible"]
    ]


def compare(runs: pd.DataFrame) -> list[dict]:
    """Per subset, each regularised arm against the unregularised one (module doc)."""
    rows = []
    for subset, sub in runs.groupby("subset"):
        ref = sub[sub["plain"]]
        for setting, g in sub[~sub["plain"]].groupby("setting"):
            table = [
                [int(g["failed"].sum()), int((~g["failed"]).sum())],
                [int(ref["failed"].sum()), int((~ref["failed"]).sum())],
            ]
            w = welch(g["accuracy_flexible"], ref["accuracy_flexible"])
            rows.append(
                {
                    "subset": subset,
                    "arm": setting,
                    "seeds": len(g),
                    "failed": table[0][0],
                    "reference_seeds": len(ref),
                    "reference_failed": table[1][0],
                    "fisher_p": float(stats.fisher_exact(table).pvalue),
                    "flexible": float(g["accuracy_flexible"].mean()),
                    "reference_flexible": float(ref["accuracy_flexible"].mean()),
                    "base_flexible": float(sub["base_accuracy_flexible"].mean()),
                    "welch_p": float(w["p"]) if pd.notna(w["p"]) else 1.0,
                }
            )
    for test in ("fisher_p", "welch_p"):
        for r, adj in zip(rows, adjust_pvalues([r[test] for r in rows], "holm")):
            r[test.replace("_p", "_holm")] = float(adj)
    return rows


def markdown(root: str, rows: list[dict]) -> str:
    lines = [
        f"# {Path(root).name}: regularisers against collapse",
        "",
        "Written by `python -m analysis.regularisers_collapse` from the records only. Failed = the "
        "pre-registered collapse rule (docs/collapse_rule.md). Each arm against the unregularised one: "
        "Fisher's exact test on the failure counts, Welch's t on the final flexible accuracy, Holm over the "
        "arms; unit: seeds.",
        "",
        "| subset | arm | failed / seeds | unregularised failed / seeds | Fisher p (Holm) | flexible | "
        "unregularised | base | Welch p (Holm) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['subset']} | {r['arm']} | {r['failed']} / {r['seeds']} | {r['reference_failed']} / "
        f"{r['reference_seeds']} | {r['fisher_p']:.2g} ({r['fisher_holm']:.2g}) | {r['flexible']:.3f} | "
        f"{r['reference_flexible']:.3f} | {r['base_flexible']:.3f} | {r['welch_p']:.2g} ({r['welch_holm']:.2g}) |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default="results/regularisers_collapse")
    ap.add_argument("--out", type=Path, default=Path("results/regularisers_collapse_analysis"))
    args = ap.parse_args()
    rows = compare(arms(args.root))
    text = markdown(args.root, rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / "README.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
