"""``oxbench plan-seeds``: how many seeds each arm needs, from pilot records or a seed SD."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer

from oxbench_cli.app import app, fail, out_console

# analysis.seed_planner.SPENDING (tests/test_cli_overrides.py), named here so --help needs no pandas or scipy
Spending = Literal["obrien-fleming", "pocock", "bonferroni"]


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
    spending: Spending = typer.Option(
        "obrien-fleming", "--spending", help="The sequential looks' α-spending."
    ),
    sd_quantile: float = typer.Option(
        0.7,
        "--sd-quantile",
        help="Plan on this upper confidence limit of each pilot σ (0: the pilot's own σ).",
    ),
):
    """How many seeds: from pilot variances, the seeds per arm to detect --delta at the corrected α with
    --power (Welch), and a sequential plan that adds seeds only to pairs not yet decided."""
    from analysis.seed_planner import plan_text  # analysis loads only for this command

    try:
        sds = [float(x) / 100 for x in sd.split(",")] if sd else []
        steps = [int(x) for x in looks.split(",")]
        text = plan_text(
            None if directory is None else str(directory),
            baseline=baseline,
            delta=delta / 100,
            power=power,
            alpha=alpha,
            metric=metric,
            sd=sds,
            comparisons=comparisons,
            looks=steps,
            spending=spending,
            sd_quantile=sd_quantile or None,
        )
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    out_console.print(text, soft_wrap=True)
