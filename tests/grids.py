"""The micro grids the subprocess tests run: a few steps of a micro model on a handful of problems."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_grid(
    tmp_path: Path, name: str, model_dir: str, axes: dict, *, data=(), train=(), evaluation=(), **base
) -> Path:
    """``tmp_path/g.yaml``: grid ``name`` over ``axes`` of one step on 8 problems, 4 test and 4 OOD
    problems evaluated greedily; ``data``, ``train``, ``evaluation`` (``eval``) change those sections,
    ``base``: more sections (``faults``, ...)."""
    grid = {
        "name": name,
        "base": {
            "model": {"name": model_dir},
            "data": {"n_train": 8, "max_new_tokens": 8, **dict(data)},
            "train": {"batch_size": 4, "max_steps": 1, "lr": 1e-3, **dict(train)},
            "eval": {"n_test": 4, "n_ood": 4, "k": 0, "max_new_tokens": 8, **dict(evaluation)},
            **base,
        },
        "axes": axes,
    }
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path
