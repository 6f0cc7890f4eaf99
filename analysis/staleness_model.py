r"""The staleness curve read whole (issue 40, item 3; pre-registered in ``docs/staleness_model.md``).

From the records only: every finished coupled-clip SGRPO run of the staleness study (delayed source, no
correction, no ESS-scaled LR, tiny-m, 40 rounds) at a learning rate where S = 0 ran with two seeds or
more. The outcome is each run's final flexible correctness on each test problem (``eval.jsonl``):

.. math:: y_{rq} = \mu + \alpha_{\eta(r)} + \gamma_{S(r)} + u_r + b_q + e_{rq},\quad \gamma_0 = 0,

η and S categorical. :func:`fit` is ordinary least squares on the run means; :func:`bootstrap` the
pigeonhole bootstrap (problems resampled once for all runs, runs resampled within their (S, η) cell),
whose percentile intervals and two-sided p-values (Holm over the four S) give the verdicts worded in
the pre-registration. :func:`mechanism` is the secondary, exploratory table (clip fraction and
behaviour KL per (S, η)).

    python -m analysis.staleness_model results [--boot 2000] [--out results/staleness_model]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.crossed import outcome_matrix
from analysis.runs import _records, load_problem_outcomes, read_metrics
from analysis.stats import adjust_pvalues

LAGS = (1, 2, 4, 8)


def _plain_loss(rec: dict) -> bool:
    """No loss setting beyond the correction's (a KL or entropy regulariser set: another arm)."""
    return set((rec.get("config") or {}).get("loss") or {}) <= {"is_correction", "is_cap"}


def _in_study(rec: dict) -> bool:
    """The pre-registered record rule (docs/staleness_model.md)."""
    cfg = rec.get("config") or {}
    online, loss = cfg.get("online") or {}, cfg.get("loss") or {}
    return (
        rec.get("status") == "finished"
        and rec.get("method") == "sgrpo"
        and online.get("source") == "delayed"
        and loss.get("is_correction", "none") == "none"
        and online.get("ess_lr", "none") == "none"
        and cfg.get("model", {}).get("name") == "tiny-m"
        and online.get("rounds") == 40
    )


def load(root: str | Path, *, plain_loss: bool = False) -> tuple[pd.DataFrame, np.ndarray]:
    """The study's runs (run_id, S, lr, seed, dir) and their (runs, problems) flexible outcomes, on the
    problems every run has; runs at an η where S = 0 has fewer than two seeds are left out.
    ``plain_loss``: also leave out runs with a loss setting beyond the correction's (the post-hoc
    sensitivity analysis: the pre-registered rule let ``regularisers_collapse``'s S = 0 arms in)."""
    return select(list(_records(root)), load_problem_outcomes(root), plain_loss=plain_loss)


def select(
    records: list[dict], outcomes: pd.DataFrame, *, plain_loss: bool = False
) -> tuple[pd.DataFrame, np.ndarray]:
    """:func:`load` on records and outcomes already read (the primary and the sensitivity analysis read
    them once)."""
    recs = [r for r in records if _in_study(r) and (_plain_loss(r) or not plain_loss)]
    runs = pd.DataFrame(
        [
            {
                "run_id": r["run_id"],
                "S": r["config"]["online"].get("staleness", 0),
                "lr": r["config"]["train"]["lr"],
                "seed": r["seed"],
                "dir": str(r["_dir"]),
            }
            for r in recs
        ]
    ).drop_duplicates("run_id")
    reference = runs[runs["S"] == 0].groupby("lr")["seed"].nunique()
    runs = runs[runs["lr"].isin(reference[reference >= 2].index)].reset_index(drop=True)
    table = outcome_matrix(runs, outcomes, "accuracy_flexible")
    if table is None:
        raise ValueError("a run of the study has no per-problem flexible outcomes (eval.jsonl)")
    return runs, table.loc[runs["run_id"]].to_numpy()


def _design(runs: pd.DataFrame) -> np.ndarray:
    """Intercept, one column per η level but the first, one per S in :data:`LAGS` present."""
    lrs = sorted(runs["lr"].unique())
    cols = [np.ones(len(runs))] + [(runs["lr"] == lr).to_numpy(float) for lr in lrs[1:]]
    cols += [(runs["S"] == s).to_numpy(float) for s in LAGS]
    return np.column_stack(cols)


def fit(runs: pd.DataFrame, y: np.ndarray) -> np.ndarray:
    """γ_S for S in :data:`LAGS`: OLS of the run means of ``y`` (runs, problems) on η and S."""
    beta, *_ = np.linalg.lstsq(_design(runs), y.mean(axis=1), rcond=None)
    return beta[-len(LAGS) :]


