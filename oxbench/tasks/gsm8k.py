"""Load GSM8K-format problems (``{"question": str, "answer": str}``) from anywhere.

``load_gsm8k(source, split, limit)`` accepts:

* a ``.jsonl`` file (one JSON object a line; blank lines are skipped),
* a ``.json`` file holding a list of objects (or an object mapping split names to lists),
* a ``.parquet`` file (read with pandas/pyarrow, else with ``datasets``),
* a directory holding ``{split}.jsonl``, ``{split}.parquet`` or ``{split}.json``, or the
  Hugging Face layout ``**/{split}-*.parquet`` (shards are concatenated in name order),
* a Hugging Face dataset id such as ``openai/gsm8k``, loaded with
  ``datasets.load_dataset(source, "main", split=split)``.

Every row must carry ``question`` and ``answer`` strings; any other fields are kept. Rows
without an ``id`` get ``gsm8k-{split}-{i}`` (``i`` = 0-based position in the source; for a
single file the split defaults to the file's stem, for a directory or a Hub id to ``test``).
Problems are reported as :class:`~oxbench.tasks.errors.TaskError` with one line naming the
file, the line (JSONL, JSON) or row (parquet, Hub) and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

from oxbench.tasks.errors import TaskError, TaskFileNotFoundError

REQUIRED_FIELDS = ("question", "answer")
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")

# A located row: (where it came from, e.g. "test.jsonl: line 3", the raw value).
Located = tuple[str, object]


def default_gsm8k_dir() -> Path:
    """``$OXBENCH_GSM8K_DIR``, else ``<repo>/../shared/data/gsm8k`` (where the project keeps real GSM8K)."""
    import os

    env = os.environ.get("OXBENCH_GSM8K_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"


def load_gsm8k(source: str, split: str | None = None, limit: int | None = None) -> list[dict]:
    """Problems from ``source`` (file, directory or Hub id), first ``limit`` only if given."""
    if limit is not None and limit < 0:
        raise TaskError(f"load_gsm8k: limit must be >= 0, got {limit}")
    path = Path(source).expanduser()
    if path.is_dir():
        split = split or "test"
        located = _read_dir(path, split)
    elif path.is_file():
        split = split or path.stem
        located = _read_file(path)
    elif _looks_like_path(source):
        raise TaskFileNotFoundError(f"GSM8K data not found: {path} (no such file or directory)")
    else:
        split = split or "test"
        located = _read_hub(source, split)
    rows = [_checked(where, row, split, i) for i, (where, row) in enumerate(_take(located, limit))]
    if limit != 0:  # limit 0 asks for nothing
        _check_usable(rows, source, split)
    return rows


def _check_usable(rows: list[dict], source: str, split: str) -> None:
    """A file that parses but holds nothing to train or grade on is bad input too: no rows, or no row
    whose ``answer`` has a final answer (a ``#### N`` line or a bare number)."""
    from oxbench.tasks.grading import reference_answer

    if not rows:
        raise TaskError(f"{source}: no problems in split {split!r}")
    for row in rows:
        try:
            reference_answer(row["answer"])
            return
        except ValueError:
            continue
    raise TaskError(
        f"{source}: field 'answer' has no final answer ('#### N' or a bare number) in any of its {len(rows)} rows"
    )


def _looks_like_path(source: str) -> bool:
    """Local-path spelling (a data suffix, ``./``, ``~``, absolute, a backslash) rather than a Hub id."""
    return source.endswith(DATA_SUFFIXES) or not _HUB_ID.fullmatch(source)


def _take(located: Iterable[Located], limit: int | None) -> list[Located]:
    """The first ``limit`` rows, reading no further (a bad line past the limit is never parsed)."""
    return list(islice(located, limit))


def _checked(where: str, row: object, split: str, index: int) -> dict:
    """A copy of ``row`` with its required fields checked and an ``id`` filled in."""
    if not isinstance(row, dict):
        raise TaskError(
            f"{where}: expected a JSON object with 'question' and 'answer', got {type(row).__name__}"
        )
    for field in REQUIRED_FIELDS:
        if field not in row:
            raise TaskError(f"{where}: missing field '{field}'")
        if not isinstance(row[field], str):
            raise TaskError(f"{where}: field '{field}' must be a string, got {type(row[field]).__name__}")
    out = dict(row)
    out["id"] = str(out["id"]) if out.get("id") is not None else f"gsm8k-{split}-{index}"
    return out


def _read_file(path: Path) -> Iterator[Located]:
    readers = {".jsonl": _read_jsonl, ".json": _read_json, ".parquet": _read_parquet}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise TaskError(
            f"{path}: unsupported GSM8K file type {path.suffix!r}; expected one of {DATA_SUFFIXES}"
        )
    return reader(path)


def _read_jsonl(path: Path) -> Iterator[Located]:
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                row = json.loads(line)
            except UnicodeDecodeError as e:
                raise TaskError(f"{path}: line {number}: not UTF-8 (byte {e.object[e.start]:#04x})") from None
            except (json.JSONDecodeError, RecursionError) as e:
                why = (
                    f"{e.msg} at column {e.colno}"
                    if isinstance(e, json.JSONDecodeError)
                    else "nested too deep"
                )
                raise TaskError(f"{path}: line {number}: invalid JSON ({why})") from None
            yield f"{path}: line {number}", row


def _read_json(path: Path) -> Iterator[Located]:
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TaskError(f"{path}: not UTF-8 (byte {e.object[e.start]:#04x} at offset {e.start})") from None
    except json.JSONDecodeError as e:
        raise TaskError(f"{path}: line {e.lineno}: invalid JSON ({e.msg})") from None
    except RecursionError:
        raise TaskError(f"{path}: invalid JSON (nested too deep)") from None
    if not isinstance(data, list):
        raise TaskError(f"{path}: expected a JSON list of problems, got {type(data).__name__}")
    for number, row in enumerate(data, start=1):
        yield f"{path}: item {number}", row


def _read_parquet(path: Path) -> Iterator[Located]:
    for number, row in enumerate(_parquet_records(path), start=1):
        yield f"{path}: row {number}", row


def _parquet_records(path: Path) -> list[dict]:
    """Rows of a parquet file via pandas (pyarrow engine), else via ``datasets``."""
    try:
        import pandas as pd

        return pd.read_parquet(path).to_dict("records")
    except ImportError:
        from datasets import Dataset

        return Dataset.from_parquet(str(path)).to_list()


def split_file(source: Path, split: str) -> Path | None:
    """The one local file :func:`load_gsm8k` reads ``split`` from (a file itself, or the file a directory
    holds for it); None for a Hub id or sharded parquet."""
    if source.is_file():
        return source
    if source.is_dir():
        return next(
            (
                source / n
                for n in (f"{split}.jsonl", f"{split}.parquet", f"{split}.json")
                if (source / n).is_file()
            ),
            None,
        )
    return None


def _read_dir(path: Path, split: str) -> Iterator[Located]:
    single = split_file(path, split)
    if single is not None:
        return _read_file(single)
    shards = sorted(path.rglob(f"{split}-*.parquet"))
    if shards:
        return (item for shard in shards for item in _read_parquet(shard))
    raise TaskFileNotFoundError(
        f"GSM8K data not found: {path} has no {split}.jsonl, {split}.parquet, {split}.json or {split}-*.parquet"
    )


def _read_hub(source: str, split: str) -> Iterator[Located]:
    try:
        import datasets

        ds = datasets.load_dataset(source, "main", split=split)
    except Exception as e:  # noqa: BLE001 - any failure becomes one readable line
        reason = (str(e).strip().splitlines() or [""])[0]
        raise TaskError(
            f"could not load GSM8K {source!r} split {split!r}: not a local path, and the Hugging Face "
            f"Hub load failed ({type(e).__name__}: {reason})"
        ) from e
    for number, row in enumerate(ds, start=1):
        yield f"{source}[{split}]: row {number}", row
