"""``oxbench``: run grids and single cells, list the loss registry, write reports.

Bad input (malformed grid, unknown method/model/task, missing file) is one line on stderr
and exit code 2. A grid with any failed cell exits 1 after recording and summarising it.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from oxbench.grid.record import arm_label
from oxbench.grid.runs import inspect_record, read_record, run_dir, stale_data
from oxbench.grid.spec import (
    REPORT_METRICS,
    REPORT_OPTIONS,
    ClusterOptions,
    GridError,
    ReportOptions,
    expand,
    grid_size,
    load_grid,
    load_report_options,
    load_run_config,
    representatives,
)
from oxbench.utils import (
    CacheUnusable,
    UnsafeFile,
    cache_root,
    probe_writable,
    read_jsonl_checked,
    write_json_atomic,
)

# Heavy libraries (torch, transformers, the engine) are imported only where a command trains or loads a
# loss: --help, losses, --plan and every bad-input error read the loss registry's index
# (losses.info, losses/index.json) and answer without torch (tests/test_cli_fast.py).

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="oxbench: a controlled benchmark harness for LLM post-training algorithms.",
)
# markup=False: every message is literal text. Errors carry torch's "[rank0]:" prefixes, bracketed
# paths and whatever a plugin raised; as markup they would be restyled or end the grid (MarkupError).
out_console = Console(width=max(120, Console().width), markup=False, highlight=False)
err_console = Console(stderr=True, markup=False, highlight=False)
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), 127) if chr(c) not in "\n\t"}


def literal(text) -> str:
    """``text`` as printable characters: control characters (an ANSI escape, a carriage return that
    would overwrite the line) shown as ``\\xNN``."""
    return str(text).translate(_CONTROL)


def tagged(tag: str, style: str, msg) -> Text:
    """``tag`` in ``style``, then ``msg`` as literal text."""
    return Text.assemble((tag, style), " ", literal(msg))


def fail(msg: str, code: int = 2):
    err_console.print(tagged("error:", "red", msg), soft_wrap=True)
    raise typer.Exit(code)


def _load_plugins(plugins: list[str]) -> None:
    if not plugins:
        return
    import losses
    from oxbench.plugins import load_plugins

    try:
        load_plugins(plugins)
    except losses.LossError as exc:
        fail(str(exc))


def _status(cfg, out: Path) -> str:
    d = run_dir(out, cfg.grid, cfg.run_id())
    rec = read_record(d)
    if rec is None:  # an unreadable record (truncated, binary, not an object) runs again
        return "corrupt" if (d / "run.json").exists() else "todo"
    if rec["status"] == "finished" and stale_data(rec):  # trained on other bytes: runs again
        return "stale"
    return rec["status"]


def _stale_note(counts: dict[str, int]) -> str:
    n = counts.get("stale", 0)
    return f"; stale, trained on data that has changed since: {n}" if n else ""


def _estimate_seconds(cfg) -> float:
    """A rough CPU estimate of one cell: FLOPs = 6 x params x training tokens + 2 x params x
    generated tokens x 20 (decoding is latency-bound), then ``26 s + FLOPs / 94 GFLOP/s``.

    The two constants are a least-squares fit to the 108 cells of an early ``oxrl_core`` run (one
    thread per cell, two cells side by side on a 2-core CPU; process start-up included): per
    scale the fit's mean is within 10% of the measured one (tiny-xs 28 vs 26 s, tiny-l 161 vs
    160 s). Shared pre-training and self-play are not included. GPU runs are far faster."""
    import re

    from oxbench.models.tiny import LADDER

    if cfg.model.name in LADDER:
        hidden, layers = LADDER[cfg.model.name][:2]
        params = 12 * layers * hidden**2
    else:
        m = re.search(r"(\d+(?:\.\d+)?)[bB]", cfg.model.name)
        params = float(m.group(1)) * 1e9 if m else 1e9
    seq = 130 if cfg.task.name == "arith" else 400
    from oxbench.engine.plan import resolve

    spec = (plan := resolve(cfg, live=False)).spec
    o = cfg.online
    if plan.caps.online:
        train_tokens = o.prompts_per_batch * o.n * o.rounds * o.inner_epochs * seq
        gen_tokens = o.prompts_per_batch * o.n * o.rounds * o.max_new_tokens
    else:
        n = cfg.data.n_train or (7473 if cfg.task.name == "gsm8k" else 1000)
        train_tokens = n * cfg.train.epochs * seq * (2 if spec.data in ("pairs", "unpaired") else 1)
        gen_tokens = 0
    e = cfg.eval
    n_test = e.n_test or 1319
    gen_tokens += (
        n_test + (e.n_ood if cfg.task.name == "arith" else 0) + e.n_sampled * e.n_samples
    ) * e.max_new_tokens
    flops = 6 * params * train_tokens + 2 * params * gen_tokens * 20  # decoding is latency-bound: x20
    return 26 + flops / 9.4e10


def _online_cell(cfg) -> bool:
    from oxbench.engine.plan import resolve

    return resolve(cfg, live=False).caps.online


def print_plan(cells, out: Path) -> dict:
    table = Table(title=f"plan: {len(cells)} cells -> {out}")
    arm_keys = sorted({k for c in cells for k in c.arm_keys})
    budgeted = any(_online_cell(c) for c in cells)
    short = {"online.n": "n", "online.prompts_per_batch": "B_p"}
    cols = ("#", "run_id", "scale", "method", *(short.get(k, k.split(".")[-1]) for k in arm_keys), "seed")
    for col in (*cols, *(("M", "C (rollouts)") if budgeted else ()), "status", "est."):
        table.add_column(col, overflow="fold")
    counts: dict[str, int] = {}
    total = 0.0
    for i, c in enumerate(cells):
        st = _status(c, out)
        counts[st] = counts.get(st, 0) + 1
        est = 0.0 if st == "finished" else _estimate_seconds(c)
        total += est
        arm = c.arm()
        compute = (str(c.online.rounds), f"{c.online.rollouts():,}") if _online_cell(c) else ("", "")
        table.add_row(str(i + 1), c.run_id(), c.model.name, c.method, *(str(arm.get(k, "")) for k in arm_keys),
                      str(c.seed), *(compute if budgeted else ()), st, f"{est / 60:.1f}m")  # fmt: skip
    out_console.print(table)
    out_console.print(
        f"finished {counts.get('finished', 0)}, to run {len(cells) - counts.get('finished', 0)} "
        f"(failed before: {counts.get('failed', 0)}{_stale_note(counts)}); estimated {total / 60:.0f} min of cell time on CPU (divide by --workers; shared pre-training "
        "not included)"
    )
    return counts


PLAN_LIST_MAX = 5_000  # a --plan lists each cell up to this many; past it, a summary in bounded memory


def _print_large_plan(g, where: str, out: Path) -> None:
    """``--plan`` of a grid past :data:`PLAN_LIST_MAX` cells: its size, the cells checked (every value
    of every axis at least once, :func:`~oxbench.grid.spec.representatives`), the records already
    under ``out`` and a cost extrapolated from the checked cells; nothing is built per cell."""
    n, checked = grid_size(g), representatives(g, where)
    found: dict[str, int] = {}
    for path in (out / g.name).glob("*/run.json") if (out / g.name).is_dir() else []:
        status = (read_record(path.parent) or {}).get("status", "corrupt")
        found[status] = found.get(status, 0) + 1
    mean = sum(_estimate_seconds(c) for c in checked) / len(checked)
    axes = ", ".join(f"{name} ({len(values)})" for name, values in g.axes.items())
    out_console.print(
        f"plan: {n:,} cells -> {out / g.name} (a plan lists at most {PLAN_LIST_MAX:,}; this is its summary)"
    )
    out_console.print(f"axes: {axes}" + (f"; variants: {len(g.variants)}" if g.variants else ""))
    out_console.print(
        f"checked: {len(checked)} cells taking every value of every axis (each cell is checked in full before it runs)"
    )
    records = ", ".join(f"{k} {v:,}" for k, v in sorted(found.items())) or "none"
    done = found.get("finished", 0)
    out_console.print(
        f"records under {out / g.name}: {records}; to run at least {n - done:,} (stale records not counted: list a smaller grid)"
    )
    out_console.print(
        f"estimated {mean * (n - done) / 60:,.0f} min of cell time on CPU (the checked cells' mean; divide by --workers)"
    )


def summary_table(records: list[dict], title: str) -> Table:
    """Mean ± std over seeds per scale x arm (the method, plus the grid axes that vary: seeds of one
    arm only are pooled): chance, the base model, greedy strict accuracy and its verified (working
    checked) and flexible forms, OOD, best@k."""
    cells: dict[tuple, list[dict]] = {}
    for r in records:
        cells.setdefault((r.get("scale"), arm_label(r.get("arm"), str(r.get("method")))), []).append(r)
    t = Table(title=title)
    for col in (
        "scale",
        "method",
        "seeds",
        "chance",
        "base",
        "accuracy",
        "verified",
        "flexible",
        "ood",
        "best@k",
        "failed",
    ):
        t.add_column(col, no_wrap=True)

    def fmt(vals):
        vals = [v for v in vals if v is not None]
        if not vals:
            return "-"
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        return f"{100 * statistics.mean(vals):.1f} ± {100 * sd:.1f}"

    for (scale, method), rs in sorted(cells.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        ok = [r for r in rs if r.get("status") == "finished"]
        m = [r.get("metrics") or {} for r in ok]
        best = next((k for k in (m[0] if m else {}) if k.startswith("best_at_")), None)
        t.add_row(
            str(scale),
            str(method),
            str(len(ok)),
            fmt([x.get("chance") for x in m]),
            fmt([x.get("base_accuracy") for x in m]),
            fmt([x.get("accuracy") for x in m]),
            fmt([x.get("accuracy_verified") for x in m]),
            fmt([x.get("accuracy_flexible") for x in m]),
            fmt([x.get("ood_accuracy") for x in m]),
            fmt([x.get(best) for x in m]) if best else "-",
            str(len(rs) - len(ok)),
        )
    return t


_OPT = typer.Option  # the run command's options, one line each below
RUN_HELP = {
    "out": "Where run records go: OUT/<grid>/<run_id>/. The default, runs/, is git-ignored; committed studies "
    "are written with --out results.",
    "nproc": "Processes per cell (torchrun), e.g. 2 for ZeRO across 2 ranks. Default 1.",
    "nnodes": "Nodes per cell: --nproc ranks on each, joined by c10d. Default 1.",
    "zero": "Run the cells at this ZeRO stage (0-3) instead of train.zero_stage.",
    "fresh": "local: a fresh process per cell instead of warm workers that import once.",
    "rerun": "Train finished cells again (each old record kept as run.replaced.json).",
}


@dataclass(frozen=True)
class Launch:
    """How a grid's cells run: where, how many at once, laid out how, asking for what."""

    executor: str
    workers: int
    nproc: int
    nnodes: int
    resources: object  # oxbench.grid.clusters.Resources
    ray_address: str | None = None
    slurm_cluster: str | None = None
    warm: bool = True


