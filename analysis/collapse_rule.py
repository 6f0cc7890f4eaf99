r"""The pre-registered collapse rule (issue 27; ``docs/collapse_rule.md``, committed before it was applied).

The engine's in-run detector compares the last rounds' reward with the **first** rounds' (about the
base's level). This rule is relative to the run's **peak** and adds an **accuracy** condition. From
the records only (``run.json``, ``metrics.jsonl``, ``curve.jsonl``), an online run **failed** when:

* **R** (reward, peak-relative): with the window W rounds (below), the run has T >= 2W rounds and the
  mean reward of its last window is below ``reward_fraction`` (0.5) x its best window's;
* **A** (accuracy, final): its final test flexible accuracy is below ``accuracy_fraction`` (0.5) x its
  base's;
* **C** (accuracy, learning curve): it has a ``curve.jsonl`` whose last flexible accuracy is below
  ``accuracy_fraction`` (0.5) x the curve's zero-compute (base) point;
* **N**: the engine stopped it for a non-finite loss.

Otherwise it is **stable**. The window (:func:`window_rounds`) is the rule's version:

* **version 3** (the primary label; the page's "Version 3", issue 40 item 6): W = max(4, ⌈64 / B_p⌉)
  rounds, at least 4 rounds and 64 prompts (B_p = ``online.prompts_per_batch``);
* **version 2** (kept beside it): W = max(4, ⌈256 / B⌉) rounds, at least 4 rounds and 256 rollouts
  (B = B_p · n rollouts per round). Version 1 has version 2's window (it differs only in what counts
  as one run).

The two give the same window wherever n = 4 (256 rollouts are 64 prompts) or B_p >= 16 with
B_p · n >= 64 (W = 4 both); they differ in the staleness cells (B_p = 8, n = 8: version 2's W is 4
rounds, version 3's 8) and, among others, wherever B_p = 4 with n != 4 (version 3: 16 rounds). The
fractions are parameters (the pre-registered 0.5 by default), so the cut-off sensitivity (0.4 / 0.6)
runs the same code. Sensitivity columns (never the primary label): ``R`` alone, ``A`` alone,
``A_verified`` (verified-flexible in place of flexible) and ``old`` (the engine's first-window flag).

:func:`judge_run` applies the rule to one record; :func:`label_runs` to every finished online record
under a directory, with the rule it applied (``version``, ``reward_fraction``, ``accuracy_fraction``),
the run's identity (``fingerprint``: identical deterministic content means one run, e.g. the S = 0
cells of every staleness correction; ``fingerprint_full`` also hashes losses and diagnostics) and its
effective step scale (``step_scale``, VCPO's √ESS learning rate: the mean of
``lr_effective_t / lr_{t-1}``).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.runs import _records, read_metrics

#: The rule's version that gives the primary label (docs/collapse_rule.md, "Version 3"), and those kept.
VERSION = 3
VERSIONS = (2, 3)
#: The rule's constants, as pre-registered in docs/collapse_rule.md (the fractions are the defaults of
#: the ``reward_fraction`` and ``accuracy_fraction`` parameters).
REWARD_FRACTION = 0.5
ACCURACY_FRACTION = 0.5
MIN_WINDOW_ROUNDS = 4
#: version 2's window: at least this many rollouts (B = B_p · n a round)
MIN_WINDOW_ROLLOUTS = 256
#: version 3's window: at least this many prompts (B_p a round)
MIN_WINDOW_PROMPTS = 64
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
    "version",
    "reward_fraction",
    "accuracy_fraction",
    "B_p",
    "n",
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

#: the label columns read from the record's ``metrics`` (the test accuracies and the base's)
METRIC_COLUMNS = [
    "accuracy",
    "accuracy_flexible",
    "base_accuracy_flexible",
    "accuracy_verified_flexible",
    "base_accuracy_verified_flexible",
]


def window_rounds(prompts_per_round: int, rollouts_per_prompt: int, *, version: int = VERSION) -> int:
    """Condition R's window in rounds for a run with B_p = ``prompts_per_round`` prompts and n =
    ``rollouts_per_prompt`` rollouts each a round. Version 3: W = max(4, ⌈64 / B_p⌉), at least 4 rounds
    and 64 prompts (n does not enter). Version 2: W = max(4, ⌈256 / (B_p · n)⌉), at least 4 rounds and
    256 rollouts."""
    if prompts_per_round < 1 or rollouts_per_prompt < 1:
        raise ValueError(
            f"a round has B_p >= 1 and n >= 1, not {prompts_per_round} and {rollouts_per_prompt}"
        )
    if version == 3:
        return max(MIN_WINDOW_ROUNDS, math.ceil(MIN_WINDOW_PROMPTS / prompts_per_round))
    if version == 2:
        rollouts = prompts_per_round * rollouts_per_prompt
        return max(MIN_WINDOW_ROUNDS, math.ceil(MIN_WINDOW_ROLLOUTS / rollouts))
    raise ValueError(f"collapse rule version {version}: the versions with a window are {VERSIONS}")


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


def reward_condition(rewards: np.ndarray, window: int, fraction: float = REWARD_FRACTION) -> dict:
    """Condition R: ``peak`` (best window mean), ``last`` (last window mean), ``judged`` (T >= 2W) and
    ``fired`` (judged and last < ``fraction`` · peak; 0.5 as pre-registered)."""
    if len(rewards) < window:
        return {"peak": math.nan, "last": math.nan, "judged": False, "fired": False}
    means = np.convolve(rewards, np.ones(window) / window, mode="valid")
    peak, last = float(means.max()), float(means[-1])
    judged = len(rewards) >= 2 * window
    return {
        "peak": peak,
        "last": last,
        "judged": judged,
        "fired": bool(judged and last < fraction * peak),
    }


def _below(value: float | None, base: float | None, fraction: float) -> bool:
    """``value < fraction x base``; False where either is missing."""
    if value is None or base is None or math.isnan(value) or math.isnan(base):
        return False
    return value < fraction * base


def curve_condition(curve: list[dict] | None, fraction: float = ACCURACY_FRACTION) -> bool:
    """Condition C: the learning curve's last flexible accuracy < ``fraction`` (0.5) x its zero-compute
    point's."""
    points = [p for p in curve or [] if p.get("accuracy_flexible") is not None]
    if len(points) < 2:
        return False
    points.sort(key=lambda p: p.get("rollouts", p.get("step", 0)))
    start = points[0]
    if start.get("rollouts", start.get("step")) != 0:
        return False
    return _below(points[-1]["accuracy_flexible"], start["accuracy_flexible"], fraction)


