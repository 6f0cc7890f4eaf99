"""A seed that redraws everything random in training (issue 40, item 2): ``seed_scope: run`` (the default
for new configs) draws the training subset, its order, the initialisation and the self-play and rollout
sampling from the run seed; ``order`` (the historic scope, pinned by the committed recipes) keeps the
subset and the sampling shared by every seed. The record says which."""

from __future__ import annotations

from oxbench.config import RunConfig
from oxbench.data.selection import online_prompts, train_rows, validation_pool
from oxbench.grid.runs import new_record
from oxbench.grid.shared import shared_key

TASK = {"name": "arith", "n_ops": 2, "max_operand": 20}


def cfg(seed: int, scope: str | None = None, **kw) -> RunConfig:
    return RunConfig(seed=seed, task=TASK, **({"seed_scope": scope} if scope else {}), **kw)


def test_run_scope_is_the_default_and_its_seed_draws_the_sampling_and_the_subset():
    assert RunConfig().seed_scope == "run"
    assert cfg(3).seeds() == {"data": 3, "init": 3, "sampling": 3, "eval": 0, "subset": 3}
    assert cfg(3, "order").seeds() == {"data": 3, "init": 3, "sampling": 0, "eval": 0}
    assert "seed_scope" not in cfg(3, "order").identity() and cfg(3).run_id() != cfg(3, "order").run_id()


def test_each_seed_trains_on_its_own_draw_of_the_train_split():
    whole = {r["id"] for r in train_rows(cfg(0), None)}
    drawn = [train_rows(cfg(s), 200) for s in (0, 1)]
    ids = [[r["id"] for r in rows] for rows in drawn]
    assert all(len(set(i)) == 200 and set(i) <= whole for i in ids)  # distinct rows of the split
    assert ids[0] != ids[1] and train_rows(cfg(1), 200) == drawn[1]  # another seed, another draw; repeatable
    order = [train_rows(cfg(s, "order"), 200) for s in (0, 1)]
    assert order[0] == order[1] == train_rows(cfg(0), None)[:200]  # historic: the first rows, every seed
    held = {r["question"] for r in validation_pool(cfg(1, eval={"n_val": 50}))}
    assert not held & {r["question"] for r in online_prompts(cfg(1, online={"n_prompts": 300}))}


def test_the_record_says_what_a_seed_covers_and_shared_self_play_is_per_seed():
    assert new_record(cfg(2), world_size=1, nodes=1).seed_scope == "run"
    assert new_record(cfg(2, "order"), world_size=1, nodes=1).seed_scope == "order"
    dpo = {"method": "dpo"}
    assert shared_key(cfg(0, **dpo)) != shared_key(cfg(1, **dpo))  # each seed samples its own pairs
    assert shared_key(cfg(0, "order", **dpo)) == shared_key(cfg(1, "order", **dpo))


def test_a_run_graded_on_gsm8k_validation_never_trains_on_those_rows():
    """GSM8K's validation split is the end of its train file: a cell evaluated on it (a tune's) draws
    its training rows and prompts from the rest, under either seed scope."""
    import pytest

    from oxbench.tasks.gsm8k import default_gsm8k_dir

    root = default_gsm8k_dir()
    if not (root / "train.jsonl").is_file():
        pytest.skip(f"GSM8K data not at {root}")
    task = {"name": "gsm8k", "path": str(root)}
    graded = RunConfig(task=task, eval={"split": "validation", "n_test": 3000})
    held = {
        r["question"]
        for r in validation_pool(
            graded.model_copy(update={"eval": graded.eval.model_copy(update={"n_val": 3000})})
        )
    }
    for c in (graded, graded.model_copy(update={"seed_scope": "order"})):
        assert not held & {r["question"] for r in train_rows(c, 4000)}
    from oxbench.tasks import load_task_split

    plain = RunConfig(task=task, seed_scope="order")  # graded on test: the file's first rows, as before
    assert train_rows(plain, 7000) == load_task_split(task, "train", n=7000)