@app.command()
def run(
    grid: Path | None = _OPT(None, "--grid", help="A grid recipe (recipes/*.yaml)."),
    config: Path | None = _OPT(None, "--config", help="A single-cell RunConfig YAML/JSON."),
    out: Path = _OPT(Path("runs"), "--out", help=RUN_HELP["out"]),
    plan: bool = _OPT(False, "--plan", help="Print the cells and their status; run nothing."),
    executor: str = _OPT("local", "--executor", help="local | ray | slurm"),
    workers: int = _OPT(1, "--workers", help="Cells run at once (local, ray)."),
    nproc: int | None = _OPT(None, "--nproc", help=RUN_HELP["nproc"]),
    nnodes: int | None = _OPT(None, "--nnodes", help=RUN_HELP["nnodes"]),
    zero: int | None = _OPT(None, "--zero-stage", help=RUN_HELP["zero"]),
    ray_address: str | None = _OPT(None, "--ray-address", help="An existing Ray cluster."),
    slurm_cluster: str | None = _OPT(None, "--slurm-cluster", help="submitit cluster (local|slurm)."),
    plugin: list[str] = _OPT([], "--plugin", help="Import a module that defines LossSpecs."),
    fresh: bool = _OPT(False, "--fresh", help=RUN_HELP["fresh"]),
    rerun: bool = _OPT(False, "--rerun", help=RUN_HELP["rerun"]),
    gpus_per_rank: int | None = _OPT(None, "--gpus-per-rank", help="ray, slurm: GPUs per rank (default 0)."),
    cpus_per_rank: int | None = _OPT(None, "--cpus-per-rank", help="ray, slurm: CPUs per rank (default 1)."),
    partition: str | None = _OPT(None, "--partition", help="slurm: the partition."),
    account: str | None = _OPT(None, "--account", help="slurm: the account."),
    qos: str | None = _OPT(None, "--qos", help="slurm: the QOS."),
    sbatch: list[str] = _OPT([], "--sbatch", help="slurm: one more #SBATCH option (--key=value)."),
):
    """Run a grid (cells in warm worker processes, one cell at a time each) or a single cell (in this process)."""
    layout = {"nproc": nproc, "nnodes": nnodes, "zero_stage": zero}
    asks = {"gpus_per_rank": gpus_per_rank, "cpus_per_rank": cpus_per_rank}
    given = {**layout, **asks, "partition": partition, "account": account, "qos": qos}
    _check_run_options(executor, workers, out, given)
    _load_plugins(plugin)
    if (grid is None) == (config is None):
        fail("give exactly one of --grid FILE or --config FILE")
    if config is not None:
        _cluster(ClusterOptions(), given, sbatch)  # its --zero-stage (it runs here: no ranks, no requests)
        _run_single(config, out, plan, rerun)
        return
    g, cells = _grid_cells(grid, out, plan)
    nproc, nnodes, resources = _cluster(g.cluster, given, sbatch)
    launch = Launch(executor, workers, nproc, nnodes, resources, ray_address, slurm_cluster, not fresh)
    _run_grid(g, cells, out, launch, plan, rerun)


