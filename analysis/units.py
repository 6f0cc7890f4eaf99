"""Analysis that knows its units (issue 27.5): identical arms counted once, and every test's unit of
replication named.

* :func:`duplicate_arms`: arms of one group (a scale) whose records are the same run, seed for seed:
  on every shared seed at least ``min_agreement`` (0.99) of their test completions (``eval.jsonl``) are
  the same text (without completions: their metric is equal). Completions, not correctness: two
  arms that never flip the format are all wrong on every problem, and different. On the committed
  records the same-algorithm pairs share 99.2-100% of completions per seed (CISPO and SGRPO, one
  algorithm on-policy: every ratio is 1 and their gradients coincide; Cal-DPO and SPPO at β = 1e-3,
  where Cal-DPO's squared terms are half SPPO's loss and dominate its logistic term, and Adam
  ignores the factor); the closest pair of different algorithms shares 98% (IPO and SimPO, tiny-m).
* :func:`drop_duplicate_arms`: the runs with each duplicate arm left out (one arm of each set kept),
  so spreads of method means and η² do not count one algorithm twice; :func:`duplicate_note` says so.
* :data:`UNITS`: the unit of replication of each test the report and the study summaries run: seeds
  (each run one observation: seed noise is in the test) or problems (each test problem one
  observation: seed noise is not).
"""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.stats import by_arm

#: test -> its unit of replication.
UNITS = {
    "welch": "seeds (Welch's t over the seed means of each arm)",
    "bootstrap_ci": "seeds (resampled within each arm)",
    "family_spread": "seeds (bootstrap within each method; permutation of method labels over runs)",
    "leverage": "runs (η² over one value per seed; descriptive, no test)",
    "rank_inversions": "methods (Kendall's τ over the methods' mean ranks)",
    "mcnemar": "problems (seeds pooled per problem: seed noise is not in the p-value)",
    "paired_bootstrap": "problems (resampled test problems: seed noise is not in the interval)",
    "wilcoxon": "problems (validation problems, runs averaged per problem)",
    "sign_test": "matched pairs of cells (each (subset, B, seed) pair one observation)",
    "eta_max_bootstrap": "seeds (resampled within each (S, η) cell)",
}
DUPLICATE_COLUMNS = ["kept", "duplicate", "seeds", "min_agreement", "identical", "run_ids"]


def _completions(run_dir: str | Path) -> dict[tuple[str, str], str | None]:
    """(split, id) -> the run's test completion (``eval.jsonl``; empty when the run has none)."""
    path = Path(run_dir) / "eval.jsonl"
    if not path.is_file():
        return {}
    return _read_completions(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=1024)
def _read_completions(path: str, mtime_ns: int) -> dict[tuple[str, str], str | None]:
    """:func:`_completions` of one file version (cached by path and modification time)."""
    rows = (json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip())
    return {(str(r.get("split")), str(r.get("id"))): r.get("completion", r.get("correct")) for r in rows}


def _prepare(arm: pd.DataFrame, metric: str) -> dict[int, tuple[tuple, np.ndarray | None, float]]:
    """seed -> (problem keys, completions in key order, ``metric``) of one arm's runs."""
    out = {}
    for r in arm.itertuples():
        comp = _completions(r.path) if hasattr(r, "path") and isinstance(r.path, str) else {}
        keys = tuple(sorted(comp))
        out[r.seed] = (
            keys,
            np.array([comp[k] for k in keys], dtype=object) if comp else None,
            getattr(r, metric),
        )
    return out


def _pair(a: dict, b: dict) -> list[float]:
    """Per seed, the share of test problems whose completions two arms' runs share (runs without
    ``eval.jsonl``, or on other problems: 1.0 if their metric is equal, else 0.0)."""
    out = []
    for seed in sorted(a):
        (ka, ca, ma), (kb, cb, mb) = a[seed], b[seed]
        same = ca is not None and cb is not None and ka == kb
        out.append(float((ca == cb).mean()) if same else float(ma == mb))
    return out


