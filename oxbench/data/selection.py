"""Which problems a run sees besides its training data: the online prompt pool and the validation rows
of its learning curve (of the same difficulty subset as the prompts when ``data.subset`` is set)."""

from __future__ import annotations

import random

from oxbench.config import RunConfig
from oxbench.data import difficulty
from oxbench.tasks import get_task, load_task_split


def train_rows(cfg: RunConfig, n: int | None) -> list[dict]:
    """``n`` rows of the train split (None: all of it): its first ``n`` under ``seed_scope: order``; under
    ``run``, ``n`` drawn without replacement from the whole split by the run's ``subset`` seed, kept in
    the split's order. Both are rows of the same split, so the validation and test splits stay apart."""
    task, seed = cfg.task.model_dump(), cfg.seeds().get("subset")
    graded = _graded_validation(cfg)
    if (seed is None or n is None) and not graded:
        return load_task_split(task, "train", n=n, seed=0)
    pool = [r for r in load_task_split(task, "train", seed=0) if r["question"] not in graded]
    if seed is None or n is None:
        return pool[:n]
    if n > len(pool):
        raise ValueError(f"the train split has {len(pool)} problems, fewer than the {n} a run draws")
    return [pool[i] for i in sorted(random.Random(f"subset/{seed}").sample(range(len(pool)), n))]


def _graded_validation(cfg: RunConfig) -> set[str]:
    """The questions of the validation rows a run is evaluated on (``eval.split: validation``, a tune's
    cells) where they share a file with the train split (GSM8K: its end), so no run trains on them."""
    if cfg.eval.split != "validation" or not get_task(cfg.task.name).validation_in_train:
        return set()  # (arith's validation lies outside its pool)
    rows = load_task_split(cfg.task.model_dump(), "validation", n=cfg.eval.n_test, seed=0)
    return {r["question"] for r in rows}


def online_prompts(cfg: RunConfig) -> list[dict]:
    """The online prompt pool: ``online.n_prompts`` of the train split (:func:`train_rows`), without the
    validation rows (GSM8K's validation split is the end of its train file)."""
    prompts = train_rows(cfg, cfg.online.n_prompts)
    if cfg.eval.every is None or not get_task(cfg.task.name).validation_in_train:
        return prompts  # (arith's validation lies outside its pool)
    held = {r["question"] for r in validation_pool(cfg)}
    return [r for r in prompts if r["question"] not in held]


def _n_validation(cfg: RunConfig) -> int:
    return cfg.eval.n_val * (cfg.eval.val_pool if cfg.data.subset is not None else 1)


def validation_pool(cfg: RunConfig) -> list[dict]:
    return load_task_split(cfg.task.model_dump(), "validation", n=_n_validation(cfg), seed=0)


def validation_rows(cfg: RunConfig, correct: dict | None) -> list[dict]:
    """The learning curve's problems: ``eval.n_val`` of the validation split, of the same subset as the
    prompts when ``data.subset`` is set (picked from ``eval.val_pool`` times as many candidates)."""
    pool = validation_pool(cfg)
    if correct is not None:
        bins = difficulty.bins_of(cfg.task.name)
        pool = difficulty.select(pool, correct, cfg.data.subset, cfg.data.difficulty_k, bins=bins)
    return pool[: cfg.eval.n_val]
