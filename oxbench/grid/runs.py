"""Self-describing run records: ``<out>/<grid>/<run_id>/run.json`` plus ``metrics.jsonl``.

A record is a :class:`oxbench.grid.record.RunRecord`, written atomically (temp file + rename). A run
directory whose ``run.json`` says ``finished`` is complete; anything else (no record, ``running``,
``failed``) is re-run by the grid.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from oxbench.config import RunConfig, zero_stage
from oxbench.grid.record import RunRecord
from oxbench.utils import (
    UnsafeFile,
    content_hash,
    errors_naming,
    read_json_checked,
    sha256_cached,
    write_json_atomic,
    write_jsonl_atomic,
)

PACKAGES = (
    "oxbench",
    "torch",
    "transformers",
    "tokenizers",
    "deepspeed",
    "peft",
    "accelerate",
    "trl",
    "datasets",
    "lm-eval",
    "numpy",
    "scipy",
    "pandas",
    "pydantic",
)


def new_record(cfg: RunConfig, *, world_size: int, nodes: int) -> RunRecord:
    """A cell's record as it starts: ``running``, with everything that names what it runs and where."""
    return RunRecord(
        run_id=cfg.run_id(),
        grid=cfg.grid,
        status="running",
        scale=cfg.model.name,
        method=cfg.method,
        seed=cfg.seed,
        lora=cfg.model.lora.enabled,
        arm=cfg.arm(),
        seeds=cfg.seeds(),
        seed_scope=cfg.seed_scope,
        config=cfg.model_dump(),
        config_hash=content_hash(cfg.identity()),
        git_sha=git_sha(),
        packages=packages(),
        data_files=data_fingerprint(cfg.task.model_dump(), cfg.data.path) or None,
        world_size=world_size,
        nodes=nodes,
        zero_stage=zero_stage(cfg),
    )


def run_dir(out: Path, grid: str, run_id: str) -> Path:
    return Path(out) / grid / run_id


LOCKED_EXIT = 3  # a cell process's exit code when another process holds its run's lock (oxbench.grid.cell)
REPLACED = "run.replaced.json"  # a finished record that ``--rerun`` set aside, kept beside its successor


@contextmanager
def run_lock(d: Path) -> Iterator[bool]:
    """The run directory's exclusive lock (``flock`` on ``d/.lock``): True while this process holds it,
    False when another one does (it is never waited for). The one discipline for every path that trains
    a cell or writes its record: a grid's cells, ``run --config``, resumes and ``--rerun``. The lock
    dies with its process, so a killed run leaves nothing to clean up."""
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def retire_finished(d: Path) -> str:
    """``--rerun``: under the lock, set a finished record aside (``run.json`` -> :data:`REPLACED`), so
    the cell trains again and its new record says so. ``retired``, ``not finished`` or ``locked``."""
    with run_lock(d) as held:
        if not held:
            return "locked"
        rec = read_record(d)
        if rec is None or rec["status"] != "finished":
            return "not finished"
        os.replace(d / "run.json", d / REPLACED)
        return "retired"


def read_record(path: Path) -> dict | None:
    """The run's record, or None when there is none or it cannot be one (:func:`inspect_record`): a cell
    whose record is unreadable is not finished, and runs again."""
    return inspect_record(path)[0]


def inspect_record(path: Path) -> tuple[dict | None, str | None]:
    """``(record, problem)`` of the run directory ``path``: ``(None, None)`` without a ``run.json``;
    ``(None, one line naming the file)`` for one that cannot be a record: not a regular file (a pipe, a
    device, a link out of the results tree), over its size limit, not UTF-8 JSON, nested too deep, not an
    object with a status, or finished without a numeric accuracy. Never hangs, never reads without
    bound."""
    f = Path(path) / "run.json"
    if not f.exists() and not f.is_symlink():
        return None, None
    try:
        rec = read_json_checked(f, root=Path(path).parent.parent)
    except UnsafeFile as exc:
        return None, str(exc)
    if not isinstance(rec, dict) or not isinstance(rec.get("status"), str):
        return None, f"{f}: not a run record (no status)"
    accuracy = (rec.get("metrics") or {}).get("accuracy") if isinstance(rec.get("metrics"), dict) else None
    if rec["status"] == "finished" and (isinstance(accuracy, bool) or not isinstance(accuracy, int | float)):
        return None, f"{f}: finished, but metrics.accuracy is {accuracy!r}, not a number"
    return rec, None


