"""The data every arm of a grid shares: gold SFT rows, self-play samples, pairs, RFT, unpaired.

Self-play follows the reference study: sample ``k`` completions per training prompt from the
base model at temperature ``T``, score each with the strict grader (``data.self_play_grader``:
flexible scores the last number instead); the preference pair is the first correct vs the first
incorrect completion; prompts whose completions all score the same
are dropped (and counted). With ``data.chosen_source: gold`` the chosen response is the gold
answer instead (against the first incorrect completion; prompts with none are dropped). RFT
trains on the chosen completions; KTO sees each pair as one desirable and one undesirable
example. Generated data is cached by a content hash of everything that determines it, so every
method of a grid trains on byte-identical data.
"""

from __future__ import annotations

import json
from pathlib import Path

from oxbench.tasks.grading import is_correct
from oxbench.text.formatting import format_prompt
from oxbench.text.generation import generate
from oxbench.utils import cache_hit, cache_root, content_hash, write_json_atomic

SELF_PLAY_VERSION = 1


def gold_rows(rows: list[dict]) -> list[dict]:
    """SFT examples ``{"id", "question", "completion"}`` from the gold answers."""
    return [{"id": r["id"], "question": r["question"], "completion": r["answer"]} for r in rows]


def self_play_path(key: str) -> Path:
    return cache_root() / "data" / f"selfplay-{key}.json"


def self_play(
    model,
    tokenizer,
    rows: list[dict],
    *,
    k: int,
    temperature: float,
    seed: int,
    max_new_tokens: int,
    cache_key: dict,
    grader: str = "strict",
    verbose: bool = True,
    prompt=format_prompt,
    grade=is_correct,
) -> dict:
    """``{"samples": [{"id", "question", "answer", "completions", "scores"}], "key": ...}``, cached.
    ``grader`` scores the samples; the strict one, the reference study's, keeps the key it had before
    the setting existed. ``prompt(tokenizer, question)`` and ``grade(completion, answer, grader)`` are the
    task's (:class:`~oxbench.tasks.registry.TaskSpec`; ``cache_key`` names the task)."""
    key = content_hash(
        {
            "v": SELF_PLAY_VERSION,
            "k": k,
            "T": temperature,
            "seed": seed,
            "max_new_tokens": max_new_tokens,
            "ids": [r["id"] for r in rows],
            "questions": content_hash([r["question"] for r in rows]),
            **cache_key,
            **({} if grader == "strict" else {"grader": grader}),
        }
    )
    path = self_play_path(key)
    if cache_hit(path):
        return json.loads(path.read_text())
    prompts = [prompt(tokenizer, r["question"]) for r in rows]
    outs = generate(
        model,
        tokenizer,
        prompts,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        num_return_sequences=k,
        batch_size=max(1, 256 // k),
        generator_seed=seed,
        progress_label=f"self-play: {len(rows)} prompts x {k} samples" if verbose else None,
    )
    result = {"key": key, "samples": scored_samples(rows, outs, grade, grader)}
    write_json_atomic(path, result, sealed=True)
    return result


def scored_samples(rows: list[dict], outs: list[list[str]], grade, grader: str) -> list[dict]:
    """Each row's sampled completions and their scores (``grade(completion, answer, grader)``)."""
    return [
        {
            "id": r["id"],
            "question": r["question"],
            "answer": r["answer"],
            "completions": comps,
            "scores": [float(grade(c, r["answer"], grader)) for c in comps],
        }
        for r, comps in zip(rows, outs)
    ]


def preference_pairs(samples: list[dict], *, chosen_source: str = "self_play") -> tuple[list[dict], dict]:
    """Best vs worst completion per prompt; ties dropped. Returns (pairs, stats).

    ``chosen_source="gold"`` (``data.chosen_source``): the chosen response is the gold answer, scored
    1 (correct), against the worst sample; a prompt whose samples are all correct ties and is dropped.
    """
    if chosen_source not in ("self_play", "gold"):
        raise ValueError(f"chosen_source must be 'self_play' or 'gold', got {chosen_source!r}")
    pairs = []
    for s in samples:
        scores = s["scores"]
        hi, lo = max(scores), min(scores)
        chosen = s["completions"][scores.index(hi)]
        if chosen_source == "gold":
            hi, chosen = 1.0, s["answer"]
        if hi == lo:
            continue
        rejected = s["completions"][scores.index(lo)]
        pairs.append(
            {
                "id": s["id"],
                "question": s["question"],
                "answer": s["answer"],
                "chosen": chosen,
                "rejected": rejected,
                "chosen_reward": hi,
                "rejected_reward": lo,
            }
        )
    n = len(samples)
    all_right = sum(1 for s in samples if min(s["scores"]) == max(s["scores"]) and s["scores"][0] > 0)
    stats = {
        "prompts": n,
        "pairs": len(pairs),
        "dropped": n - len(pairs),
        "dropped_all_correct": all_right,
        "dropped_all_wrong": n - len(pairs) - all_right,
        "self_play_accuracy": sum(sum(s["scores"]) / len(s["scores"]) for s in samples) / max(1, n),
    }
    return pairs, stats


def rft_rows(pairs: list[dict]) -> list[dict]:
    """RFT ("SFT" in the reference study): the chosen self-play completions."""
    return [{"id": p["id"], "question": p["question"], "completion": p["chosen"]} for p in pairs]


def unpaired_rows(pairs: list[dict]) -> list[dict]:
    """KTO examples: every pair gives one desirable and one undesirable completion."""
    rows = []
    for p in pairs:
        rows.append(
            {"id": p["id"] + "/chosen", "question": p["question"], "completion": p["chosen"], "label": True}
        )
        rows.append(
            {
                "id": p["id"] + "/rejected",
                "question": p["question"],
                "completion": p["rejected"],
                "label": False,
            }
        )
    return rows