def _grid_cells(grid: Path, out: Path, plan: bool):
    """The grid file and its cells; a plan too large to list is summarised here and the command ends."""
    try:
        g = load_grid(grid)
        if plan and grid_size(g) > PLAN_LIST_MAX:  # a summary: building each cell would take minutes
            _print_large_plan(g, str(grid), out)
            raise typer.Exit(0)
        return g, expand(g, str(grid))
    except GridError as exc:
        fail(str(exc))


def _run_grid(g, cells, out: Path, launch: Launch, plan: bool, rerun: bool) -> None:
    """The plan, then (unless ``plan``) every cell not finished, then the summary and the report."""
    if not plan:
        _check_out_writable(out)
    print_plan(cells, out)
    if launch.executor != "local":
        _print_requests(cells, launch.nproc, launch.resources, launch.executor, launch.nnodes)
    _warn_missing_trackers(cells)
    if plan:
        return
    if rerun:
        _retire(cells, out)
    todo = [c for c in cells if _status(c, out) != "finished"]
    with _stoppable() as stop:
        try:
            records = _execute(todo, out, launch)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGUSR1 (a scheduler's pre-emption)
            _report_stopped(todo, out, stop.get("signal", "SIGINT"))
    _grid_summary(g.name, cells, records, out, g.report)


def _grid_summary(name: str, cells, records: list[dict], out: Path, report: ReportOptions) -> None:
    """After a grid: the leaderboard, one line per failed cell, the report; exit 1 on a failure (2 when
    every failure was bad input)."""
    done = [read_record(run_dir(out, c.grid, c.run_id())) or {} for c in cells]
    out_console.print(summary_table(done, f"{name}: accuracy (%) mean ± std over seeds"))
    failed = [r for r in records if r.get("status") not in ("finished", "locked")]
    elsewhere = [r["run_id"] for r in records if r.get("status") == "locked"]
    if elsewhere:
        err_console.print(
            f"{len(elsewhere)} cell(s) were running in another oxbench process: {', '.join(elsewhere)}"
        )
    for r in failed:
        err_console.print(tagged("failed", "red", f"{r.get('run_id')}: {r.get('error')}"), soft_wrap=True)
    if any(r.get("status") == "finished" for r in done):
        _report_and_say(out / name, report)
    if failed:  # bad input found only once its data was measured (an empty data.subset) exits 2
        raise typer.Exit(2 if all(_bad_input(r.get("error")) for r in failed) else 1)


def _warn_missing_trackers(cells) -> None:
    """A ``track:`` backend whose package is missing: one line now (each run then logs to its records)."""
    import importlib.util

    from oxbench.tracking import PACKAGES

    for backend in sorted({b for c in cells for b in c.track}):
        if importlib.util.find_spec(PACKAGES[backend]) is None:
            err_console.print(
                tagged(
                    "warning",
                    "yellow",
                    f"track: {backend} is not installed (pip install 'oxbench[track]'); "
                    "runs log to their records only",
                ),
                highlight=False,
            )


@contextlib.contextmanager
def _stoppable():
    """While a grid runs, SIGTERM and SIGUSR1 stop it as Ctrl-C does: the running cells are signalled
    in turn, checkpoint and record ``preempted``; queued cells never start."""
    stop: dict = {}

    def handler(signum, frame):
        if "signal" in stop:  # a second signal while the cells stop: let them finish recording it
            return
        stop["signal"] = signal.Signals(signum).name
        raise KeyboardInterrupt(stop["signal"])

    before = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        yield stop
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def _report_stopped(todo, out: Path, name: str) -> None:
    """One line on how the grid was left, then exit 128 + the signal's number."""
    status = [(read_record(run_dir(out, c.grid, c.run_id())) or {}).get("status") for c in todo]
    other = [f"{status.count(s)} {s}" for s in ("finished", "failed", "running") if status.count(s)]
    err_console.print(
        f"stopped by {name}: {status.count('preempted')} cell(s) preempted (resumed from their latest "
        f"checkpoint), {''.join(o + ', ' for o in other)}{status.count(None)} not run; "
        "run the same command again to go on",
        highlight=False,
    )
    raise typer.Exit(128 + getattr(signal, name))


EXECUTORS = ("local", "ray", "slurm")  # checked by _check_run_options before _execute picks one


def _check_choice(option: str, kind: str, value: str, choices: tuple[str, ...], known: str) -> None:
    """``value`` given to ``option`` is one of ``choices``; else one line (exit 2) naming the closest
    choice, or ``known`` when none is close."""
    if value not in choices:
        close = difflib.get_close_matches(value, choices, n=1)
        fail(
            f"{option}: unknown {kind} {value!r}"
            + (f"; did you mean {close[0]!r}?" if close else f" ({known})")
        )


def _check_run_options(executor: str, workers: int, out: Path, given: dict | None = None) -> None:
    """The command line's own values, before the plan prints: one line each, exit 2."""
    _check_choice("--executor", "executor", executor, EXECUTORS, "local, ray or slurm")
    given = given or {}
    lowest = {"workers": 1, "nproc": 1, "nnodes": 1, "gpus_per_rank": 0, "cpus_per_rank": 1}
    for name, low in lowest.items():
        value = workers if name == "workers" else given.get(name)
        if value is not None and value < low:
            fail(f"--{name.replace('_', '-')}: must be >= {low}, got {value}")
    if given.get("zero_stage") not in (None, 0, 1, 2, 3):
        fail(f"--zero-stage: must be 0, 1, 2 or 3, got {given['zero_stage']}")
    if out.exists() and not out.is_dir():
        fail(f"--out {out}: exists and is not a directory")
    parent = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not os.access(parent, os.W_OK | os.X_OK):
        fail(f"--out {out}: {parent} is not writable")


def _cluster(options, given: dict, sbatch: list[str]):
    """``(nproc, nnodes, Resources)`` of a grid's cells: each flag given on the command line, else the grid
    file's ``cluster`` section, else the default; ``--sbatch`` lines after the file's. A ZeRO stage chosen
    (``--zero-stage``, ``cluster.zero_stage``) is set in ``$OXBENCH_ZERO_STAGE`` for every cell process:
    a layout like ``--nproc`` (a cell's run_id and checkpoints are the same at every stage)."""
    from oxbench.config import ZERO_STAGE_ENV
    from oxbench.grid.clusters import Resources  # no torch: the executors import it where a cell runs

    file = options.model_dump()
    pick = {k: v if v is not None else file[k] for k, v in given.items()}
    if pick["zero_stage"] is not None:
        os.environ[ZERO_STAGE_ENV] = str(pick["zero_stage"])
    res = Resources(pick["gpus_per_rank"] or 0, pick["cpus_per_rank"] or 1, pick["partition"], pick["account"],
                    pick["qos"], (*file["sbatch"], *sbatch))  # fmt: skip
    return pick["nproc"] or 1, pick["nnodes"] or 1, res


def _check_out_writable(out: Path) -> None:
    """``--out`` made and written to once before any cell starts: a path that cannot be (a read-only
    mount, a path under /proc, a full disk) is one line naming it, exit 2, never a traceback."""
    try:
        probe_writable(out)
    except OSError as exc:
        fail(f"--out {out}: cannot be written ({exc.strerror or exc})")
    try:
        cache_root()  # the cache too, before any work: one line naming OXBENCH_CACHE, never a traceback
    except CacheUnusable as exc:
        fail(str(exc))


def _print_requests(cells, nproc: int, resources, executor: str, nnodes: int = 1) -> None:
    """What each cell will ask ``executor`` for (one line per distinct request)."""
    from oxbench.grid.clusters import cell_request, request_line

    asks: dict[str, int] = {}
    for c in cells:
        line = request_line(cell_request(c, nproc, resources, nnodes), resources)
        asks[line] = asks.get(line, 0) + 1
    for line, n in asks.items():
        out_console.print(f"{executor}: {n} cell(s) each request {line}", highlight=False)


def _execute(todo, out: Path, launch: Launch) -> list[dict]:
    """Run ``todo`` with ``launch``'s executor, a progress bar and one line per cell as it ends."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    count = TextColumn("{task.completed}/{task.total}")
    eta = (TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    columns = (TextColumn("{task.description}"), BarColumn(), count, *eta)
    with Progress(*columns, console=err_console) as bar:
        task, t0 = bar.add_task("cells", total=len(todo)), time.monotonic()
        return _dispatch(
            todo, out, launch, bar, lambda cfg, rec: _cell_line(bar, task, t0, len(todo), cfg, rec)
        )


def _cell_line(bar, task, t0: float, total: int, cfg, rec: dict) -> None:
    """A cell has ended: the bar moves and one line says how (its accuracy, or its error)."""
    from oxbench.utils import progress_status

    accuracy = (rec.get("metrics") or {}).get("accuracy")
    ok = rec.get("status") == "finished" and accuracy is not None
    mark = f"accuracy {100 * accuracy:.1f}%" if ok else rec.get("error")
    bar.advance(task)
    where = progress_status(int(bar.tasks[0].completed), total, time.monotonic() - t0)
    bar.console.print(literal(f"{rec.get('status', '?'):8s} {cfg.run_id()}  {mark}  [{where}]"))


def _dispatch(todo, out: Path, launch: Launch, bar, on_done) -> list[dict]:
    """The executor's run over ``todo``: the local pool (its preparations said on the bar), Ray or Slurm."""
    from oxbench.grid import clusters, executors

    layout = {"nproc": launch.nproc, "nnodes": launch.nnodes}
    if launch.executor == "ray":
        where = {"workers": launch.workers, "address": launch.ray_address}
        return clusters.run_ray(todo, out, resources=launch.resources, on_done=on_done, **where, **layout)
    if launch.executor == "slurm":
        where = {"cluster": launch.slurm_cluster, "resources": launch.resources}
        return clusters.run_slurm(todo, out, on_done=on_done, **where, **layout)

    def on_prepared(cfg, seconds, err):
        from oxbench.grid.shared import shared_label

        if err:  # the cells that need it fail with the full error; keep going
            bar.console.print(tagged("warning", "yellow", err))
        else:
            bar.console.print(f"prepared {shared_label(cfg)} in {seconds:.0f} s", highlight=False)

    pool = {"workers": launch.workers, "warm": launch.warm, "on_prepared": on_prepared}
    return executors.run_local(todo, out, on_done=on_done, **pool, **layout)


def _run_single(config: Path, out: Path, plan: bool, rerun: bool) -> None:
    """One cell in this process, under its run directory's lock (as a grid's cells): a finished cell is
    not trained again unless ``rerun``; one another process is training is left to it."""
    try:
        cfg = load_run_config(config)
    except GridError as exc:
        fail(str(exc))
    if plan:
        print_plan([cfg], out)
        return
    _check_out_writable(out)
    if rerun:
        _retire([cfg], out)
    elif _status(cfg, out) == "finished":
        out_console.print(
            f"run {cfg.run_id()} is finished ({run_dir(out, cfg.grid, cfg.run_id())}); --rerun trains it again"
        )
        return
    from oxbench.engine import distributed as D  # training: torch from here on
    from oxbench.grid.cell import run_locked

    rec = run_locked(cfg, out, say_failure=False)
    main = D.is_main()
    D.shutdown()
    if rec is None:  # its line is said: another process holds the lock
        return
    if main:
        out_console.print(summary_table([rec], f"{cfg.run_id()}"))
    if rec["status"] != "finished":
        code = 2 if _bad_input(rec["error"]) else 1
        fail(f"run {rec['run_id']} {rec['status']}: {rec['error']}", code=code)


def _retire(cells, out: Path) -> None:
    """``--rerun``: each finished cell's record set aside under its lock; a cell being trained by another
    process is left to it, said in one line."""
    from oxbench.grid.runs import retire_finished

    for c in cells:
        if retire_finished(run_dir(out, c.grid, c.run_id())) == "locked":
            err_console.print(f"run {c.run_id()} is running in another process; not rerun", soft_wrap=True)


def _bad_input(error: str | None) -> bool:
    """A cell error that is bad input (exit 2), not a failure of training (exit 1)."""
    return (error or "").startswith("SubsetError:")


losses_app = typer.Typer(add_completion=False, no_args_is_help=False)
app.add_typer(losses_app, name="losses")


@losses_app.callback(invoke_without_command=True)
def list_losses(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Every spec's metadata as JSON."),
    plugin: list[str] = typer.Option([], "--plugin", help="Import a module that defines LossSpecs."),
):
    """The loss registry: built-ins and installed plugins (``new`` and ``check``: a contributor's loop)."""
    import losses

    _load_plugins(plugin)
    if ctx.invoked_subcommand is not None:
        return
    try:
        specs = losses.all_info()  # the index's built-ins (no torch) and the plugins' live specs
    except losses.LossError as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps([s.metadata() for s in specs], indent=2) + "\n")
        return
    t = Table(title=f"{len(specs)} losses")
    for col in ("name", "paradigm", "data", "reference", "paper", "v"):
        t.add_column(col, overflow="fold")
    for s in specs:
        t.add_row(s.name, s.paradigm, s.data, "yes" if s.needs_reference else "no", s.paper, str(s.version))
    out_console.print(t)


