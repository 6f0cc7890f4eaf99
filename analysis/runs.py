"""Load run records written by the engine into tidy pandas DataFrames.

A run is a directory ``<root>/<grid>/<run_id>/`` (any depth under ``root``) holding ``run.json``
and, optionally, ``eval.jsonl`` (one line per evaluated problem). Every loader walks ``root``
recursively and validates each record. A record that is not one (truncated, binary, wrongly typed,
a duplicate run id) is never silently a missing row: it is skipped with a :class:`BadRecordWarning`
naming the file and what is wrong, or, with ``strict=True``, raises a one-line ``ValueError`` saying
the same.

Derived columns:

* ``online``: ``paradigm == "online"``.
* ``family``: ``"sft"`` for ``sft``; ``"preference"`` for ``offline``, ``offline_ref_free`` and
  ``unpaired``; ``"online"`` for ``online``.
* ``arm``: the run's arm as a label (:func:`oxbench.grid.record.arm_label`): the method plus every
  grid axis that varies other than scale and seed, e.g. ``"sgrpo lr=0.0001"``; just the method when
  nothing else varies (and for records written before arms were recorded). The statistics pool
  the seeds of one (scale, arm), never runs that differ in ``train.lr`` or ``online.n``.

Every record is also validated as an :class:`oxbench.grid.record.RunRecord`, the model its writers use.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import ValidationError

from oxbench.grid.record import (
    JSONL_LIMIT,
    STATUSES,
    RunRecord,
    UnsafeFile,
    arm_label,
    read_bytes_checked,
    read_json_checked,
    read_jsonl_checked,
)

FAMILY = {
    "sft": "sft",
    "offline": "preference",
    "offline_ref_free": "preference",
    "unpaired": "preference",
    "online": "online",
}

#: Required run.json keys and the Python types each must have.
_REQUIRED = {
    "run_id": str,
    "grid": str,
    "status": str,
    "scale": str,
    "scale_params": int,
    "method": str,
    "paradigm": str,
    "seed": int,
    "lora": bool,
}
#: Keys only a finished run must carry: the runner's first ``running`` record lacks them, and a run
#: that fails before loading its loss or model never gets them. Type-checked whenever present.
_FINISHED_ONLY = ("scale_params", "paradigm")
RUN_COLUMNS = [
    "scale",
    "scale_params",
    "method",
    "arm",
    "paradigm",
    "family",
    "online",
    "seed",
    "lora",
    "run_id",
    "grid",
    "config_hash",
    "status",
    "loss_version",
    "path",
]
FAILED_COLUMNS = ["run_id", "scale", "method", "seed", "error"]
OUTCOME_COLUMNS = ["run_id", "id", "split", "correct", "correct_flexible"]


class BadRecordWarning(UserWarning):
    """A run.json that is not a valid record was skipped (the message names the file)."""


def load_runs(
    root: str | Path, status: str | Iterable[str] | None = "finished", *, strict: bool = False
) -> pd.DataFrame:
    """One row per run whose status is in ``status`` (``None``: every run).

    Columns: :data:`RUN_COLUMNS` (``path`` is the run directory) followed by one column per metric
    found in any run's ``metrics`` (NaN where a run lacks it, or reports ``null``). Rows are sorted
    by scale (``scale_params``), method, arm, lora, seed. Every ``run.json`` under ``root`` is validated,
    whatever its status.
    """
    wanted = _statuses(status)
    records = [r for r in _records(root, strict) if r["status"] in wanted]
    rows = [_run_row(r) for r in records]
    metrics = sorted({k for r in records for k in [*r["metrics"], *domain_metrics(r)]})
    df = pd.DataFrame(rows, columns=RUN_COLUMNS + metrics)
    for name in metrics:
        df[name] = df[name].astype(float)
    return df.sort_values(["scale_params", "scale", "method", "arm", "lora", "seed"], ignore_index=True)


def load_failed(root: str | Path, *, strict: bool = False) -> pd.DataFrame:
    """The failed runs: columns ``run_id, scale, method, seed, error`` sorted by scale, method, seed."""
    rows = [_failed_row(r) for r in _records(root, strict) if r["status"] == "failed"]
    df = pd.DataFrame(rows, columns=FAILED_COLUMNS + ["scale_params"])
    df = df.sort_values(["scale_params", "scale", "method", "seed"], ignore_index=True)
    return df[FAILED_COLUMNS]


def load_problem_outcomes(
    root: str | Path, status: str | Iterable[str] | None = "finished", *, strict: bool = False
) -> pd.DataFrame:
    """Per-problem outcomes from every ``eval.jsonl`` next to a run.json whose status is in ``status``.

    Columns: ``run_id, id, split, correct, correct_flexible``. ``id`` is a string; ``correct`` is a
    bool; ``correct_flexible`` is a nullable boolean (``<NA>`` where the line lacks it). A problem
    (split, id) listed twice for one run, or a malformed line, raises ``ValueError`` naming
    ``file:line``.
    """
    wanted = _statuses(status)
    frames = []
    for record in _records(root, strict):
        path = record["_dir"] / "eval.jsonl"
        if record["status"] in wanted and path.is_file():
            frames.append(_read_outcomes(path, record["run_id"]))
    if not frames:
        return _empty_outcomes()
    df = pd.concat(frames, ignore_index=True)
    df["correct"] = df["correct"].astype(bool)
    df["correct_flexible"] = df["correct_flexible"].astype("boolean")
    return df


def scale_order(df: pd.DataFrame) -> list[str]:
    """Scales sorted by ``scale_params`` (ties by name; by name alone without that column).

    Raises ``ValueError`` if one scale carries two different parameter counts.
    """
    if "scale_params" not in df.columns:
        return sorted(df["scale"].unique())
    params = df.groupby("scale", sort=False)["scale_params"].unique()
    clashing = [s for s, p in params.items() if len(p) > 1]
    if clashing:
        raise ValueError(f"scale {clashing[0]!r} has several scale_params: {sorted(params[clashing[0]])}")
    return sorted(params.index, key=lambda s: (params[s][0], s))


# ---------------------------------------------------------------------------------------------
# run.json parsing and validation
# ---------------------------------------------------------------------------------------------


def _records(root: str | Path, strict: bool = False) -> list[dict]:
    """Every valid run.json under ``root``. One that is not valid (or repeats a run id) raises with
    ``strict``, else is skipped with a :class:`BadRecordWarning` naming it."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"run directory not found: {root}")
    by_id: dict[str, dict] = {}
    for path in sorted(root.rglob("run.json")):
        try:
            record = _read_record(path, root)
            other = by_id.get(record["run_id"])
            if other is not None:
                record = _newer(other, record, strict)
        except ValueError as err:
            if strict:
                raise
            warnings.warn(f"{err} (skipped)", BadRecordWarning, stacklevel=2)
            continue
        by_id[record["run_id"]] = record
    return list(by_id.values())


