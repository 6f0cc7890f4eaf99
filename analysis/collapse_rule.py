r"""The pre-registered collapse rule (issue 27; ``docs/collapse_rule.md``, committed before it was applied).

The engine's in-run detector compares the last rounds' reward with the **first** rounds' (about the
base's level). This rule is relative to the run's **peak** and adds an **accuracy** condition. From
the records only (``run.json``, ``metrics.jsonl``, ``curve.jsonl``), an online run **failed** when:

* **R** (reward, peak-relative): with the window W = max(4, ⌈256 / B⌉) rounds (B = B_p · n rollouts
  per round: at least 4 rounds and 256 rollouts), the run has T >= 2W rounds and the mean reward of
  its last window is below ``0.5`` x its best window's;
* **A** (accuracy, final): its final test flexible accuracy is below ``0.5`` x its base's;
* **C** (accuracy, learning curve): it has a ``curve.jsonl`` whose last flexible accuracy is below
  ``0.5`` x the curve's zero-compute (base) point;
* **N**: the engine stopped it for a non-finite loss.

Otherwise it is **stable**. Sensitivity columns (never the primary label): ``R`` alone, ``A`` alone,
``A_verified`` (verified-flexible in place of flexible) and ``old`` (the engine's first-window flag).

:func:`judge_run` applies the rule to one record; :func:`label_runs` to every finished online record
under a directory, with the run's identity (``fingerprint``: identical deterministic content means
one run, e.g. the S = 0 cells of every staleness correction; ``fingerprint_full`` also hashes losses and
diagnostics) and its effective step scale
(``step_scale``, VCPO's √ESS learning rate: the mean of ``lr_effective_t / lr_{t-1}``).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.runs import _records, read_metrics

#: The rule's constants, as pre-registered in docs/collapse_rule.md.
REWARD_FRACTION = 0.5
ACCURACY_FRACTION = 0.5
MIN_WINDOW_ROUNDS = 4
MIN_WINDOW_ROLLOUTS = 256
#: metrics.jsonl keys that depend on the machine, not on the run's arithmetic (left out of fingerprints).
_CLOCK_WORDS = ("seconds", "elapsed", "per_s", "wait", "timing")

LABEL_COLUMNS = [
    "grid",
    "run_id",
    "method",
    "arm",
    "correction",
    "S",
    "lr",
    "ess_lr",
    "seed",
    "B",
    "rounds",
    "window",
    "peak",
    "last",
    "R",
    "A",
    "A_verified",
    "C",
    "N",
    "judged",
    "failed",
    "old",
    "reasons",
    "accuracy",
    "accuracy_flexible",
    "base_accuracy_flexible",
    "accuracy_verified_flexible",
    "base_accuracy_verified_flexible",
    "step_scale",
    "lr_effective",
    "fingerprint",
    "fingerprint_full",
]


def window_rounds(rollouts_per_round: int) -> int:
    """W = max(4, ⌈256 / B⌉): a window of at least 4 rounds and at least 256 rollouts (the rule's R)."""
    return max(MIN_WINDOW_ROUNDS, math.ceil(MIN_WINDOW_ROLLOUTS / max(1, rollouts_per_round)))


def round_rewards(history: list[dict]) -> np.ndarray:
    """The training reward per round: ``reward_mean`` of the metrics rows, rows of one ``round`` averaged
    (records without a ``round`` field: one row per round)."""
    rounds: dict[object, list[float]] = {}
    for i, row in enumerate(history):
        if row.get("reward_mean") is None:
            continue
        key = row.get("round")
        rounds.setdefault(i if key is None else key, []).append(float(row["reward_mean"]))
    return np.array([np.mean(v) for v in rounds.values()], float)


def reward_condition(rewards: np.ndarray, window: int) -> dict:
    """Condition R: ``peak`` (best window mean), ``last`` (last window mean), ``judged`` (T >= 2W) and
    ``fired`` (judged and last < 0.5 · peak)."""
    if len(rewards) < window:
        return {"peak": math.nan, "last": math.nan, "judged": False, "fired": False}
    means = np.convolve(rewards, np.ones(window) / window, mode="valid")
    peak, last = float(means.max()), float(means[-1])
    judged = len(rewards) >= 2 * window
    return {
        "peak": peak,
        "last": last,
        "judged": judged,
        "fired": bool(judged and last < REWARD_FRACTION * peak),
    }


def _below_half(value: float | None, base: float | None) -> bool:
    if value is None or base is None or math.isnan(value) or math.isnan(base):
        return False
    return value < ACCURACY_FRACTION * base


def curve_condition(curve: list[dict] | None) -> bool:
    """Condition C: the learning curve's last flexible accuracy < 0.5 x its zero-compute point's."""
    points = [p for p in curve or [] if p.get("accuracy_flexible") is not None]
    if len(points) < 2:
        return False
    points.sort(key=lambda p: p.get("rollouts", p.get("step", 0)))
    start = points[0]
    if start.get("rollouts", start.get("step")) != 0:
        return False
    return _below_half(points[-1]["accuracy_flexible"], start["accuracy_flexible"])


def judge_run(record: dict, history: list[dict], curve: list[dict] | None = None) -> dict:
    """The rule (module doc) on one record: each condition, ``failed`` (R or A or C or N), ``old`` (the
    engine's flag) and ``reasons`` (the conditions that fired, e.g. ``"R+A"``)."""
    online, m = record["config"]["online"], record.get("metrics") or {}
    b = int(online.get("prompts_per_batch") or 1) * int(online.get("n") or 1)
    rewards = round_rewards(history)
    window = window_rounds(b)
    r = reward_condition(rewards, window)
    collapse = record.get("collapse") or {}
    conds = {
        "R": r["fired"],
        "A": _below_half(m.get("accuracy_flexible"), m.get("base_accuracy_flexible")),
        "A_verified": _below_half(
            m.get("accuracy_verified_flexible"), m.get("base_accuracy_verified_flexible")
        ),
        "C": curve_condition(curve),
        "N": "non-finite" in str(collapse.get("reason", "")),
    }
    failed = conds["R"] or conds["A"] or conds["C"] or conds["N"]
    reasons = "+".join(k for k in ("R", "A", "C", "N") if conds[k])
    return {
        "B": b,
        "rounds": len(rewards),
        "window": window,
        "peak": r["peak"],
        "last": r["last"],
        "judged": r["judged"],
        **conds,
        "failed": bool(failed),
        "old": bool(collapse),
        "reasons": reasons,
    }


def step_scale(history: list[dict]) -> float:
    """The mean over steps t >= 2 of ``lr_effective_t / lr_{t-1}`` (the LR the schedule set for step t is
    the ``lr`` logged after step t − 1): 1 without an LR-scaling correction, VCPO's √ESS factor with one.
    NaN when the records do not log ``lr_effective``."""
    ratios = [
        cur["lr_effective"] / prev["lr"]
        for prev, cur in zip(history, history[1:])
        if cur.get("lr_effective") is not None and prev.get("lr")
    ]
    return float(np.mean(ratios)) if ratios else math.nan


def fingerprint(run_dir: Path, history: list[dict], *, full: bool = False) -> str:
    """A hash of a run's outcome: its training reward per round and its per-problem test completions
    (``eval.jsonl``, byte for byte). Equal fingerprints: the same run recorded twice (rule page, version 2).
    ``full``: every metrics row without its wall-clock fields instead of the rewards alone (losses and
    diagnostics too, so float rounding on another code path makes two such runs differ)."""
    h = hashlib.sha256()
    if full:
        for row in history:
            kept = {k: v for k, v in row.items() if not any(w in k for w in _CLOCK_WORDS)}
            h.update(json.dumps(kept, sort_keys=True).encode())
    else:
        h.update(json.dumps([float(r) for r in round_rewards(history)]).encode())
    path = run_dir / "eval.jsonl"
    if path.is_file():
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def label_runs(root: str | Path) -> pd.DataFrame:
    """:func:`judge_run` on every finished online record under ``root``: one row per run with
    :data:`LABEL_COLUMNS` (``arm``: the record's arm as JSON; ``correction``: the arm without scale, LoRA, S and η, as
    :func:`analysis.staleness.load_stability` names it; ``lr_effective`` = η x ``step_scale``)."""
    rows = []
    for rec in _records(root):
        if rec["status"] != "finished" or rec.get("paradigm") != "online":
            continue
        history = read_metrics(rec["_dir"] / "metrics.jsonl")
        curve = read_metrics(rec["_dir"] / "curve.jsonl") or None
        cfg, m = rec["config"], rec.get("metrics") or {}
        arm = {
            k: v
            for k, v in (rec.get("arm") or {}).items()
            if k not in ("online.staleness", "train.lr", "scale", "lora", "method")
        }
        scale = step_scale(history)
        rows.append(
            {
                "grid": rec["grid"],
                "run_id": rec["run_id"],
                "method": rec["method"],
                "arm": json.dumps(rec.get("arm") or {"method": rec["method"]}, sort_keys=True),
                "correction": " ".join(f"{k}={v}" for k, v in sorted(arm.items())) or rec["method"],
                "S": cfg["online"].get("staleness", 0),
                "lr": cfg["train"]["lr"],
                "ess_lr": cfg["online"].get("ess_lr", "none"),
                "seed": rec["seed"],
                **judge_run(rec, history, curve),
                **{k: m.get(k, math.nan) for k in LABEL_COLUMNS if k.startswith(("accuracy", "base_"))},
                "step_scale": scale,
                "lr_effective": cfg["train"]["lr"] * scale,
                "fingerprint": fingerprint(rec["_dir"], history),
                "fingerprint_full": fingerprint(rec["_dir"], history, full=True),
            }
        )
    out = pd.DataFrame(rows, columns=LABEL_COLUMNS)
    return out.sort_values(["grid", "correction", "S", "lr", "seed"], ignore_index=True)