def data_fingerprint(task: dict, data_path: str | None = None) -> dict[str, str]:
    """The SHA-256 of each local data file of ``task`` (a ``TaskConfig`` dump), by split, and of
    ``data.path`` (a directory: of its files' digests) under ``data.path``."""
    from oxbench.tasks import data_files

    out = {split: sha256_cached(path) for split, path in data_files(task).items()}
    if data_path:
        p = Path(data_path).expanduser()
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file())
            out["data.path"] = content_hash([(str(f.relative_to(p)), sha256_cached(f)) for f in files])
        else:
            out["data.path"] = sha256_cached(p)
    return out


def stale_data(rec: dict) -> str | None:
    """One line when a record was trained on data files whose bytes have changed since (None: current,
    or nothing to compare: a record from before fingerprints, generated data, files gone)."""
    config = rec.get("config") or {}
    sealed, task, data = rec.get("data_files"), config.get("task"), config.get("data")
    if not isinstance(sealed, dict) or not sealed or not isinstance(task, dict):
        return None
    try:
        now = data_fingerprint(task, data.get("path") if isinstance(data, dict) else None)
    except (OSError, ValueError, KeyError):
        return None
    changed = [split for split, sha in sealed.items() if split in now and now[split] != sha]
    return f"stale: its {' and '.join(changed)} data changed since it ran" if changed else None


def write_record(path: Path, record: RunRecord | dict) -> None:
    """Write ``run.json``: a :class:`RunRecord`, or a dict validated as one (whole, unknown keys null)."""
    if not isinstance(record, RunRecord):
        record = RunRecord.model_validate(record)
    write_json_atomic(Path(path) / "run.json", record.model_dump(mode="json"))


def packages() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


EXPORT_STAMP = Path(__file__).resolve().parent.parent / "_export.json"  # oxbench/_export.json
ROOT = EXPORT_STAMP.parent.parent  # the source tree: oxbench/, losses/, pyproject.toml


def _git(*args: str) -> str | None:
    """``git ARGS`` run in the source tree: its output, or None when git fails or is missing."""
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_sha() -> str:
    """The source tree's commit (``+dirty`` if it has uncommitted changes), or ``unknown``.

    A tree exported from git (``scripts/gpu_kit.sh``: ``git archive``, no ``.git`` of its own) names the
    commit it was exported from, from the stamp ``oxbench/_export.json`` the export wrote. Such a tree
    may lie inside another repository (the kit inside a checkout, a venv inside a project): git's
    answer counts only when the repository's top level is this tree itself."""
    top = _git("rev-parse", "--show-toplevel")
    if top is not None and Path(top).resolve() == ROOT:
        sha = _git("rev-parse", "HEAD")
        if sha:
            dirty = _git("status", "--porcelain", "--untracked-files=no")
            return sha + ("+dirty" if dirty else "")
    try:
        stamp = json.loads(EXPORT_STAMP.read_text())
    except (OSError, ValueError):
        return "unknown"
    sha = stamp.get("git_sha") if isinstance(stamp, dict) else None
    return sha if isinstance(sha, str) and sha else "unknown"


class MetricsLog:
    """Appends one JSON line per logged step to ``metrics.jsonl`` (truncated at the run's start), and
    sends it to the run's live trackers (:class:`oxbench.tracking.Tracker`), if any."""

    def __init__(self, path: Path, tracker=None):
        self.path, self.tracker = Path(path), tracker
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def __call__(self, row: dict) -> None:
        with errors_naming(self.path), self.path.open("a") as f:  # a full disk's error names no file
            f.write(json.dumps(row) + "\n")
        if self.tracker is not None:
            self.tracker.log("train", row, row["step"])

    def restart(self, rows: list[dict]) -> None:
        """Back to a checkpoint's rows (a resumed run drops what it logged after that checkpoint)."""
        write_jsonl_atomic(self.path, rows)