def duplicate_run_ids(root: str | Path) -> list[str]:
    """One line per run_id that two or more records under ``root`` carry, naming the one kept (the
    newer) and the ones passed over: the report shows them."""
    paths: dict[str, list[Path]] = {}
    for path in sorted(Path(root).rglob("run.json")):
        try:
            paths.setdefault(read_json_checked(path, root=Path(root))["run_id"], []).append(path)
        except (ValueError, KeyError, TypeError):
            continue
    lines = []
    for run_id, ps in paths.items():
        if len(ps) > 1:
            kept = max(ps, key=lambda p: p.stat().st_mtime)
            others = ", ".join(str(p) for p in ps if p != kept)
            lines.append(
                f"run_id {run_id!r} has {len(ps)} records: kept the newer {kept}, passed over {others}"
            )
    return lines


def _newer(a: dict, b: dict, strict: bool) -> dict:
    """Of two records with one run_id, the newer (by its run.json's time); the other is named in a warning."""
    pa, pb = a["_dir"] / "run.json", b["_dir"] / "run.json"
    if strict:
        raise ValueError(f"{pb}: run_id {b['run_id']!r} already used by {pa}")
    kept, passed = (b, pa) if pb.stat().st_mtime >= pa.stat().st_mtime else (a, pb)
    warnings.warn(
        f"{passed}: run_id {b['run_id']!r} also recorded in {kept['_dir'] / 'run.json'}, which is "
        "newer and kept (skipped)",
        BadRecordWarning,
        stacklevel=3,
    )
    return kept


