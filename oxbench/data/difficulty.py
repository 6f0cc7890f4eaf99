"""Problem difficulty for the base model, and the IsoCompute subsets chosen by it.

The difficulty of a problem is the base's avg@k on it (k samples at the rollout temperature, graded
strictly, or flexibly when the base's failures are mostly format). It is measured once per base,
task, prompt pool and setting, and cached by the hash of all of them
(``<cache>/difficulty/<key>.json``), so every arm of a grid selects from the same numbers.

``data.subset`` then keeps the prompts in one of the paper's bins (:data:`oxbench.config.SUBSETS`,
arXiv 2603.12151 §4: easy avg@16 in [0.3, 0.6], hard in [0, 1/16], extremely hard pass@16 = 0) or a
mixture of bins in given shares.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from oxbench.config import SUBSETS, RunConfig
from oxbench.tasks import get_task
from oxbench.utils import cache_hit, cache_root, content_hash, progress, write_json_atomic

# (the decoder is imported where it samples: the grid process reads settings() and difficulty_path()
# to know what its cells share, and imports no torch)


class SubsetError(ValueError):
    """``data.subset`` selects no problems (raised once the base's difficulty is known)."""


def settings(cfg: RunConfig) -> dict:
    """What a difficulty measurement depends on, besides the base model and the task."""
    d, o = cfg.data, cfg.online
    return (
        {
            "k": d.difficulty_k,
            "grader": d.difficulty_grader,
            "n_prompts": o.n_prompts,
            "temperature": o.temperature,
            "max_new_tokens": o.max_new_tokens,
            "seed": cfg.seeds()["sampling"],
            "n_val": cfg.eval.n_val,  # the validation candidates measured beside the prompts
        }
        | ({"subset": cfg.seeds()["subset"]} if "subset" in cfg.seeds() else {})
        | (  # the pool a seed drew
            {"val_pool": cfg.eval.val_pool} if cfg.eval.val_pool != 10 else {}  # (10: before the setting)
        )
    )


def difficulty_path(cfg: RunConfig, base_key: dict) -> Path:
    key = content_hash({"base": base_key, "task": cfg.task.hash_view(), "settings": settings(cfg), "v": 1})
    return cache_root() / "difficulty" / f"difficulty-{key}.json"


def measure(
    model, tokenizer, rows: list[dict], cfg: RunConfig, base_key: dict, *, verbose: bool = True
) -> dict:
    """``{problem id: number of the k samples graded correct}`` for the base ``model``, cached."""
    path = difficulty_path(cfg, base_key)
    if cache_hit(path):
        return json.loads(path.read_text())["correct"]
    from oxbench.text import decode
    from oxbench.text.generation import sample

    s, task = settings(cfg), get_task(cfg.task.name)
    backend = "lean" if decode.supports(model) else "hf"
    per_batch = max(1, 256 // s["k"])
    counts: dict[str, int] = {}
    chunks = range(0, len(rows), per_batch)
    for start in progress(chunks, f"{cfg.model.name}: difficulty (avg@{s['k']})", enabled=verbose):
        chunk = rows[start : start + per_batch]
        groups = sample(
            model,
            tokenizer,
            [task.prompt(tokenizer, r["question"]) for r in chunk],
            max_new_tokens=s["max_new_tokens"],
            temperature=s["temperature"],
            num_return_sequences=s["k"],
            batch_size=per_batch,
            generator_seed=s["seed"] * 100_003 + start,
            backend=backend,
        )
        for r, group in zip(chunk, groups):
            texts = tokenizer.batch_decode([g.completion_ids for g in group], skip_special_tokens=True)
            counts[r["id"]] = sum(task.grade(t, r["answer"], s["grader"]) for t in texts)
    write_json_atomic(path, {"settings": s, "backend": backend, "correct": counts}, sealed=True)
    return counts


def bins_of(task: str) -> dict[str, tuple[float, float]]:
    """The difficulty bins ``data.subset`` may name for ``task``: IsoCompute's and the task's own."""
    return {**SUBSETS, **get_task(task).bins}


def in_bin(correct: int, k: int, name: str, bins: dict | None = None) -> bool:
    lo, hi = (bins or SUBSETS)[name]
    return lo <= correct / k <= hi


def select(
    rows: list[dict], correct: dict[str, int], subset, k: int, *, seed: int = 0, bins: dict | None = None
) -> list[dict]:
    """The rows in ``subset`` (a bin name, or ``{bin: share}``, of ``bins``: IsoCompute's by default,
    :func:`bins_of` a task), in their original order.

    A mixture keeps the shares exactly: the largest total the bins can fill, each bin's rows drawn
    at random (``seed``). Raises :class:`SubsetError` when nothing is selected."""
    shares = {subset: 1.0} if isinstance(subset, str) else dict(subset)
    chosen = {
        name: [r for r in rows if r["id"] in correct and in_bin(correct[r["id"]], k, name, bins)]
        for name in shares
    }
    empty = [name for name, members in chosen.items() if not members]
    if empty:
        hist = histogram(correct, k)
        raise SubsetError(
            f"data.subset {empty[0]!r} selects no problems of {len(rows)} (base avg@{k} counts: {hist})"
        )
    total = min(len(chosen[name]) / share for name, share in shares.items())
    rng, keep = random.Random(seed), set()
    for name, share in shares.items():
        members = list(chosen[name])
        rng.shuffle(members)
        keep.update(r["id"] for r in members[: max(1, int(total * share))])
    return [r for r in rows if r["id"] in keep]


def histogram(correct: dict[str, int], k: int) -> dict[int, int]:
    """How many problems have each number of correct samples (0..k)."""
    out = {c: 0 for c in range(k + 1)}
    for c in correct.values():
        out[c] += 1
    return out
