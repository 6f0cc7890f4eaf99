"""Small shared helpers: hashing, atomic writes, the cache directory, progress bars."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path


def die_with_parent() -> None:  # a Popen preexec_fn: runs in the child between fork and exec (Linux)
    """The child gets SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), so nothing outlives a grid."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


def content_hash(obj, n: int = 12) -> str:
    """A short, stable digest of a JSON-able object (keys sorted)."""
    blob = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


def probe_writable(d: Path) -> None:
    """Make the directory ``d`` and write a file in it once: an ``OSError`` when it cannot be (a file where
    it belongs, read-only, a full disk), before any work depends on it."""
    d.mkdir(parents=True, exist_ok=True)
    probe = d / f".oxbench-write-probe-{os.getpid()}"
    probe.write_text("")
    probe.unlink()


_WRITABLE: set[Path] = set()  # cache roots probed by this process


class CacheUnusable(OSError):
    """The cache directory cannot be made or written: one line naming it and ``OXBENCH_CACHE``."""


def cache_root() -> Path:
    """``$OXBENCH_CACHE`` or ``~/.cache/oxbench``: pre-trained models, generated data, ref log-probs. One
    that cannot be made or written (a file where the directory belongs, read-only, no usable home) is a
    :class:`CacheUnusable` naming it."""
    given = os.environ.get("OXBENCH_CACHE")
    try:
        root = Path(given) if given else Path.home() / ".cache" / "oxbench"
        root.mkdir(parents=True, exist_ok=True)
        if root not in _WRITABLE:  # written to once per process: every cached artefact's path asks for it
            probe_writable(root)
            _WRITABLE.add(root)
    except (OSError, RuntimeError) as exc:  # RuntimeError: Path.home() with no usable home
        where = f"OXBENCH_CACHE={given}" if given else "the cache ~/.cache/oxbench (OXBENCH_CACHE unset)"
        why = getattr(exc, "strerror", None) or str(exc)
        raise CacheUnusable(
            f"{where} cannot be used ({why}); set OXBENCH_CACHE to a writable directory"
        ) from None
    return root


def naming(exc: OSError, path: Path) -> OSError:
    """``exc`` with ``path`` as its file name when it has none (a full disk's ``write``/``fsync`` error
    names no file), so its one line says which file could not be written."""
    if exc.filename is not None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), str(path)) if exc.errno else OSError(f"{path}: {exc}")


@contextlib.contextmanager
def errors_naming(path: Path):
    """Inside, an ``OSError`` that names no file is raised again naming ``path`` (see :func:`naming`)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise naming(exc, path) from exc


def write_text_atomic(path: Path, text: str, *, sealed: bool = False) -> None:
    """Write ``text`` to a temp file in the same directory, fsync, then rename it over ``path``: a
    reader sees the old file or the new one, never a part. A failed write (a full disk) leaves no temp
    file and raises an ``OSError`` naming ``path``. ``sealed``: a cached artefact, sealed
    (:func:`seal`) before it is renamed into place, so no reader ever sees it unsealed."""
    path = Path(path)
    with errors_naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            if sealed:
                seal(Path(tmp), into=path)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def temp_dir_beside(dest: Path) -> Path:
    """A new, empty directory of this process's own beside ``dest`` (hidden, ``.tmp``): two processes
    building one cache entry at once never write into one directory (see :func:`publish_dir`)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp"))


def publish_dir(tmp: Path, dest: Path) -> None:
    """Rename the finished directory ``tmp`` to ``dest`` at once; when another process published
    ``dest`` first (the same cache key: the same content), keep theirs and drop ``tmp``."""
    try:
        os.rename(tmp, dest)
    except OSError:
        if not dest.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def write_json_atomic(path: Path, obj, *, sealed: bool = False) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n", sealed=sealed)


def write_jsonl_atomic(path: Path, rows) -> None:
    write_text_atomic(path, "".join(json.dumps(row, default=str) + "\n" for row in rows))