def _read_record(path: Path, root: Path | None = None) -> dict:
    """A validated record: the file read safely (:func:`oxbench.utils.read_json_checked`: a regular
    file under ``root``, bounded in size and nesting), then checked; ValueError naming the file."""
    try:
        record = read_json_checked(path, root=root)
    except UnsafeFile as err:
        raise ValueError(f"{path}: malformed run.json ({_one_line_text(err.reason)})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: malformed run.json (top level is {type(record).__name__}, not an object)")
    _check_record(record, path)
    record["_dir"] = path.parent
    return record


def _check_record(record: dict, path: Path) -> None:
    """Validate ``record`` in place; a key in :data:`_FINISHED_ONLY` missing from an unfinished run is None."""
    if isinstance(record.get("status"), str) and record["status"] != "finished":
        for key in _FINISHED_ONLY:
            record.setdefault(key, None)
    for key, kind in _REQUIRED.items():
        if key not in record:
            raise ValueError(f"{path}: malformed run.json (missing key {key!r})")
        optional = key in _FINISHED_ONLY and record["status"] != "finished"
        if not _is(record[key], kind) and not (optional and record[key] is None):
            raise ValueError(
                f"{path}: malformed run.json ({key!r} must be {kind.__name__}, got {record[key]!r})"
            )
    if record["status"] not in STATUSES:
        raise ValueError(f"{path}: malformed run.json (status {record['status']!r} not in {STATUSES})")
    if record["paradigm"] is not None and record["paradigm"] not in FAMILY:
        raise ValueError(
            f"{path}: malformed run.json (paradigm {record['paradigm']!r} not in {tuple(FAMILY)})"
        )
    record["metrics"] = _check_metrics(record.get("metrics"), record["status"], path)
    try:
        RunRecord.model_validate(record)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{path}: malformed run.json ({where!r}: {_one_line_text(first['msg'])})") from None


def _check_metrics(metrics: object, status: str, path: Path) -> dict:
    """A dict name -> float (None -> NaN). Only finished runs must carry one."""
    if metrics is None and status != "finished":
        return {}
    if not isinstance(metrics, dict):
        raise ValueError(f"{path}: malformed run.json ('metrics' must be an object, got {metrics!r})")
    clash = set(metrics) & set(RUN_COLUMNS)
    if clash:
        raise ValueError(
            f"{path}: malformed run.json (metric name {sorted(clash)[0]!r} clashes with a column)"
        )
    out = {}
    for name, value in metrics.items():
        if value is not None and not _is(value, float):
            raise ValueError(f"{path}: malformed run.json (metric {name!r} must be a number, got {value!r})")
        out[name] = np.nan if value is None else float(value)
    if status == "finished" and metrics.get("accuracy") is None:  # what every leaderboard ranks
        raise ValueError(f"{path}: malformed run.json (finished, but metrics.accuracy is None)")
    return out


def _is(value: object, kind: type) -> bool:
    """Type check treating bool as distinct from int and int as acceptable for float."""
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def _run_row(record: dict) -> dict:
    row = {key: record[key] for key in _REQUIRED if key != "status"}
    row.update(
        arm=arm_label(record.get("arm"), record["method"]),
        family=FAMILY.get(record["paradigm"]),
        online=None if record["paradigm"] is None else record["paradigm"] == "online",
        config_hash=record.get("config_hash"),
        status=record["status"],
        loss_version=record.get("loss_version"),
        path=str(record["_dir"]),
    )
    row.update(record["metrics"])
    row.update(domain_metrics(record))
    return row


