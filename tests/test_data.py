"""Data order and the shared data pipeline."""

from __future__ import annotations

from oxbench.data import pipeline
from oxbench.data.sampler import epoch_indices, global_order, make_sampler, order_sha


def test_same_seed_same_order_other_seed_other_order():
    a = epoch_indices(make_sampler(100, seed=0, rank=0, world_size=1), 0)
    b = epoch_indices(make_sampler(100, seed=0, rank=0, world_size=1), 0)
    c = epoch_indices(make_sampler(100, seed=1, rank=0, world_size=1), 0)
    assert a == b
    assert a != c
    assert sorted(a) == list(range(100))


def test_set_epoch_reshuffles():
    s = make_sampler(50, seed=3, rank=0, world_size=1)
    assert epoch_indices(s, 0) != epoch_indices(s, 1)


def test_world_size_2_shards_are_disjoint_and_cover():
    order = global_order(100, seed=7, world_size=2, epochs=2)
    for epoch in order:
        r0, r1 = epoch
        assert not set(r0) & set(r1)
        assert sorted(r0 + r1) == list(range(100))
        assert len(r0) == len(r1) == 50


def test_order_sha_tracks_the_order():
    assert order_sha(["a", "b"]) != order_sha(["b", "a"])
    assert order_sha(["a", "b"]) == order_sha(["a", "b"])
    assert order_sha(["ab"]) != order_sha(["a", "b"])


def _sample(i, scores):
    return {
        "id": f"p{i}",
        "question": f"q{i}",
        "answer": "#### 1",
        "completions": [f"c{j}" for j in range(len(scores))],
        "scores": scores,
    }


def test_pairs_take_best_vs_worst_and_drop_ties():
    samples = [
        _sample(0, [0, 1, 0, 1]),
        _sample(1, [1, 1, 1, 1]),
        _sample(2, [0, 0, 0, 0]),
        _sample(3, [0, 0, 1, 0]),
    ]
    pairs, stats = pipeline.preference_pairs(samples)
    assert [(p["id"], p["chosen"], p["rejected"]) for p in pairs] == [("p0", "c1", "c0"), ("p3", "c2", "c0")]
    assert stats["dropped"] == 2 and stats["dropped_all_correct"] == 1 and stats["dropped_all_wrong"] == 1
    assert stats["self_play_accuracy"] == (0.5 + 1 + 0 + 0.25) / 4


def test_rft_and_unpaired_come_from_the_same_pairs():
    pairs, _ = pipeline.preference_pairs([_sample(0, [0, 1])])
    assert pipeline.rft_rows(pairs) == [{"id": "p0", "question": "q0", "completion": "c1"}]
    un = pipeline.unpaired_rows(pairs)
    assert [(u["completion"], u["label"]) for u in un] == [("c1", True), ("c0", False)]


def test_self_play_is_cached_by_content(micro_model_dir):
    from oxbench.config import RunConfig
    from oxbench.models.loading import load_model
    from oxbench.tasks import arith

    model, tok = load_model(micro_model_dir, RunConfig(), init_seed=0)
    rows = arith.generate("train", 3, seed=0)
    kw = dict(k=2, temperature=1.0, seed=0, max_new_tokens=5, cache_key={"model": "micro"})
    a = pipeline.self_play(model, tok, rows, **kw)
    for p in model.parameters():  # a changed model must not matter: the cache key is the content
        p.data.add_(1.0)
    b = pipeline.self_play(model, tok, rows, **kw)
    assert a == b
    c = pipeline.self_play(model, tok, rows, **{**kw, "seed": 1})
    assert c["key"] != a["key"]
    assert all(len(s["completions"]) == 2 for s in a["samples"])