def progress(
    iterable, description: str, *, enabled: bool = True, total: int | None = None, every_s: float = 10.0
):
    """Iterate with live progress and an ETA on stderr: a rich bar on a terminal; otherwise (a log
    file, a pipe to the grid runner) a plain line every ``every_s`` seconds and one at the end."""
    if not enabled:
        yield from iterable
        return
    total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
    if sys.stderr.isatty():
        from rich.progress import track

        yield from track(iterable, description=description, total=total, transient=True)
        return
    start = last = time.monotonic()
    done = 0
    for item in iterable:
        yield item
        done += 1
        now = time.monotonic()
        if now - last >= every_s or done == total:
            last = now
            print(progress_line(description, done, total, now - start), file=sys.stderr, flush=True)


def progress_line(description: str, done: int, total: int | None, elapsed: float) -> str:
    """``"pretrain tiny-m: 120/500 (24%), 25 s elapsed, ETA 79 s"``."""
    return f"{description}: {progress_status(done, total, elapsed)}"


def progress_status(done: int, total: int | None, elapsed: float) -> str:
    """``"120/500 (24%), 25 s elapsed, ETA 79 s"`` (``"120 done, 25 s elapsed"`` without a total)."""
    if not total:
        return f"{done} done, {elapsed:.0f} s elapsed"
    eta = elapsed / max(1, done) * (total - done)
    return f"{done}/{total} ({100 * done / total:.0f}%), {elapsed:.0f} s elapsed, ETA {eta:.0f} s"


# ------------------------------------------------------------------ reading what others wrote
RECORD_LIMIT = 16 * 2**20  # a run.json (the committed ones are under 100 KiB)
JSONL_LIMIT = 512 * 2**20  # a metrics.jsonl or eval.jsonl (the committed ones are under 3 MiB)
MAX_DEPTH = 64  # nesting of one JSON value (a record is about 5 deep)


class UnsafeFile(ValueError):
    """A file that cannot be read as a record: its one-line message names it (``path``) and says why
    (``reason``)."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def read_bytes_checked(path: Path, limit: int, root: Path | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them. A pipe, device, socket or
    directory, a link that leads out of ``root`` (or any link when ``root`` is None), or a file over
    ``limit`` raises :class:`UnsafeFile`: a FIFO never hangs the reader, ``/dev/zero`` is never read."""
    path = Path(path)
    if path.is_symlink():
        target = path.resolve()
        if root is None or not target.is_relative_to(Path(root).resolve()):
            raise UnsafeFile(path, f"a link out of the tree (to {target})")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, and is refused below
    except OSError as exc:
        raise UnsafeFile(path, exc.strerror or str(exc)) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(path, f"not a regular file ({_kind(st.st_mode)})")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(path, f"over {limit // 2**20} MiB, the limit for this file")
    return data


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


def _too_deep(obj, limit: int = MAX_DEPTH) -> bool:
    """Whether ``obj`` nests deeper than ``limit`` (walked without recursion)."""
    stack = [(obj, 1)]
    while stack:
        x, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(x, dict | list):
            stack += [(v, depth + 1) for v in (x.values() if isinstance(x, dict) else x)]
    return False


