"""oxbench analysis: load run records and compute the statistics the report shows.

Everything here is a pure function over tidy pandas DataFrames:

* :mod:`analysis.runs`: :func:`load_runs`, :func:`load_failed`, :func:`load_problem_outcomes`,
  :func:`scale_order`.
* :mod:`analysis.stats`: seed-level :func:`summarize` and :func:`welch_vs_baseline` (with
  :func:`adjust_pvalues`); problem-level :func:`mcnemar`, :func:`paired_bootstrap`,
  :func:`paired_vs_baseline`; rankings :func:`rank_table`, :func:`rank_inversions`.
* :mod:`analysis.leverage`: :func:`leverage` (which factor moves the metric most) and
  :func:`task_leverage` (method spread in- vs out-of-distribution).
* :mod:`analysis.domains`: :func:`family_spread` (method spread per task family, with intervals).
* :mod:`analysis.report`: :func:`write_report` / :func:`render_report`, the self-contained HTML
  leaderboard behind ``oxbench report DIR``.
"""

from analysis.domains import family_spread
from analysis.leverage import eta_squared, leverage, task_leverage
from analysis.report import render_report, write_report
from analysis.runs import BadRecordWarning, load_failed, load_problem_outcomes, load_runs, scale_order
from analysis.stats import (
    adjust_pvalues,
    hedges_j,
    mcnemar,
    paired_bootstrap,
    paired_vs_baseline,
    rank_inversions,
    rank_table,
    summarize,
    welch,
    welch_vs_baseline,
)

__all__ = [
    "adjust_pvalues",
    "eta_squared",
    "family_spread",
    "hedges_j",
    "leverage",
    "load_failed",
    "load_problem_outcomes",
    "load_runs",
    "BadRecordWarning",
    "mcnemar",
    "paired_bootstrap",
    "paired_vs_baseline",
    "rank_inversions",
    "rank_table",
    "render_report",
    "scale_order",
    "summarize",
    "task_leverage",
    "welch",
    "welch_vs_baseline",
    "write_report",
]
