"""What the cells of a grid share (a base model, its evaluation, self-play data, a difficulty
measurement), and whether it is already in the cache. The grid process asks both before it starts a
preparation process, so this module imports no torch: a grid that restarts with everything prepared
starts no preparation and loads no model (:mod:`oxbench.grid.prepare` makes what is shared)."""

from __future__ import annotations

import json
from pathlib import Path

from oxbench.config import RunConfig
from oxbench.data.difficulty import settings as difficulty_settings
from oxbench.engine.plan import resolve
from oxbench.utils import cache_root, content_hash


def shared_key(cfg: RunConfig) -> str:
    """What a cell shares with other cells: its base model and (if any) its self-play data."""
    caps = resolve(cfg, live=False).caps
    parts = {
        "model": cfg.model.name,
        "pretrain": cfg.model.pretrain.hash_view(),
        "task": cfg.task.hash_view(),
    }
    if caps.self_play_data:
        parts |= {"data": cfg.data.hash_view(), "sampling": cfg.seeds()["sampling"]}
    if "subset" in cfg.seeds() and (caps.self_play_data or cfg.data.subset is not None):
        parts |= {"subset": cfg.seeds()["subset"]}  # seed_scope run: each seed draws its own rows
    if cfg.data.subset is not None and caps.online:  # every subset of one pool shares its measurement
        parts |= {"difficulty": difficulty_settings(cfg)}
    return content_hash(parts)


def shared_label(cfg: RunConfig) -> str:
    """What :func:`shared_key` stands for, in words, for progress lines."""
    if resolve(cfg, live=False).caps.self_play_data:
        return f"{cfg.model.name}: base model + self-play data (sampling seed {cfg.seeds()['sampling']})"
    return f"{cfg.model.name}: base model"


def prepared_marker(cfg: RunConfig) -> Path:
    """The file :func:`~oxbench.grid.prepare.prepare_shared` writes last: the paths it made."""
    key = content_hash({"shared": shared_key(cfg), "eval": cfg.eval.hash_view(), "seed": cfg.seeds()["eval"]})
    return cache_root() / "prepared" / f"{key}.json"


def is_prepared(cfg: RunConfig) -> bool:
    """Whether the shared work of ``cfg`` has been made and everything it made is still in the cache
    (then the grid skips the preparation process). A stale answer costs nothing worse than the cell
    preparing for itself."""
    try:
        paths = json.loads(prepared_marker(cfg).read_text())["paths"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all(Path(p).exists() for p in paths)