@losses_app.command("new")
def losses_new(
    name: str = typer.Argument(
        ..., help="The loss's name, as grids will write it (a lower-case identifier)."
    ),
    directory: Path = typer.Option(Path("."), "--dir", help="Where the package directory goes."),
):
    """Write a new loss as a plugin package: module, hand-computed test, entry point."""
    from oxbench.scaffold import new_loss

    try:
        root = new_loss(name, directory)
    except ValueError as exc:
        fail(str(exc))
    out_console.print(f"wrote {root}: edit oxbench_{name}/__init__.py, then\n"
                      f"  pip install -e {root} && oxbench losses check {name} && pytest {root}/tests", highlight=False)  # fmt: skip


@losses_app.command("check")
def losses_check(
    target: str = typer.Argument(..., help="MODULE:ATTR (e.g. my_module:spec) or a registered loss name."),
    fast: bool = typer.Option(False, "--fast", help="Skip the three trainer steps (rule 'trains')."),
):
    """Run the loss contract on a spec; each broken rule is one line naming it (exit 1)."""
    import losses
    from oxbench.losscheck import RULES, check, load_spec

    try:
        spec = load_spec(target)
    except (ImportError, AttributeError, losses.LossError) as exc:
        fail(f"{target}: {type(exc).__name__}: {exc}")
    failures = check(spec, [r for r in RULES if not (fast and r == "trains")])
    for line in failures:
        err_console.print(tagged("broken", "red", f"{spec.name}: {line}"), soft_wrap=True)
    if failures:
        raise typer.Exit(1)
    out_console.print(
        f"{spec.name}: every rule holds ({', '.join(r for r in RULES if not (fast and r == 'trains'))})"
    )


