"""How much the choice of method matters on each task family: the reference study's third claim
(a 19.3-point spread on the trained task, 0.54 on MATH, 0.47 on general benchmarks), with intervals.

A family's score for a run is ``accuracy`` for the trained task (``in_domain``) and the mean of its
lm-eval tasks' headline numbers for the others (``domain_<family>``, :func:`analysis.runs.domain_metrics`).
Within a scale, over the methods (arms):

* ``spread`` = 100 x (max - min) of the method means over seeds, in points (the study's statistic);
* ``ci_low``/``ci_high``: a percentile bootstrap interval of the spread, resampling seeds within each
  method (``n_boot`` replicates);
* ``null_spread``: the median spread when the method labels are permuted among the runs (what the
  spread is when methods do not matter at all: the max - min of noisy means is never 0), and ``p``,
  the share of permutations whose spread reaches the observed one (with the +1 correction);
* ``best``/``worst``, ``base`` (the untrained base's score), ``chance``.

A spread is evidence that methods differ on a family only when ``p`` is small; a spread near
``null_spread`` is seed noise whatever its size.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.stats import _cols, _groups, _require, by_arm

DOMAIN_COLUMNS = [
    "family",
    "n_methods",
    "n_runs",
    "spread",
    "ci_low",
    "ci_high",
    "null_spread",
    "p",
    "best",
    "worst",
    "base",
    "chance",
]


def domains(df: pd.DataFrame, per_task: bool = False) -> list[tuple[str, str]]:
    """``(family, score column)`` pairs present in ``df``: ``in_domain`` first, then each ``domain_*``, then
    (``per_task``) each lm-eval task on its own (``lmeval_<task>``, named by the task)."""
    out = [("in_domain", "accuracy")] if "accuracy" in df.columns else []
    for prefix in ("domain_", "lmeval_") if per_task else ("domain_",):
        for col in df.columns:
            if col.startswith(prefix) and not col.endswith(("_chance", "_n")) and df[col].notna().any():
                out.append((col.removeprefix(prefix), col))
    return out


def _spread(values: np.ndarray, groups: np.ndarray, n_groups: int) -> float:
    sums = np.bincount(groups, weights=values, minlength=n_groups)
    means = sums / np.bincount(groups, minlength=n_groups)
    return 100 * float(means.max() - means.min())


def family_spread(
    df: pd.DataFrame,
    by: str | tuple[str, ...] = ("scale",),
    *,
    n_boot: int = 2000,
    n_perm: int = 2000,
    seed: int = 0,
    per_task: bool = False,
) -> pd.DataFrame:
    """One row per group of ``by`` and task family: :data:`DOMAIN_COLUMNS` (see the module doc); with
    ``per_task`` also one per lm-eval task. Methods with no finite score on a family are left out of it;
    a family with fewer than two methods is skipped."""
    cols = _cols(by)
    df = by_arm(df)
    _require(df, [*cols, "method"])
    rng, rows = np.random.default_rng(seed), []
    for key, sub in _groups(df, cols):
        for family, col in domains(sub, per_task):
            runs = sub[["method", col]].dropna()
            if runs["method"].nunique() < 2:
                continue
            codes, names = pd.factorize(runs["method"], sort=True)
            values, k = runs[col].to_numpy(float), len(names)
            observed = _spread(values, codes, k)
            members = [np.flatnonzero(codes == g) for g in range(k)]
            boot = [
                _spread(values[idx], codes[idx], k)
                for idx in (np.concatenate([rng.choice(m, len(m)) for m in members]) for _ in range(n_boot))
            ]
            null = np.array([_spread(values, rng.permutation(codes), k) for _ in range(n_perm)])
            means = runs.groupby("method")[col].mean()
            base_col, chance_col = f"base_{col}", (f"{col}_chance" if col != "accuracy" else "chance")
            rows.append(
                {
                    **dict(zip(cols, key)),
                    "family": family,
                    "n_methods": k,
                    "n_runs": len(runs),
                    "spread": observed,
                    "ci_low": float(np.percentile(boot, 2.5)),
                    "ci_high": float(np.percentile(boot, 97.5)),
                    "null_spread": float(np.median(null)),
                    "p": float((1 + (null >= observed - 1e-9).sum()) / (1 + n_perm)),
                    "best": means.idxmax(),
                    "worst": means.idxmin(),
                    "base": _first(sub, base_col),
                    "chance": _first(sub, chance_col),
                }
            )
    return pd.DataFrame(rows, columns=[*cols, *DOMAIN_COLUMNS])


def _first(df: pd.DataFrame, col: str) -> float | None:
    if col not in df.columns or not df[col].notna().any():
        return None
    return 100 * float(df[col].dropna().iloc[0])
