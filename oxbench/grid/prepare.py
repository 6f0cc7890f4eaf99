"""What a grid's cells share, made once (:func:`prepare_shared`), and the rows each cell trains on
(:func:`prepare_data`): the base model and its evaluation, the self-play data, the difficulty
measurement. The grid runs the preparation once per :func:`~oxbench.grid.shared.shared_key` before its
cells (so parallel cells never duplicate it); every cell then finds it in the cache. Every rank of a
cell calls :func:`prepare_data`; rank 0 makes what the others then read.
"""

from __future__ import annotations

import json
from pathlib import Path

from oxbench.config import RunConfig
from oxbench.data import difficulty, formats, pipeline
from oxbench.data.selection import online_prompts, train_rows, validation_pool
from oxbench.engine import distributed as D
from oxbench.engine.plan import RunPlan, resolve
from oxbench.eval.evaluate import evaluate
from oxbench.grid.shared import prepared_marker
from oxbench.models.loading import base_model_path, load_model
from oxbench.tasks import get_task
from oxbench.utils import cache_hit, cache_root, content_hash, write_json_atomic


def on_main_first(fn):
    """Run ``fn`` on rank 0, then on the others (which then hit rank 0's cache)."""
    if D.is_main():
        result = fn()
        D.barrier()
        return result
    D.barrier()
    return fn()


def _base_eval_path(cfg: RunConfig, base_key: dict) -> Path:
    key = content_hash(
        {
            "base": base_key,
            "task": cfg.task.hash_view(),
            "eval": cfg.eval.hash_view(),
            "seed": cfg.seeds()["eval"],
            "v": 3,  # 3: the per-problem outcomes beside the metrics
        }
    )
    return cache_root() / "base_eval" / f"base-{key}.json"


def base_evaluation(cfg: RunConfig, base_path: str, base_key: dict) -> dict:
    """The untrained base model's evaluation on this cell's settings, greedy and sampled (cached by
    base and evaluation settings): ``{"metrics": {base_<metric>: ...}, "outcomes": [per problem]}``.
    Every arm of a scale shares it, so each run's gain over the base, the headroom left (best@k above
    avg@k) and, problem by problem, what training changed are visible."""
    path = _base_eval_path(cfg, base_key)
    if cache_hit(path):
        return json.loads(path.read_text())
    model, tok = load_model(
        base_path,
        cfg.model_copy(
            update={
                "model": cfg.model.model_copy(
                    update={"lora": cfg.model.lora.model_copy(update={"enabled": False})}
                )
            }
        ),
        init_seed=0,
    )
    metrics, outcomes = evaluate(
        model, tok, cfg, seed=cfg.seeds()["eval"], label=f"base {cfg.model.name} eval"
    )
    skip = ("n_test", "n_ood", "chance", "ood_chance", "sampled_problems", "samples_per_problem")
    out = {
        f"base_{k}": v
        for k, v in metrics.items()
        if k not in skip and not (k.startswith("lmeval_") and k.endswith(("_chance", "_n")))
    }
    result = {"metrics": out, "outcomes": outcomes}
    write_json_atomic(path, result, sealed=True)
    return result


def prepare_shared(cfg: RunConfig, *, verbose: bool = True) -> None:
    """Pre-train the base model and generate the self-play data a cell needs, into the cache.

    The grid runs this once per distinct :func:`~oxbench.grid.shared.shared_key` before its cells, so parallel
    cells never duplicate (or race on) the shared work.
    """
    plan = resolve(cfg)
    base_path, base_key = base_model_path(cfg, verbose=verbose)
    base_evaluation(cfg, base_path, base_key)
    made = [_base_eval_path(cfg, base_key)] + ([Path(base_path)] if Path(base_path).is_dir() else [])
    if plan.caps.self_play_data:
        model, tok = load_model(base_path, cfg, init_seed=cfg.seeds()["init"])
        _, stats = prepare_data(plan, model, tok, base_key, verbose=verbose)
        made.append(pipeline.self_play_path(stats["self_play_key"]))
    if cfg.data.subset is not None and plan.caps.online:
        model, tok = load_model(base_path, cfg, init_seed=cfg.seeds()["init"])
        difficulty.measure(
            model, tok, online_prompts(cfg) + validation_pool(cfg), cfg, base_key, verbose=verbose
        )
        made.append(difficulty.difficulty_path(cfg, base_key))
    write_json_atomic(prepared_marker(cfg), {"paths": [str(p) for p in made]})


def prepare_data(plan: RunPlan, model, tok, base_key: dict, *, verbose: bool) -> tuple[list[dict], dict]:
    """The rows this method trains on, and statistics about them. Shared by every arm of a grid."""
    cfg = plan.cfg
    if cfg.data.path is not None:  # your own rows (oxbench.data.formats): no self-play, no task rows
        if plan.caps.online:  # the file's prompts (its first online.n_prompts), rewarded by online.rewards
            return formats.prompt_rows(formats.check(cfg.data.path, "online"), tok, cfg.online.n_prompts)
        kind = plan.caps.data
        return formats.training_rows(formats.check(cfg.data.path, kind), kind, tok, cfg.data.n_train)
    if plan.caps.online:  # prompts from the whole train split (or its subset by difficulty)
        prompts = online_prompts(cfg)
        if cfg.data.subset is None:
            return prompts, {"prompts": len(prompts)}
        correct = measured_difficulty(cfg, model, tok, base_key, verbose)
        bins = difficulty.bins_of(cfg.task.name)
        chosen = difficulty.select(prompts, correct, cfg.data.subset, cfg.data.difficulty_k, bins=bins)
        hist = difficulty.histogram({r["id"]: correct[r["id"]] for r in prompts}, cfg.data.difficulty_k)
        return chosen, {
            "prompts": len(chosen),
            "pool": len(prompts),
            "subset": cfg.data.subset,
            "pool_correct_histogram": hist,
        }
    train = train_rows(cfg, cfg.data.n_train)
    if not plan.caps.self_play_data:
        return pipeline.gold_rows(train), {"examples": len(train), "source": "gold"}
    d, task = cfg.data, get_task(cfg.task.name)
    sp = on_main_first(
        lambda: pipeline.self_play(
            model,
            tok,
            train,
            k=d.self_play_k,
            temperature=d.self_play_temperature,
            seed=cfg.seeds()["sampling"],
            max_new_tokens=d.max_new_tokens,
            cache_key={**base_key, "task": cfg.task.hash_view()},
            grader=d.self_play_grader,
            verbose=verbose,
            prompt=task.prompt,
            grade=task.grade,
        )
    )
    pairs, stats = pipeline.preference_pairs(sp["samples"], chosen_source=d.chosen_source)
    stats["self_play_key"] = sp["key"]
    if not pairs:
        raise RuntimeError(f"self-play gave no preference pairs ({stats['prompts']} prompts, all tied)")
    rows = {"sft": pipeline.rft_rows, "pairs": lambda p: p, "unpaired": pipeline.unpaired_rows}
    return rows[plan.caps.data](pairs), stats


def measured_difficulty(cfg: RunConfig, model, tok, base_key: dict, verbose: bool) -> dict:
    """Each problem's measured difficulty (the base's correct answers of ``data.difficulty_k``), over the
    prompt pool and the validation candidates: made on rank 0, read from the cache by the others."""
    rows = online_prompts(cfg) + validation_pool(cfg)
    return on_main_first(lambda: difficulty.measure(model, tok, rows, cfg, base_key, verbose=verbose))