@app.command()
def pretrain(
    scale: str = typer.Argument(..., help="A tiny rung (tiny-xs, tiny-s, tiny-m, tiny-l)."),
    recipe: Path = typer.Option(
        Path("recipes/quickstart.yaml"), "--recipe", help="Whose pre-training settings."
    ),
    check: bool = typer.Option(False, "--check", help="Compare with the shipped base; write nothing."),
):
    """Pre-train SCALE's base from scratch as RECIPE sets it up. With --check, say whether it equals the
    shipped base bit for bit (exit 1 if not); without, ship it (oxbench/models/bases/<key>/)."""
    import tempfile

    from oxbench.models import shipped
    from oxbench.models.loading import pretrain_config
    from oxbench.models.pretrain import ensure_pretrained

    try:
        cell = next((c for c in expand(load_grid(recipe), str(recipe)) if c.model.name == scale), None)
    except GridError as exc:
        fail(str(exc))
    if cell is None:
        fail(f"{recipe}: no cell at scale {scale!r}")
    pcfg = pretrain_config(cell)
    key, before = pcfg.key(), os.environ.get("OXBENCH_CACHE")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["OXBENCH_CACHE"] = tmp  # trained from scratch: neither the cache nor the shipped copy
        try:
            built = ensure_pretrained(pcfg, use_shipped=False)
            _report_pretrain(shipped, built, scale, key, check)
        finally:
            os.environ.pop("OXBENCH_CACHE") if before is None else os.environ.update(OXBENCH_CACHE=before)


