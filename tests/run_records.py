"""Fake run records for the analysis and report tests: the fields every record has, and a grid
directory holding them as the runner writes it (``<grid>/<run_id>/run.json`` and ``eval.jsonl``)."""

from __future__ import annotations

import json
from pathlib import Path


def run_record(method: str, scale: str, seed: int, status: str = "finished", **fields) -> dict:
    """One run's ``run.json`` in grid ``g1``; ``fields`` add to the common ones (``paradigm``,
    ``scale_params``, ``metrics``, ...) or override them (``run_id``, ``lora``, ...)."""
    return {
        "run_id": f"{scale.replace('/', '_')}-{method}-s{seed}",
        "grid": "g1",
        "status": status,
        "scale": scale,
        "method": method,
        "seed": seed,
        "lora": False,
        "git_sha": "deadbeef",
        "loss_version": 1,
        **fields,
    }


def write_run(root: Path, rec: dict, sub: str | None = None, outcomes: list[dict] | None = None) -> Path:
    """``root/<sub or grid>/<run_id>/run.json`` and, with ``outcomes``, its ``eval.jsonl``."""
    path = root / (sub or rec["grid"]) / rec["run_id"]
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps(rec))
    if outcomes is not None:
        (path / "eval.jsonl").write_text("".join(json.dumps(o) + "\n" for o in outcomes))
    return path