def bootstrap(runs: pd.DataFrame, y: np.ndarray, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """(n_boot, 4) γ_S of pigeonhole resamples: problems once for all runs, runs within (S, η) cells."""
    rng = np.random.default_rng(seed)
    x, cells = _design(runs), [g.to_numpy() for _, g in runs.groupby(["S", "lr"]).groups.items()]
    out = np.empty((n_boot, len(LAGS)))
    for i in range(n_boot):
        weights = np.bincount(rng.integers(0, y.shape[1], y.shape[1]), minlength=y.shape[1]) / y.shape[1]
        means = y @ weights
        rows = np.concatenate([rng.choice(c, len(c)) for c in cells])
        beta, *_ = np.linalg.lstsq(x[rows], means[rows], rcond=None)
        out[i] = beta[-len(LAGS) :]
    return out


def verdicts(runs: pd.DataFrame, y: np.ndarray, n_boot: int = 2000) -> pd.DataFrame:
    """Per S: γ_S in points, its 95% percentile interval, p (two-sided), Holm's p_adj, the verdict."""
    gamma, boot = fit(runs, y), bootstrap(runs, y, n_boot)
    p = np.minimum(1.0, 2 * np.minimum((boot <= 0).mean(axis=0), (boot >= 0).mean(axis=0)))
    p_adj = adjust_pvalues(p, "holm")
    rows = []
    for k, s in enumerate(LAGS):
        lo, hi = np.percentile(boot[:, k], [2.5, 97.5])
        word = "not distinguishable from on-policy at these budgets"
        if p_adj[k] < 0.05:
            word = "keeps more skill than on-policy" if gamma[k] > 0 else "loses skill against on-policy"
        rows.append(
            {
                "S": s,
                "gamma_points": 100 * gamma[k],
                "ci_low": 100 * lo,
                "ci_high": 100 * hi,
                "p": p[k],
                "p_holm": p_adj[k],
                "verdict": word,
                "unit": "seeds × problems",
            }
        )
    return pd.DataFrame(rows)


def mechanism(runs: pd.DataFrame) -> pd.DataFrame:
    """Exploratory: per (S, η), the mean over runs and steps of ``clip_frac`` and ``kl_behaviour``."""
    rows = []
    for _, r in runs.iterrows():
        hist = read_metrics(Path(r["dir"]) / "metrics.jsonl")
        vals = {k: [h[k] for h in hist if h.get(k) is not None] for k in ("clip_frac", "kl_behaviour")}
        rows.append(
            {"S": r["S"], "lr": r["lr"], **{k: np.mean(v) if v else math.nan for k, v in vals.items()}}
        )
    return pd.DataFrame(rows).groupby(["S", "lr"]).mean().reset_index()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="results")
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--out", default="results/staleness_model")
    args = ap.parse_args()
    records, outcomes = list(_records(args.root)), load_problem_outcomes(args.root)
    runs, y = select(records, outcomes)
    counts = runs.pivot_table(index="S", columns="lr", values="seed", aggfunc="count", fill_value=0)
    table, mech = verdicts(runs, y, args.boot), mechanism(runs)
    plain_runs, plain_y = select(records, outcomes, plain_loss=True)
    plain = verdicts(plain_runs, plain_y, args.boot)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fmt = {"floatfmt": ".3g"}
    text = [
        "# The staleness curve, read whole (pre-registered: docs/staleness_model.md)",
        f"\nWritten by `python -m analysis.staleness_model {args.root} --boot {args.boot}`.",
        f"\n{len(runs)} runs x {y.shape[1]} test problems. Runs per (S, η):\n",
        counts.to_markdown(),
        "\n## γ[S]: final flexible accuracy against on-policy at matched η (points; unit: seeds × problems)\n",
        table.to_markdown(index=False, **fmt),
        "\n## Sensitivity, post hoc (found at the look): without runs that set a loss regulariser\n",
        f"The pre-registered rule let in {len(runs) - len(plain_runs)} S = 0 runs of `regularisers_collapse` (a KL or",
        "entropy term, or neither, at η = 3.2e-4). Without every run that sets a loss setting beyond the",
        f"correction's ({len(plain_runs)} runs):\n",
        plain.to_markdown(index=False, **fmt),
        "\n## Mechanism (exploratory, no test): mean clip fraction and behaviour KL per (S, η)\n",
        mech.to_markdown(index=False, **fmt),
    ]
    (out / "README.md").write_text("\n".join(text) + "\n")
    (out / "verdicts.json").write_text(json.dumps(table.to_dict("records"), indent=1) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