def _report_pretrain(shipped, built: Path, scale: str, key: str, check: bool) -> None:
    if not check:
        out_console.print(f"shipped {scale} base {key}: {shipped.ship(built, key)}")
        return
    ref = shipped.shipped(key)
    if ref is None:
        fail(f"no shipped base for {scale} key {key} (run without --check to ship it)")
    same, diff = shipped.same_weights(built, ref)
    out_console.print(f"{scale} base {key}: " + ("equals the shipped base bit for bit" if same
                      else f"differs from the shipped base (largest |difference| {diff:.3g})"))  # fmt: skip
    if not same:
        raise typer.Exit(1)


@app.command()
def status(
    directory: Path = typer.Argument(..., help="A grid's output directory (e.g. runs/quickstart)."),
    grid: Path | None = typer.Option(None, "--grid", help="The grid file: also list the cells not started."),
):
    """A study in progress, from its records alone: each cell (finished, running at which step,
    pre-empted with its checkpoint, failed with its error, to run) and the partial leaderboard."""
    if not directory.is_dir():
        fail(f"{directory}: no such results directory")
    known = {p.parent.name: p.parent for p in sorted(directory.rglob("run.json"))}
    if grid is not None:
        try:
            cells = expand(load_grid(grid), str(grid))
        except GridError as exc:
            fail(str(exc))
        known |= {c.run_id(): None for c in cells if c.run_id() not in known}
    t = Table(title=f"{directory}: {len(known)} cells")
    for col in ("cell", "status", "where"):
        t.add_column(col, overflow="fold")
    records, counts = [], {}
    for run_id, d in known.items():
        rec, problem = inspect_record(d) if d is not None else (None, None)
        state, where = _cell_state(d, rec, problem)
        counts[state] = counts.get(state, 0) + 1
        records += [rec] if rec is not None else []
        t.add_row(run_id, state, literal(where))
    out_console.print(t)
    out_console.print(", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    finished = [r for r in records if r["status"] == "finished"]
    if finished:
        out_console.print(summary_table(records, f"{directory}: accuracy (%) so far, mean ± std over seeds"))
        _report_and_say(directory)


def _report_and_say(directory: Path, options: ReportOptions | None = None) -> None:
    """Write ``directory/report.html`` and print where it is and how to open it. ``options``: a grid's
    (saved beside its records for later reports); None: those saved, else the defaults. A report that
    cannot be written is a warning line: the records are what a run produces; the report is read from
    them."""
    try:
        if options is not None:
            write_json_atomic(directory / REPORT_OPTIONS, options.model_dump())
        options = options or load_report_options(directory) or ReportOptions()
        path = _write_report(directory, options.baseline, metric=options.metric)
    except (ValueError, OSError, GridError) as exc:
        err_console.print(tagged("warning", "yellow", f"no report: {exc}"), soft_wrap=True)
        return
    out_console.print(
        f"report: {path}  (open it: python -m webbrowser -t file://{path.resolve()})", soft_wrap=True
    )


def _write_report(directory: Path, baseline: str, strict: bool = False, metric: str = "accuracy") -> Path:
    """``analysis.report.write_report``, each bad record named once on stderr."""
    import warnings

    from analysis.report import write_report

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        path = write_report(directory, baseline=baseline, strict=strict, metric=metric)
    for w in dict.fromkeys(str(w.message) for w in seen if w.category.__name__ == "BadRecordWarning"):
        err_console.print(tagged("warning", "yellow", w), soft_wrap=True)
    return path


def _cell_state(d: Path | None, rec: dict | None, problem: str | None = None) -> tuple[str, str]:
    """(status, where it is) of one cell: a ``running`` record whose lock nobody holds was killed; a
    record that cannot be read is ``corrupt``, with its one-line ``problem``."""
    if d is None:
        return "to run", ""
    if rec is None:
        return ("corrupt", problem) if problem else ("to run", "")
    last, bad = _last_step(d / "metrics.jsonl")
    skipped = f"; {bad} bad line(s) of metrics.jsonl skipped" if bad else ""
    resumable = _resumable(d)
    if rec["status"] == "running":
        return (
            ("running", f"step {last}") if _locked(d) else ("killed", f"at step {last}{resumable}{skipped}")
        )
    if rec["status"] in ("failed", "preempted"):
        return rec["status"], f"{rec.get('error') or ''}{resumable}{skipped}"
    if rec["status"] == "finished" and (stale := stale_data(rec)):
        return "stale", stale
    return rec["status"], f"accuracy {100 * rec['metrics']['accuracy']:.1f}%{skipped}"


def _resumable(d: Path) -> str:
    """Where a rerun of the cell resumes: its newest checkpoint whose files match their SHA-256, and any
    newer one that does not (a rerun passes it over)."""
    from oxbench.engine.manifest import newest_usable

    usable, passed = newest_usable(d / "checkpoints")
    note = f" ({'; '.join(passed)}: passed over)" if passed else ""
    if usable is None:
        return f"; no usable checkpoint{note}" if passed else ""
    return f"; resumes from {usable.name}{note}"


def _locked(d: Path) -> bool:
    """Whether a process holds ``d``'s run lock (read-only: a results tree from elsewhere may be too)."""
    import fcntl

    try:
        with open(d / ".lock") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: its process is gone
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def _last_step(path: Path) -> tuple[int, int]:
    """The last step ``metrics.jsonl`` logged (0: none) and how many of its lines could not be read."""
    try:
        rows, bad = read_jsonl_checked(path, root=path.parent.parent.parent) if path.exists() else ([], 0)
    except UnsafeFile:
        return 0, 1
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int) and not isinstance(r["step"], bool)]
    return (steps[-1] if steps else 0), bad