def _parse(text: bytes):
    """One JSON value from ``text``, or ValueError (not UTF-8, not JSON, nested too deep)."""
    try:
        obj = json.loads(text.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(str(exc).splitlines()[0]) from None
    if _too_deep(obj):
        raise ValueError(f"nested deeper than {MAX_DEPTH}")
    return obj


def read_json_checked(path: Path, limit: int = RECORD_LIMIT, root: Path | None = None):
    """The JSON value in ``path`` (:func:`read_bytes_checked`), or :class:`UnsafeFile` naming it."""
    data = read_bytes_checked(path, limit, root)
    try:
        return _parse(data)
    except ValueError as exc:
        raise UnsafeFile(path, f"not JSON ({exc})") from None


def read_jsonl_checked(
    path: Path, limit: int = JSONL_LIMIT, root: Path | None = None
) -> tuple[list[dict], int]:
    """``(rows, bad)``: each line of ``path`` that is a JSON object, and how many lines were not (cut off
    mid-write, NUL bytes, not UTF-8, nested too deep): those are skipped and counted, never fatal. The
    file itself must pass :func:`read_bytes_checked`."""
    rows, bad = [], 0
    for line in read_bytes_checked(path, limit, root).split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = _parse(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(obj, dict):
            rows.append(obj)
        else:
            bad += 1
    return rows, bad


# ------------------------------------------------------------------ cached artefacts, sealed
SEAL = ".seal.json"  # a sealed directory's seal, inside it (a file's: NAME.seal.json beside it)


def _seal_path(path: Path) -> Path:
    """A file's seal beside it (``NAME.seal.json``); a directory's inside it."""
    return path / SEAL if path.is_dir() else path.with_name(path.name + SEAL)


def _members(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name != SEAL)


def sha256_file(path: Path) -> str:
    """A file's SHA-256, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _stamp(p: Path) -> list[int]:
    st = p.stat()
    return [st.st_size, st.st_mtime_ns]


def seal(path: Path, into: Path | None = None) -> None:
    """Record what a cached artefact (a file, or a directory of files) is: each file's SHA-256 and its
    stamp (size, modification time), for :func:`unseal` to check on every later use. Sealed where it is
    made, before it is renamed into place (``into``: the file's final path; a directory's seal lies
    inside it and moves with it), so a reader never meets an artefact without its seal."""
    path = Path(path)
    final = Path(into) if into is not None else path
    files = {str(p.relative_to(path) if path.is_dir() else final.name): p for p in _members(path)}
    write_json_atomic(
        _seal_path(final), {n: {"sha256": sha256_file(p), "stamp": _stamp(p)} for n, p in files.items()}
    )


def unseal(path: Path) -> str | None:
    """None when ``path`` is what its seal says, else one line saying why not (no seal, a file missing,
    added or changed). Files whose stamp is unchanged are trusted; a changed stamp costs a full hash
    (a copy or ``touch`` of the same bytes passes)."""
    path = Path(path)
    try:
        sealed = read_json_checked(_seal_path(path))
    except UnsafeFile as exc:
        return f"{path}: not sealed ({exc.reason})"
    if not isinstance(sealed, dict):
        return f"{path}: its seal is not an object"
    files = {str(p.relative_to(path) if path.is_dir() else p.name): p for p in _members(path)}
    if sorted(files) != sorted(sealed):
        return f"{path}: holds {sorted(files)}, sealed {sorted(sealed)}"
    for name, p in files.items():
        entry = sealed[name] if isinstance(sealed[name], dict) else {}
        if entry.get("stamp") != _stamp(p) and entry.get("sha256") != sha256_file(p):
            return f"{path}: {name} changed since it was cached (SHA-256 differs from its seal)"
    return None


def cache_hit(path: Path) -> bool:
    """Whether the cached artefact ``path`` can be used: it exists and is what its seal says
    (:func:`unseal`). One that is not is named in one line on stderr and removed, to be built again:
    altered weights or data never run under the key of the ones that were cached."""
    path = Path(path)
    if not path.exists():
        return False
    problem = unseal(path)
    if problem is None:
        return True
    print(f"cache (OXBENCH_CACHE): {problem}; building it again", file=sys.stderr)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    return False


_HASHED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> SHA-256, for this process


def sha256_cached(path: Path) -> str:
    """A file's SHA-256, computed once per process for each (path, size, modification time)."""
    key = (str(Path(path).resolve()), *_stamp(Path(path)))
    if key not in _HASHED:
        _HASHED[key] = sha256_file(Path(path))
    return _HASHED[key]


def warmup_cosine(total: int, warmup: int, *, min_ratio=0.0, constant=False, peak_in_warmup=False):
    """The one learning-rate schedule (a ``LambdaLR`` multiplier of ``step``): a linear warm-up over
    ``warmup`` steps, then a cosine decay to ``min_ratio`` at ``total`` (or a flat 1 with ``constant``).
    The warm-up reaches 1 at its last step with ``peak_in_warmup`` (base pre-training), else one step
    after it (training: ``(step + 1) / (warmup + 1)``)."""
    ramp = max(1, warmup) if peak_in_warmup else warmup + 1

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / ramp
        if constant:
            return 1.0
        frac = (step - warmup) / max(1, total - warmup)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))

    return f
