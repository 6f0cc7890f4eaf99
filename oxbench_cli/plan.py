"""What ``--plan`` prints: each cell's status and estimated cost, and the summary table of records."""

from __future__ import annotations

import statistics
from pathlib import Path

from rich.table import Table

from oxbench.grid.record import arm_label
from oxbench.grid.runs import read_record, run_dir, stale_data
from oxbench.grid.spec import (
    grid_size,
    representatives,
)
from oxbench_cli.app import out_console


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


def _estimate_seconds(cfg, plan=None) -> float:
    """One cell's CPU estimate (:func:`oxbench.engine.cost.cpu_seconds`), from its resolved plan."""
    from oxbench.engine.cost import cpu_seconds
    from oxbench.engine.plan import resolve

    plan = plan or resolve(cfg, live=False)
    return cpu_seconds(cfg, online=plan.caps.online, pairs=plan.caps.data in ("pairs", "unpaired"))


def print_plan(cells, out: Path) -> dict:
    from oxbench.engine.plan import resolve

    table = Table(title=f"plan: {len(cells)} cells -> {out}")
    arm_keys = sorted({k for c in cells for k in c.arm_keys})
    plans = [resolve(c, live=False) for c in cells]  # once per cell: its capabilities and its cost
    budgeted = any(p.caps.online for p in plans)
    short = {"online.n": "n", "online.prompts_per_batch": "B_p"}
    cols = ("#", "run_id", "scale", "method", *(short.get(k, k.split(".")[-1]) for k in arm_keys), "seed")
    for col in (*cols, *(("M", "C (rollouts)") if budgeted else ()), "status", "est."):
        table.add_column(col, overflow="fold")
    counts: dict[str, int] = {}
    total = 0.0
    for i, (c, plan) in enumerate(zip(cells, plans)):
        st = _status(c, out)
        counts[st] = counts.get(st, 0) + 1
        est = 0.0 if st == "finished" else _estimate_seconds(c, plan)
        total += est
        arm = c.arm()
        compute = (str(c.online.rounds), f"{c.online.rollouts():,}") if plan.caps.online else ("", "")
        table.add_row(
            str(i + 1),
            c.run_id(),
            c.model.name,
            c.method,
            *(str(arm.get(k, "")) for k in arm_keys),
            str(c.seed),
            *(compute if budgeted else ()),
            st,
            f"{est / 60:.1f}m",
        )
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