@app.command()
def report(
    directory: Path = typer.Argument(..., help="A results directory (e.g. results/quickstart)."),
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        help="The method (or arm, e.g. 'dpo lr=1e-05') every other arm is compared with "
        "(default: the grid's report.baseline, else dpo).",
    ),
    metric: str | None = typer.Option(
        None,
        "--metric",
        help="The accuracy the leaderboard ranks and tests: "
        + ", ".join(REPORT_METRICS)
        + " (default: the grid's report.metric, else accuracy).",
    ),
    strict: bool = typer.Option(
        False, "--strict", help="A run.json that is not a valid record is an error (exit 2), not a warning."
    ),
):
    """Write DIRECTORY/report.html from the run records under it (a bad record is named and skipped)."""
    if not directory.is_dir():
        fail(f"{directory}: no such results directory")
    if (directory / "report.html").exists() and not (directory / "report.html").is_file():
        fail(f"{directory / 'report.html'}: exists and is not a file")
    if metric is not None:
        _check_choice("--metric", "metric", metric, REPORT_METRICS, f"known: {', '.join(REPORT_METRICS)}")
    try:
        saved = load_report_options(directory) or ReportOptions()
    except GridError as exc:
        fail(str(exc))
    try:
        path = _write_report(directory, baseline or saved.baseline, strict, metric or saved.metric)
    except (ValueError, OSError) as exc:  # OSError: a full disk, the report's path named
        fail(" ".join(str(exc).split()))
    out_console.print(f"wrote {path}")