def domain_metrics(record: dict) -> dict[str, float | None]:
    """Per task family of ``eval.lm_eval.tasks`` (its config), the mean of its tasks' headline numbers:
    ``domain_<family>``, ``base_domain_<family>`` and ``domain_<family>_chance`` (``None`` where a task
    has no chance level or a run lacks a task's number). ``{}`` for runs without lm-eval tasks."""
    tasks = (((record.get("config") or {}).get("eval") or {}).get("lm_eval") or {}).get("tasks") or {}
    m, out = record["metrics"], {}
    for family in dict.fromkeys(tasks.values()):
        names = [t for t, f in tasks.items() if f == family]
        for prefix, suffix in (("", ""), ("base_", ""), ("", "_chance")):
            values = [m.get(f"{prefix}lmeval_{t}{suffix}") for t in names]
            ok = all(v is not None for v in values)
            out[f"{prefix}domain_{family}{suffix}"] = sum(values) / len(values) if ok else None
    return out


def _failed_row(record: dict) -> dict:
    row = {key: record[key] for key in ("run_id", "scale", "method", "seed", "scale_params")}
    row["error"] = record.get("error")
    return row


def _statuses(status: str | Iterable[str] | None) -> set[str]:
    wanted = set(STATUSES) if status is None else {status} if isinstance(status, str) else set(status)
    unknown = wanted - set(STATUSES)
    if unknown:
        raise ValueError(f"unknown status {sorted(unknown)[0]!r}; expected one of {STATUSES} or None")
    return wanted


# ---------------------------------------------------------------------------------------------
# eval.jsonl parsing
# ---------------------------------------------------------------------------------------------


def _text_checked(path: Path) -> str:
    """A jsonl file's text, read safely (a regular file, bounded); ValueError naming it otherwise."""
    try:
        return read_bytes_checked(path, JSONL_LIMIT, root=path.parent.parent.parent).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8") from None


def read_metrics(path: Path) -> list[dict]:
    """The rows of a run's ``metrics.jsonl`` (none when it is missing); lines that cannot be read (cut off
    mid-write, NUL bytes, not UTF-8) are skipped, with one :class:`BadRecordWarning` naming the file and
    the count."""
    if not path.is_file():
        return []
    rows, bad = read_jsonl_checked(path, root=path.parent.parent.parent)
    if bad:
        warnings.warn(f"{path}: {bad} unreadable line(s) skipped", BadRecordWarning, stacklevel=2)
    return rows


def _read_outcomes(path: Path, run_id: str) -> pd.DataFrame:
    rows, seen = [], set()
    for lineno, line in enumerate(_text_checked(path).splitlines(), start=1):
        if not line.strip():
            continue
        row = _outcome_row(line, f"{path}:{lineno}")
        key = (row["split"], row["id"])
        if key in seen:
            raise ValueError(f"{path}:{lineno}: problem {row['id']!r} ({row['split']}) listed twice")
        seen.add(key)
        rows.append({"run_id": run_id, **row})
    return pd.DataFrame(rows, columns=OUTCOME_COLUMNS)


def _outcome_row(line: str, where: str) -> dict:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: malformed eval.jsonl line ({_one_line(err)})") from None
    if not isinstance(item, dict) or not {"id", "split", "correct"} <= set(item):
        raise ValueError(f"{where}: eval.jsonl line must be an object with 'id', 'split' and 'correct'")
    if not isinstance(item["split"], str):
        raise ValueError(f"{where}: 'split' must be a string, got {item['split']!r}")
    if not isinstance(item["correct"], bool):
        raise ValueError(f"{where}: 'correct' must be true/false, got {item['correct']!r}")
    flexible = item.get("correct_flexible")
    if flexible is not None and not isinstance(flexible, bool):
        raise ValueError(f"{where}: 'correct_flexible' must be true/false, got {flexible!r}")
    return {
        "id": str(item["id"]),
        "split": item["split"],
        "correct": item["correct"],
        "correct_flexible": flexible,
    }


def _empty_outcomes() -> pd.DataFrame:
    df = pd.DataFrame({c: pd.Series(dtype=object) for c in OUTCOME_COLUMNS})
    df["correct"] = df["correct"].astype(bool)
    df["correct_flexible"] = df["correct_flexible"].astype("boolean")
    return df


def _one_line(err: Exception) -> str:
    return _one_line_text(str(err))


def _one_line_text(text: str) -> str:
    return " ".join(text.split())
