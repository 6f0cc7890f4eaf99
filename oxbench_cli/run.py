"""``oxbench run``: a grid (its plan, its cells on an executor, its summary and report) or one cell."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import typer

from oxbench.grid.runs import read_record, run_dir
from oxbench.grid.spec import (
    ClusterOptions,
    GridError,
    ReportOptions,
    expand,
    grid_size,
    load_grid,
    load_run_config,
)
from oxbench.utils import (
    CacheUnusable,
    cache_root,
    probe_writable,
)
from oxbench_cli.app import _load_plugins, app, err_console, fail, literal, out_console, scores, tagged
from oxbench_cli.plan import PLAN_LIST_MAX, _print_large_plan, _status, print_plan, summary_table
from oxbench_cli.reporting import _report_and_say

_OPT = typer.Option  # the run command's options, one line each below
RUN_HELP = {
    "out": "Where run records go: OUT/<grid>/<run_id>/. The default, runs/, is git-ignored; committed studies "
    "are written with --out results.",
    "nproc": "Processes per cell (torchrun), e.g. 2 for ZeRO across 2 ranks. Default 1.",
    "nnodes": "Nodes per cell: --nproc ranks on each, joined by c10d. Default 1.",
    "zero": "Run the cells at this ZeRO stage (0-3) instead of train.zero_stage.",
    "fresh": "local: a fresh process per cell instead of warm workers that import once.",
    "rerun": "Train finished cells again (each old record kept as run.replaced.json).",
    "report": "Write the grid's report.html when its cells end (--no-report, or OXBENCH_REPORT=0: only its "
    "options, for a later 'oxbench report' or 'oxbench status'; a sweep run piece by piece writes it once).",
    "overrides": "Settings of the grid file, after it: train.lr=1e-5 (a run setting, in base), axes.seed=[0,1,2], "
    "methods.dpo.loss.beta=0.2, budget.rollouts=4096, ...; values are YAML. Validated as the file is, and "
    "recorded in each run.json (config.cli_overrides).",
}
Executor = Literal["local", "ray", "slurm"]  # typer checks the choice and lists it in --help


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
    report: bool = True


@app.command()
def run(
    grid: Path | None = _OPT(None, "--grid", help="A grid recipe (recipes/*.yaml)."),
    config: Path | None = _OPT(None, "--config", help="A single-cell RunConfig YAML/JSON."),
    overrides: list[str] | None = typer.Argument(None, metavar="KEY=VALUE", help=RUN_HELP["overrides"]),
    out: Path = _OPT(Path("runs"), "--out", help=RUN_HELP["out"]),
    plan: bool = _OPT(False, "--plan", help="Print the cells and their status; run nothing."),
    executor: Executor = _OPT("local", "--executor", help="Where the cells run."),
    workers: int = _OPT(1, "--workers", help="Cells run at once (local, ray)."),
    nproc: int | None = _OPT(None, "--nproc", help=RUN_HELP["nproc"]),
    nnodes: int | None = _OPT(None, "--nnodes", help=RUN_HELP["nnodes"]),
    zero: int | None = _OPT(None, "--zero-stage", help=RUN_HELP["zero"]),
    ray_address: str | None = _OPT(None, "--ray-address", help="An existing Ray cluster."),
    slurm_cluster: str | None = _OPT(None, "--slurm-cluster", help="submitit cluster (local|slurm)."),
    plugin: list[str] = _OPT(
        [], "--plugin", help="Import a module that defines LossSpecs, TaskSpecs or RewardSpecs."
    ),
    fresh: bool = _OPT(False, "--fresh", help=RUN_HELP["fresh"]),
    rerun: bool = _OPT(False, "--rerun", help=RUN_HELP["rerun"]),
    report: bool = _OPT(True, "--report/--no-report", envvar="OXBENCH_REPORT", help=RUN_HELP["report"]),
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
    if config is not None and overrides:
        fail(f"{overrides[0]}: KEY=VALUE overrides go after a --grid file (edit the --config file itself)")
    if config is not None:
        _cluster(ClusterOptions(), given, sbatch)  # its --zero-stage (it runs here: no ranks, no requests)
        _run_single(config, out, plan, rerun)
        return
    g, cells = _grid_cells(grid, out, plan, overrides or [])
    if overrides:
        out_console.print(literal(f"{grid} with {' '.join(overrides)}"), soft_wrap=True)
    nproc, nnodes, resources = _cluster(g.cluster, given, sbatch)
    launch = Launch(
        executor, workers, nproc, nnodes, resources, ray_address, slurm_cluster, not fresh, report
    )
    _run_grid(g, cells, out, launch, plan, rerun)


def _grid_cells(grid: Path, out: Path, plan: bool, overrides: list[str]):
    """The grid file (``overrides`` applied) and its cells; a plan too large to list is summarised here
    and the command ends."""
    try:
        g = load_grid(grid, overrides)
        if plan and grid_size(g) > PLAN_LIST_MAX:  # a summary: building each cell would take minutes
            _print_large_plan(g, str(grid), out)
            raise typer.Exit(0)
        return g, expand(g, str(grid))
    except GridError as exc:
        fail(str(exc))


def _run_grid(g, cells, out: Path, launch: Launch, plan: bool, rerun: bool) -> None:
    """The plan, then (unless ``plan``) every cell not finished, then the summary and the report. A
    grid with ``tune:`` runs its tuning cells first and then its cells at their arm's pick."""
    if not plan:
        _check_out_writable(out)
    tuning: list[dict] = []
    if g.tune is not None:
        from oxbench_cli.tuning import tune_first

        cells, tuning = tune_first(g, out, plan, lambda c: _run_cells(c, out, launch, plan, rerun))
    records = _run_cells(cells, out, launch, plan, rerun) if cells or g.tune is None else []
    if not plan:
        _grid_summary(g.name, cells, tuning + records, out, g.report, launch.report)


def _run_cells(cells, out: Path, launch: Launch, plan: bool, rerun: bool) -> list[dict]:
    """The plan of ``cells``, then (unless ``plan``) each one not finished; their records."""
    print_plan(cells, out)
    if launch.executor != "local":
        _print_requests(cells, launch.nproc, launch.resources, launch.executor, launch.nnodes)
    _warn_missing_trackers(cells)
    if plan or not cells:
        return []
    if rerun:
        _retire(cells, out)
    todo = [c for c in cells if _status(c, out) != "finished"]
    with _stoppable() as stop:
        try:
            return _execute(todo, out, launch)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGUSR1 (a scheduler's pre-emption)
            _report_stopped(todo, out, stop.get("signal", "SIGINT"))
    return []


def _grid_summary(
    name: str, cells, records: list[dict], out: Path, report: ReportOptions, write: bool = True
) -> None:
    """After a grid: the leaderboard, one line per failed cell, the report (``write`` False,
    ``--no-report``: its options alone, for a later one); exit 1 on a failure (2 when every failure was
    bad input)."""
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
        _report_and_say(out / name, report, write)
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


def _check_run_options(executor: str, workers: int, out: Path, given: dict | None = None) -> None:
    """The command line's own values, before the plan prints: one line each, exit 2 (``--executor``'s
    choice is typer's to check)."""
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
    res = Resources(
        pick["gpus_per_rank"] or 0,
        pick["cpus_per_rank"] or 1,
        pick["partition"],
        pick["account"],
        pick["qos"],
        (*file["sbatch"], *sbatch),
    )
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
    mark = scores(rec) if ok else rec.get("error")
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