@app.command("plan-seeds")
def plan_seeds(
    directory: Path | None = typer.Argument(
        None, help="Pilot records (a results directory); omit with --sd."
    ),
    baseline: str = typer.Option("dpo", "--baseline", help="The arm every other arm is compared with."),
    delta: float = typer.Option(5.0, "--delta", help="The difference to detect, in points (metric x 100)."),
    power: float = typer.Option(0.8, "--power", help="The power wanted for that difference."),
    alpha: float = typer.Option(
        0.05, "--alpha", help="The study's error rate, split by Bonferroni over pairs."
    ),
    metric: str = typer.Option("accuracy", "--metric", help="The metric the seeds vary in."),
    sd: str | None = typer.Option(
        None, "--sd", help="Seed SDs in points, 'S' or 'S_A,S_B', instead of records."
    ),
    comparisons: int = typer.Option(
        1, "--comparisons", help="With --sd: the comparisons m the α is split over."
    ),
    looks: str = typer.Option("3,5,8,12", "--looks", help="Sequential looks: seeds per arm at each."),
    spending: str = typer.Option("obrien-fleming", "--spending", help="obrien-fleming | pocock | bonferroni"),
    sd_quantile: float | None = typer.Option(
        None, "--sd-quantile", help="Plan on this upper confidence limit of σ."
    ),
):
    """How many seeds: from pilot variances, the seeds per arm to detect --delta at the corrected α with
    --power (Welch), and a sequential plan that adds seeds only to pairs not yet decided."""
    from analysis.seed_planner import plan_text  # analysis loads only for this command

    try:
        sds = [float(x) / 100 for x in sd.split(",")] if sd else []
        steps = [int(x) for x in looks.split(",")]
        text = plan_text(None if directory is None else str(directory), baseline=baseline, delta=delta / 100,
                         power=power, alpha=alpha, metric=metric, sd=sds, comparisons=comparisons, looks=steps,
                         spending=spending, sd_quantile=sd_quantile)  # fmt: skip
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    out_console.print(text, soft_wrap=True)


def main() -> None:
    """The ``oxbench`` command. A command-line value click cannot take (``--workers abc``, an unknown
    option) is one line naming the option, exit 2, instead of click's usage box."""
    usage_error = typer.BadParameter.__mro__[1]  # click's UsageError, as this typer vendors it
    try:
        code = app(standalone_mode=False)
    except usage_error as exc:
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        err_console.print(
            tagged("error:", "red", where + " ".join(exc.format_message().split())), soft_wrap=True
        )
        sys.exit(2)
    except typer.Abort:  # Ctrl-C at a prompt
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