def duplicate_arms(
    df: pd.DataFrame,
    *,
    by: tuple[str, ...] = ("scale", "lora"),
    metric: str = "accuracy",
    min_agreement: float = 0.99,
    prefer: tuple[str, ...] = ("sgrpo",),
) -> pd.DataFrame:
    """Per group of ``by``: each arm that repeats another (module doc), one row per duplicate with
    :data:`DUPLICATE_COLUMNS`: the arm ``kept`` (an arm of ``prefer`` if one is in the set, else the
    first by name), the ``duplicate``, the shared ``seeds``, the lowest per-seed agreement, whether
    every completion of every seed is the same (``identical``) and the duplicate's ``run_ids``. Two arms are
    compared only when they ran the same seeds (at least one)."""
    df, rows = by_arm(df), []
    cols = [c for c in by if c in df.columns]
    for key, sub in df.groupby(cols, sort=False) if cols else [((), df)]:
        arms = {m: g for m, g in sub.groupby("method")}
        prepared = {m: _prepare(g, metric) for m, g in arms.items()}
        parent = {m: m for m in arms}
        agree: dict[tuple[str, str], list[float]] = {}
        for a, b in itertools.combinations(sorted(arms), 2):
            if set(arms[a]["seed"]) != set(arms[b]["seed"]):
                continue
            values = _pair(prepared[a], prepared[b])
            if values and min(values) >= min_agreement:
                agree[(a, b)] = values
                parent[_root(parent, b)] = _root(parent, a)
        sets: dict[str, list[str]] = {}
        for m in sorted(arms):
            sets.setdefault(_root(parent, m), []).append(m)
        for members in (s for s in sets.values() if len(s) > 1):
            kept = next((m for m in members if m in prefer), members[0])
            for m in members:
                if m != kept:
                    pair = tuple(sorted((kept, m)))  # a member joined through another: its own agreement
                    values = agree.get(pair) or _pair(prepared[pair[0]], prepared[pair[1]]) or [np.nan]
                    rows.append(
                        {
                            **dict(zip(cols, key if isinstance(key, tuple) else (key,))),
                            "kept": kept,
                            "duplicate": m,
                            "seeds": len(arms[m]),
                            "min_agreement": float(np.min(values)),
                            "identical": bool(np.min(values) == 1.0),
                            "run_ids": sorted(arms[m]["run_id"]),
                        }
                    )
    return pd.DataFrame(rows, columns=[*cols, *DUPLICATE_COLUMNS])


def _root(parent: dict[str, str], m: str) -> str:
    while parent[m] != m:
        m = parent[m]
    return m


def drop_duplicate_arms(df: pd.DataFrame, duplicates: pd.DataFrame) -> pd.DataFrame:
    """``df`` without the runs of every duplicate arm of :func:`duplicate_arms` (one arm of each set
    stays): the table to compute spreads of method means and η² on."""
    dropped = {rid for ids in duplicates["run_ids"] for rid in ids}
    return df[~df["run_id"].isin(dropped)].reset_index(drop=True)


def merged_arms(duplicates: pd.DataFrame) -> dict[str, list[str]]:
    """The arm kept -> the arms it stands for, from :func:`duplicate_arms` (every group of ``by``)."""
    out: dict[str, list[str]] = {}
    for r in duplicates.itertuples():
        out.setdefault(r.kept, [])
        if r.duplicate not in out[r.kept]:
            out[r.kept].append(r.duplicate)
    return out


def merged_label(arm: str, merged: dict[str, list[str]]) -> str:
    """``arm``, with the arms it stands for (:func:`merged_arms`) named: "dpo (= ipo, simpo)"."""
    return f"{arm} (= {', '.join(merged[arm])})" if merged.get(arm) else arm


def duplicate_note(duplicates: pd.DataFrame, *, merged: bool = False) -> str | None:
    """One sentence per duplicate arm, for a report or a summary: what is reported once, and why
    (``merged``: the leaderboard too shows each set once, as the study scripts print it)."""
    if not len(duplicates):
        return None
    parts = []
    for r in duplicates.itertuples():
        where = f" at {r.scale}" if "scale" in duplicates.columns else ""
        how = (
            "identical test completions"
            if r.identical
            else f"≥ {100 * r.min_agreement:.1f}% of test completions identical"
        )
        parts.append(f"{r.duplicate} repeats {r.kept}{where} seed for seed ({how}, {r.seeds} seeds)")
    return (
        "; ".join(parts)
        + ". Each set counts once (as the arm it repeats) in method spreads and η²; "
        + ("so does the leaderboard." if merged else "the leaderboard keeps both rows.")
    )
