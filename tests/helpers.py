"""Builders shared by the engine tests and the distributed worker script."""

from __future__ import annotations

from oxbench.config import RunConfig
from oxbench.tasks import arith


def rows_for(kind: str, n: int = 16) -> list[dict]:
    probs = arith.generate("train", n, seed=0, max_operand=9)
    if kind == "sft":
        return [{"id": p["id"], "question": p["question"], "completion": p["answer"]} for p in probs]
    if kind == "pairs":
        return [
            {
                "id": p["id"],
                "question": p["question"],
                "chosen": p["answer"],
                "rejected": p["answer"].replace("####", "#### 1"),
                "chosen_reward": 1.0,
                "rejected_reward": 0.0,
            }
            for p in probs
        ]
    if kind == "unpaired":
        return [
            {
                "id": f"{p['id']}/{lab}",
                "question": p["question"],
                "completion": p["answer"] if lab else p["answer"][::-1],
                "label": lab,
            }
            for p in probs
            for lab in (True, False)
        ]
    return probs


def cfg_for(path: str, method: str, **train) -> RunConfig:
    return RunConfig(
        method=method,
        model={"name": path},
        train={"batch_size": 4, "lr": 1e-2, "max_steps": 3, "warmup_ratio": 0.0, **train},
        online={"n": 4, "prompts_per_batch": 2, "rounds": 3, "max_new_tokens": 12},
        data={"max_len": 128},
    )


def length_parity_reward(completion: str, answer: str) -> float:
    """A reward with variance even for an untrained model (the grader would give all zeros)."""
    return float(len(completion) % 2)


def train_offline(cfg: RunConfig, spec, hparams: dict, model, tokenizer, data: list[dict], *, run=None, **kw):
    """The engine's one builder (``oxbench.engine.build.train``) on a test's config, spec and
    hyper-parameters, planned at this world size; ``run`` is the plan's run_id now (kept as a keyword
    for the tests' calls). Returns (engine, result)."""
    from oxbench.engine import distributed as D
    from oxbench.engine.build import train
    from oxbench.engine.plan import plan_of

    return train(plan_of(cfg, spec, hparams, D.world_size()), model, tokenizer, data, **kw)


train_online = train_offline  # the plan says which: online or offline
