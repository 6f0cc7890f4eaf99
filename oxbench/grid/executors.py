"""Run grid cells, each in its own process, so one crash or leak never takes the grid down.

* ``local``: a pool of ``--workers`` subprocesses on this machine.
* ``ray`` and ``slurm``: :mod:`oxbench.grid.clusters`, which starts the same processes there.

A cell of several nodes (``nnodes``) is one torchrun agent per node joined by a c10d rendezvous
(:mod:`oxbench.grid.nodes`); here, the local stand-in, they all run on this machine.

Every executor launches the same command, ``python -m oxbench.grid.cell CONFIG.json OUT``, whose
process holds an exclusive lock on the run directory while it runs and dies with its parent.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from pydantic import ValidationError

from oxbench.config import RunConfig
from oxbench.grid.nodes import Rendezvous, agent_command, free_endpoint, log_name, lost_node
from oxbench.grid.record import RunRecord
from oxbench.grid.runs import LOCKED_EXIT, read_record, run_dir, write_record
from oxbench.utils import content_hash, die_with_parent


def _config_file(cfg: RunConfig, d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".config.", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg.model_dump(), f)
    return Path(tmp)


def cell_command(cfg_file: Path, out: Path, nproc: int = 1) -> list[str]:
    """The command of a one-node cell (:func:`oxbench.grid.nodes.agent_command`)."""
    return agent_command(cfg_file, out, nproc)


def run_subprocess(cfg: RunConfig, out: Path, nproc: int = 1, workers: int = 1, nnodes: int = 1) -> dict:
    """Run one cell in a child process (``nnodes`` > 1: one torchrun agent per node, here all on this
    machine); its output goes to ``<run_dir>/train.log`` (other nodes': ``train.node<k>.log``)."""
    d = run_dir(out, cfg.grid, cfg.run_id())
    cfg_file = _config_file(cfg, d)
    rdzv = Rendezvous(nnodes, free_endpoint(), cfg.run_id()) if nnodes > 1 else None
    try:
        commands = (
            [cell_command(cfg_file, out, nproc)]
            if rdzv is None
            else [agent_command(cfg_file, out, nproc, rdzv, k) for k in range(nnodes)]
        )
        ends = run_agents(commands, d, _child_env(workers, nproc * nnodes), cfg.faults.collective_timeout_s)
    finally:
        cfg_file.unlink(missing_ok=True)
    return agents_outcome(cfg, out, ends, nnodes)


def agents_outcome(cfg: RunConfig, out: Path, ends: list[tuple[float, int, int, str]], nnodes: int) -> dict:
    """The record of a cell whose agents ended as ``ends`` ((time, node, return code, host) each): its
    own, or a failure saying why; a failed multi-node cell's error names the node that failed first."""
    d = run_dir(out, cfg.grid, cfg.run_id())
    rc = next(e[2] for e in ends if e[1] == 0)
    if nnodes == 1 and rc == LOCKED_EXIT:
        return locked_record(cfg)
    lost = lost_node(ends, nnodes) if nnodes > 1 else None
    rec = _outcome(cfg, out, lost or f"process exited with code {rc}: {_log_tail(d)}")
    killed = any(e[2] < 0 for e in ends)  # a node lost; else a pre-emption that every node obeyed stands
    blame = rec.get("status") == "failed" or (killed and rec.get("status") == "preempted")
    if lost and blame and not str(rec.get("error")).startswith(lost):
        rec = {**rec, "status": "failed", "error": f"{lost}; {rec.get('error')}"}
        with contextlib.suppress(OSError):  # a driver that does not see the cluster's output directory
            write_record(d, rec)
    return rec


def run_agents(
    commands: list[list[str]],
    d: Path,
    env: dict,
    grace_s: float,
    host: str = "localhost",
    first_node: int = 0,
) -> list[tuple[float, int, int, str]]:
    """Start one process per command (node ``first_node + k``'s, its output in ``d/log_name(node)``) and
    wait for them all; ``(end time, node, return code, host)`` each. Several nodes: each is a process group of its own (a
    node taken down whole), and once one has failed the others get ``grace_s`` + 60 s to fail on their
    own (a collective that sees the peer gone) before they are stopped."""
    procs, ends = [], {}
    for k, cmd in enumerate(commands):
        with open(
            d / log_name(first_node + k), "a"
        ) as log:  # the cell truncates train.log once it holds the lock
            procs.append(
                subprocess.Popen(
                    cmd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    preexec_fn=die_with_parent,
                    start_new_session=len(commands) > 1,
                )
            )
        RUNNING.add(procs[-1])
    try:
        failed_at = None
        while len(ends) < len(procs):  # not wait(): a signal handler (submitit's pre-emption) may wait
            time.sleep(0.2)  # for this process itself, which wait()'s held lock would block
            for k, proc in enumerate(procs):
                if k not in ends and proc.poll() is not None:
                    ends[k] = (time.time(), first_node + k, proc.returncode, host)
                    failed_at = failed_at or (time.time() if proc.returncode else None)
            if failed_at and time.time() - failed_at > grace_s + 60:
                _stop_groups([p for k, p in enumerate(procs) if k not in ends])
    finally:
        for proc in procs:
            RUNNING.discard(proc)
    return [ends[k] for k in range(len(procs))]


def _stop_groups(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


RUNNING: set[subprocess.Popen] = set()  # cell processes of run_subprocess, for an interrupted grid to stop


def interrupt_subprocesses() -> None:
    """SIGTERM every running cell process (torchrun passes it to its ranks): each checkpoints, records
    ``preempted`` and exits."""
    for proc in list(RUNNING):
        if proc.poll() is None:
            proc.terminate()


def unwritable_record(cfg: RunConfig, exc: OSError) -> dict:
    """What a cell whose run directory cannot be written returns (nothing can be recorded there): a
    one-line failure; whatever it left on disk is not ``finished``, so a rerun resumes it."""
    return {
        "run_id": cfg.run_id(),
        "status": "failed",
        "error": f"cannot write its run directory: {type(exc).__name__}: {exc}",
    }


def locked_record(cfg: RunConfig) -> dict:
    """What a cell that another process is running returns here: nothing written, nothing failed."""
    return {"run_id": cfg.run_id(), "status": "locked", "error": "running in another process"}


def _log_tail(d: Path, name: str = "train.log") -> str:
    """The last line of a cell's ``train.log`` (its error, when it died), cut to 300 characters."""
    log = d / name
    return " ".join(log.read_text().strip().splitlines()[-1:])[:300] if log.exists() else ""


def _echo_until_reply(proc: subprocess.Popen, log: Path, prefix: str) -> str:
    """Wait for ``proc``'s one-line reply, echoing each line written to ``log`` meanwhile to stderr."""
    pos, reply = 0, None
    while reply is None:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            reply = proc.stdout.readline()  # "" when the worker died
        try:
            with open(log, "rb") as f:
                f.seek(pos)
                text = f.read()
        except FileNotFoundError:
            continue
        done = text[: text.rfind(b"\n") + 1] if reply is None else text  # whole lines, all at the end
        pos += len(done)
        for line in done.decode(errors="replace").splitlines():
            if line.strip():
                print(f"{prefix}{line.strip()}", file=sys.stderr, flush=True)
    return reply


ENDED = ("finished", "failed", "preempted")  # what a cell records itself when it ends


def _outcome(cfg: RunConfig, out: Path, why: str) -> dict:
    """The cell's own record if it got to write its outcome, else a failed record saying ``why``."""
    rec = read_record(run_dir(out, cfg.grid, cfg.run_id()))
    if rec is None or rec.get("status") not in ENDED:
        rec = failed_record(cfg, out, why)
    return rec


class WarmWorker:
    """A long-lived ``python -m oxbench.grid.worker`` process that runs one cell at a time (imports paid once).

    A worker that dies mid-cell (killed, out of memory, a segfault) has its cell recorded as failed and
    is started afresh for the next cell; one that has run ``max_cells`` cells, or whose memory has grown
    past ``max_growth`` times what it held after its first cell, is retired and replaced, so a grid's
    peak memory does not grow with its number of cells."""

    def __init__(self, workers: int, max_cells: int = 32, max_growth: float = 1.5):
        self.workers, self.max_cells, self.max_growth = workers, max_cells, max_growth
        self.proc: subprocess.Popen | None = None
        self.cells, self.first_rss, self.exit_code = 0, None, None

    def _start(self) -> subprocess.Popen:
        self.cells, self.first_rss = 0, None
        return subprocess.Popen(
            [sys.executable, "-m", "oxbench.grid.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=die_with_parent,
            env=_child_env(self.workers),
        )

    def _ask(self, job: dict, tail: Path | None = None, prefix: str = "") -> dict | None:
        """Send ``job`` and wait for its reply; None if the worker died with it (then reaped, its exit
        code in ``self.exit_code``). With ``tail``, what the job writes there is echoed to stderr."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            reply = (
                self.proc.stdout.readline() if tail is None else _echo_until_reply(self.proc, tail, prefix)
            )
        except (BrokenPipeError, OSError):
            reply = ""
        if reply:
            return json.loads(reply)
        self.exit_code = self.proc.wait()
        self.proc = None
        return None

    def run(self, cfg: RunConfig, out: Path) -> dict:
        d = run_dir(out, cfg.grid, cfg.run_id())
        cfg_file = _config_file(cfg, d)
        try:
            reply = self._ask({"config": str(cfg_file), "out": str(out), "log": str(d / "train.log")})
        finally:
            cfg_file.unlink(missing_ok=True)
        if reply is None:  # the worker died with this cell
            return failed_record(
                cfg, out, f"worker process exited with code {self.exit_code}: {_log_tail(d)}"
            )
        self._maybe_retire(reply["rss_mb"])
        if reply["status"] == "locked":
            return locked_record(cfg)
        return _outcome(cfg, out, reply.get("error") or "the cell ended without recording an outcome")

    def prepare(self, cfg: RunConfig, out: Path, share: int) -> tuple[float, str | None]:
        """What ``cfg``'s cells share, made in this worker (which stays warm for the cells) on the threads
        of one of ``share`` preparations side by side; its progress lines echoed to stderr. (seconds,
        error), as :func:`_prepare_one`."""
        cfg_file = _config_file(cfg, Path(out) / ".prepare")
        log, t0 = cfg_file.with_suffix(".log"), time.monotonic()
        try:
            job = {"prepare": str(cfg_file), "log": str(log), "threads": cell_threads(share)}
            reply = self._ask(job, tail=log, prefix=f"  [{cfg.model.name}] ")
            last = _log_tail(log.parent, log.name)
        finally:
            cfg_file.unlink(missing_ok=True)
            log.unlink(missing_ok=True)
        if reply is not None and reply["status"] == "prepared":
            return time.monotonic() - t0, None
        why = (
            reply["error"]
            if reply is not None
            else f"worker process exited with code {self.exit_code}: {last}"
        )
        return time.monotonic() - t0, f"preparing {cfg.model.name} for {cfg.method}: {why}"

    def _maybe_retire(self, rss_mb: float) -> None:
        self.cells += 1
        self.first_rss = self.first_rss or rss_mb
        if self.cells >= self.max_cells or rss_mb > self.max_growth * self.first_rss:
            self.close()

    def interrupt(self) -> None:
        """End the running cell now (SIGTERM: the cell checkpoints, records ``preempted`` and returns)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def failed_record(cfg: RunConfig, out: Path, error: str) -> dict:
    """Record ``cfg``'s cell as failed with ``error`` when its process died before writing its own
    record (killed, out of memory, a lost Ray worker or Slurm job): whatever the cell had written
    (its ``running`` record) plus the identity from its config, so the record is a full
    :class:`RunRecord` that the analysis reads like any other. Returns the record written."""
    d = run_dir(out, cfg.grid, cfg.run_id())
    on_disk = read_record(d) or {}
    if on_disk.get("status") in ENDED:  # the cell got to record its own outcome
        return on_disk
    known = {k: v for k, v in on_disk.items() if k in RunRecord.model_fields}
    provenance = {
        "seeds": cfg.seeds(),
        "config": cfg.model_dump(),
        "config_hash": content_hash(cfg.identity()),
    }
    identity = {
        "run_id": cfg.run_id(),
        "grid": cfg.grid,
        "status": "failed",
        "error": error,
        "scale": cfg.model.name,
        "method": cfg.method,
        "seed": cfg.seed,
        "lora": cfg.model.lora.enabled,
        "arm": cfg.arm(),
    }
    try:
        rec = RunRecord.model_validate({**provenance, **known, **identity})
    except ValidationError:  # what is on disk is not a record: keep only what the config says
        rec = RunRecord.model_validate({**provenance, **identity})
    try:
        write_record(d, rec)
    except OSError:  # a Ray/Slurm driver that does not see the cluster's output directory
        pass
    return rec.model_dump(mode="json")


def _prepare_one(c: RunConfig, out: Path, workers: int) -> tuple[float, str | None]:
    """Pre-train / generate what one shared key needs, in a child process; (seconds, error)."""
    cfg_file = _config_file(c, Path(out) / ".prepare")
    t0 = time.monotonic()
    last = "?"
    try:
        # its progress lines (pre-training, self-play, base evaluation, each with an ETA) stream
        # through to the user; the last line is kept as the error if it fails
        with subprocess.Popen(
            [sys.executable, "-m", "oxbench.grid.cell", "--prepare", str(cfg_file)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent,
            env=_child_env(workers),
        ) as proc:
            for line in proc.stderr:
                if line.strip():
                    last = line.strip()
                    print(f"  [{c.model.name}] {last}", file=sys.stderr, flush=True)
    finally:
        cfg_file.unlink(missing_ok=True)
    if proc.returncode != 0:
        return time.monotonic() - t0, f"preparing {c.model.name} for {c.method}: {last}"
    return time.monotonic() - t0, None


def _shared_groups(cells: list[RunConfig]) -> dict[str, list[RunConfig]]:
    """One representative cell per distinct shared key, grouped by base model (file order): a
    group's keys run in order (pre-training, then the self-play data that needs it)."""
    from oxbench.grid.shared import shared_key

    reps: dict[str, RunConfig] = {}
    for c in cells:
        reps.setdefault(shared_key(c), c)
    groups: dict[str, list[RunConfig]] = {}
    for c in reps.values():
        groups.setdefault(c.model.name, []).append(c)
    return groups


DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def cell_threads(workers: int, nproc: int = 1, cores: int | None = None) -> int:
    """CPU threads per cell process: its share of the cores, ``cores // (workers x nproc)``.

    Overrides the user's ``OMP_NUM_THREADS`` (two workers that each keep 2 threads on 2 cores run
    2.5x slower than one, issue 13); ``OXBENCH_THREADS`` sets it explicitly."""
    if os.environ.get("OXBENCH_THREADS"):
        return max(1, int(os.environ["OXBENCH_THREADS"]))
    return max(1, (cores or os.cpu_count() or 1) // (max(1, workers) * max(1, nproc)))


def _child_env(workers: int, nproc: int = 1) -> dict:
    """Each cell is its own distributed world: never inherit the parent's rank or port. Each gets
    its share of the cores (:func:`cell_threads`) when cells or ranks run side by side."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env["PYTHONUNBUFFERED"] = "1"
    if workers > 1 or nproc > 1 or os.environ.get("OXBENCH_THREADS"):
        env["OMP_NUM_THREADS"] = str(cell_threads(workers, nproc))
    return env


def run_local(
    cells: list[RunConfig],
    out: Path,
    *,
    workers: int = 1,
    nproc: int = 1,
    on_done: Callable[[RunConfig, dict], None] | None = None,
    on_prepared: Callable[[RunConfig, float, str | None], None] | None = None,
    warm: bool = True,
    nnodes: int = 1,
) -> list[dict]:
    """A pool of ``workers`` slots, each a :class:`WarmWorker` (``warm``; cells of ``nproc`` > 1 and
    ``warm=False`` get a fresh process each). Each base model's shared preparation runs once, in a slot of
    its own, and that model's cells join the queue as soon as it is done, so the small scales
    train while the largest is still pre-training. A failed preparation is reported through
    ``on_prepared``; its cells still run and fail with the full error in their records."""
    pool = _LocalPool(cells, out, workers, nproc, warm, nnodes)
    threads = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        return pool.drive(threads, on_done, on_prepared)
    except BaseException:  # Ctrl-C (or an error): stop the grid now, not after every queued cell
        threads.shutdown(wait=False, cancel_futures=True)  # queued cells never start
        for w in pool.slots:
            w.interrupt()  # running cells end; they checkpoint and record preempted; a rerun resumes them
        interrupt_subprocesses()
        raise
    finally:
        threads.shutdown(wait=True)
        for w in pool.slots:
            w.close()


class _LocalPool:
    """:func:`run_local`'s parts: the shared preparations, the warm slots, and the loop over both."""

    def __init__(
        self, cells: list[RunConfig], out: Path, workers: int, nproc: int, warm: bool, nnodes: int = 1
    ):
        self.out, self.workers, self.nproc, self.nnodes = out, workers, nproc, nnodes
        self.warm = warm and nproc == 1 and nnodes == 1  # a torchrun world: a fresh process per cell
        self.groups = _shared_groups(cells)
        self.by_model: dict[str, list[RunConfig]] = {}
        for c in cells:
            self.by_model.setdefault(c.model.name, []).append(c)
        self.idle: queue.Queue[WarmWorker] = queue.Queue()
        self.slots = [WarmWorker(workers) for _ in range(max(1, workers))]
        for w in self.slots:
            self.idle.put(w)

    def prepare(self, group: list[RunConfig]) -> list[tuple[RunConfig, float, str | None]]:
        """One base model's shared work, key by key: in a warm slot (which then runs cells with its imports
        paid), or in a process of its own where cells get fresh processes."""
        from oxbench.grid.shared import is_prepared

        # preparations run side by side only with each other (cells wait for theirs): share the cores
        # among them (a lone base model pre-trains on every core; its weights are the same either way)
        share = min(max(1, self.workers), len(self.groups))
        need = [not is_prepared(c) for c in group]
        if not any(need):
            return [(c, 0.0, None) for c in group]
        w = self.idle.get() if self.warm else None  # a warm slot, as run_cell uses

        def make(c: RunConfig) -> tuple[float, str | None]:
            return _prepare_one(c, self.out, share) if w is None else w.prepare(c, self.out, share)

        try:
            return [(c, *(make(c) if n else (0.0, None))) for c, n in zip(group, need)]
        finally:
            if w is not None:
                self.idle.put(w)

    def run_cell(self, c: RunConfig) -> dict:
        try:
            if not self.warm:
                return run_subprocess(c, self.out, self.nproc, self.workers, self.nnodes)
            w = self.idle.get()
            try:
                return w.run(c, self.out)
            finally:
                self.idle.put(w)
        except OSError as exc:  # its run directory cannot be written (a full disk, a read-only mount)
            return unwritable_record(c, exc)

    def drive(self, threads: ThreadPoolExecutor, on_done, on_prepared) -> list[dict]:
        """Preparations first; each model's cells queued as its preparation ends; records in finishing order."""
        results = []
        pending = {threads.submit(self.prepare, g): ("prepare", m) for m, g in self.groups.items()}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                kind, item = pending.pop(fut)
                if kind == "prepare":
                    for c, secs, err in fut.result():
                        if on_prepared:
                            on_prepared(c, secs, err)
                    for c in self.by_model[item]:
                        pending[threads.submit(self.run_cell, c)] = ("cell", c)
                    continue
                rec = fut.result()
                results.append(rec)
                if on_done:
                    on_done(item, rec)
        return results
