"""Which problems a run sees besides its training data: the online prompt pool and the validation rows
of its learning curve (of the same difficulty subset as the prompts when ``data.subset`` is set)."""

from __future__ import annotations

from oxbench.config import RunConfig
from oxbench.data import difficulty
from oxbench.tasks import load_task_split

VALIDATION_POOL = 10  # with data.subset: validation candidates per validation problem kept


def online_prompts(cfg: RunConfig) -> list[dict]:
    """The online prompt pool: ``online.n_prompts`` of the train split, without the validation rows
    (GSM8K's validation split is the end of its train file)."""
    prompts = load_task_split(cfg.task.model_dump(), "train", n=cfg.online.n_prompts, seed=0)
    if cfg.eval.every is None or cfg.task.name == "arith":  # arith's validation lies outside its pool
        return prompts
    held = {r["question"] for r in validation_pool(cfg)}
    return [r for r in prompts if r["question"] not in held]


def _n_validation(cfg: RunConfig) -> int:
    return cfg.eval.n_val * (VALIDATION_POOL if cfg.data.subset is not None else 1)


def validation_pool(cfg: RunConfig) -> list[dict]:
    return load_task_split(cfg.task.model_dump(), "validation", n=_n_validation(cfg), seed=0)


def validation_rows(cfg: RunConfig, correct: dict | None) -> list[dict]:
    """The learning curve's problems: ``eval.n_val`` of the validation split, of the same subset as the
    prompts when ``data.subset`` is set (picked from ``VALIDATION_POOL`` times as many candidates)."""
    pool = validation_pool(cfg)
    if correct is not None:
        pool = difficulty.select(pool, correct, cfg.data.subset, cfg.data.difficulty_k)
    return pool[: cfg.eval.n_val]