def judge_run(
    record: dict,
    history: list[dict],
    curve: list[dict] | None = None,
    *,
    version: int = VERSION,
    reward_fraction: float = REWARD_FRACTION,
    accuracy_fraction: float = ACCURACY_FRACTION,
) -> dict:
    """The rule (module doc) of ``version`` on one record, with its two fractions: each condition,
    ``failed`` (R or A or C or N), ``old`` (the engine's flag), ``reasons`` (the conditions that fired,
    e.g. ``"R+A"``), the round's ``B_p``, ``n``, ``B`` and the ``window`` it used."""
    online, m = record["config"]["online"], record.get("metrics") or {}
    b_p, n = int(online.get("prompts_per_batch") or 1), int(online.get("n") or 1)
    rewards = round_rewards(history)
    window = window_rounds(b_p, n, version=version)
    r = reward_condition(rewards, window, reward_fraction)
    collapse = record.get("collapse") or {}
    verified = (m.get("accuracy_verified_flexible"), m.get("base_accuracy_verified_flexible"))
    conds = {
        "R": r["fired"],
        "A": _below(m.get("accuracy_flexible"), m.get("base_accuracy_flexible"), accuracy_fraction),
        "A_verified": _below(*verified, accuracy_fraction),
        "C": curve_condition(curve, accuracy_fraction),
        "N": "non-finite" in str(collapse.get("reason", "")),
    }
    failed = conds["R"] or conds["A"] or conds["C"] or conds["N"]
    return {
        "version": version,
        "reward_fraction": reward_fraction,
        "accuracy_fraction": accuracy_fraction,
        "B_p": b_p,
        "n": n,
        "B": b_p * n,
        "rounds": len(rewards),
        "window": window,
        "peak": r["peak"],
        "last": r["last"],
        "judged": r["judged"],
        **conds,
        "failed": bool(failed),
        "old": bool(collapse),
        "reasons": "+".join(k for k in ("R", "A", "C", "N") if conds[k]),
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


def label_runs(
    root: str | Path,
    *,
    version: int = VERSION,
    reward_fraction: float = REWARD_FRACTION,
    accuracy_fraction: float = ACCURACY_FRACTION,
) -> pd.DataFrame:
    """:func:`judge_run` (rule ``version``, its two fractions) on every finished online record under
    ``root``: one row per run with :data:`LABEL_COLUMNS` (``version`` and the fractions: the rule that
    labelled it; ``arm``: the record's arm as JSON; ``correction``: the arm without scale, LoRA, S and η,
    as :func:`analysis.staleness.load_stability` names it; ``lr_effective`` = η x ``step_scale``)."""
    rule = {"version": version, "reward_fraction": reward_fraction, "accuracy_fraction": accuracy_fraction}
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
                **judge_run(rec, history, curve, **rule),
                **{k: m.get(k, math.nan) for k in METRIC_COLUMNS},
                "step_scale": scale,
                "lr_effective": cfg["train"]["lr"] * scale,
                "fingerprint": fingerprint(rec["_dir"], history),
                "fingerprint_full": fingerprint(rec["_dir"], history, full=True),
            }
        )
    out = pd.DataFrame(rows, columns=LABEL_COLUMNS)
    return out.sort_values(["grid", "correction", "S", "lr", "seed"], ignore_index=True)
