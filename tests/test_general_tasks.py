"""The general-domain tasks (oxbench.tasks.general), the harder in-domain task and the pre-training
mixture that gives the tiny bases skill on them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from oxbench.config import PretrainSettings, RunConfig
from oxbench.models.pretrain import PretrainConfig, pretraining_rows
from oxbench.tasks import HARD_EXTRA_OPS, hard_task, load_task_split
from oxbench.tasks import general as g
from oxbench.tasks.arith import working_lines


@pytest.mark.parametrize("family", g.FAMILIES)
def test_each_family_is_deterministic_and_its_splits_are_disjoint(family):
    n = None if family == "next" else 300
    train, test = g.generate(family, "train", n), g.generate(family, "test", n)
    assert g.generate(family, "train", n) == train
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert len({r["question"] for r in test}) == len(test)
    for r in test:
        if family == "reverse":
            assert r["choices"] == [] and r["gold"] == -1
            word = r["question"].split("'")[1]
            assert r["answer"] == word[::-1]
        else:
            assert len(r["choices"]) == 4 == len(set(r["choices"]))
            assert r["choices"][r["gold"]] == r["answer"]


def test_order_items_are_answered_by_the_first_letter():
    for r in g.generate("order", "test", 200):
        firsts = [w[0] for w in r["choices"]]
        assert len(set(firsts)) == 4
        assert r["answer"] == min(r["choices"]) and r["answer"][0] == min(firsts)
        assert all(w in r["question"] for w in r["choices"])


def test_next_items_follow_their_lists():
    """Hand-checked: the members shown are consecutive in one list (cyclic for days and months), and the
    distractors come from the same list, so the category alone cannot answer."""
    rows = g.generate("next", "train", None) + g.generate("next", "test", None)
    assert len(rows) == 1026 and any(r["question"] == "What comes next: one, two, three?" for r in rows)
    by_q = {r["question"]: r for r in rows}
    assert by_q["What comes next: Saturday, Sunday, Monday?"]["answer"] == "Tuesday"
    assert by_q["What comes next: ninety, eighty, seventy?"]["answer"] == "sixty"
    assert by_q["What comes next: twenty, twenty-five, thirty?"]["answer"] == "thirty-five"
    for r in rows:
        shown = r["question"].removeprefix("What comes next: ").rstrip("?").split(", ")
        lst = next(seq for seq, _ in g.LISTS.values() if shown[0] in seq)
        assert all(c in lst for c in r["choices"])


def test_number_words():
    assert [g.number_word(n) for n in (1, 13, 20, 21, 99)] == [
        "one",
        "thirteen",
        "twenty",
        "twenty-one",
        "ninety-nine",
    ]
    with pytest.raises(ValueError, match="outside 1-99"):
        g.number_word(100)


def test_bad_family_split_or_size_is_an_error():
    with pytest.raises(ValueError, match="unknown family 'ordr'"):
        g.generate("ordr", "test", 5)
    with pytest.raises(ValueError, match="split must be"):
        g.generate("order", "validation", 5)
    with pytest.raises(ValueError, match="only 181 test items"):
        g.generate("next", "test", 500)
    with pytest.raises(ValueError, match="unbounded"):
        g.generate("reverse", "test", None)


def test_the_hard_task_has_more_operations_and_is_disjoint_from_the_task():
    task = {"name": "arith", "n_ops": 2, "max_operand": 40}
    hard = load_task_split(hard_task(task), "test", n=50, seed=0)
    assert all(len(working_lines(r["answer"])) == 2 + HARD_EXTRA_OPS for r in hard)
    assert not {r["question"] for r in hard} & {r["question"] for r in load_task_split(task, "test", n=300)}
    with pytest.raises(ValueError, match="built from 'arith'"):
        hard_task({"name": "gsm8k", "path": "x"})


def test_the_mixture_draws_its_shares_and_restyles_only_the_task():
    cfg = PretrainConfig(scale="tiny-xs", n_examples=1000, answer_styles={"sentence": 1.0},
                         mixture={"order": 0.1, "reverse": 0.05, "next": 0.05, "hard": 0.2})  # fmt: skip
    rows = pretraining_rows(cfg)
    assert len(rows) == 1000 and rows == pretraining_rows(cfg)
    kinds = [r["id"].split("-")[1] if r["id"].startswith("general") else "arith" for r in rows]
    assert (kinds.count("order"), kinds.count("reverse"), kinds.count("next")) == (100, 50, 50)
    arith_rows = [r for r in rows if r["id"].startswith("arith")]
    assert all(r["answer"].endswith(".") and "####" not in r["answer"] for r in arith_rows)
    hard = [r for r in arith_rows if len(working_lines(r["answer"])) == 2 + HARD_EXTRA_OPS]
    assert len(hard) == 200
    assert all(not r["answer"].startswith("The answer") for r in rows if r["id"].startswith("general"))
    test_items = {
        r["question"] for f in g.FAMILIES for r in g.generate(f, "test", None if f == "next" else 500)
    }
    assert not test_items & {r["question"] for r in rows}


def test_a_base_without_a_mixture_keeps_its_key():
    """The mixture enters the pre-training key only when set: the oxrl_core format base made before it
    existed is still found in the cache (its key, as in the cache directory name, is pinned here)."""
    old = PretrainConfig(scale="tiny-m", updates=800, batch_size=96, lr=3e-3, n_examples=20000,
                         task={"name": "arith", "n_ops": 2, "max_operand": 40},
                         answer_styles={"gsm8k": 0.3, "sentence": 0.7})  # fmt: skip
    assert old.key().startswith("f7a51d4e46e3")
    assert old.model_copy(update={"mixture": {"order": 0.1}}).key() != old.key()
    assert "mixture" not in RunConfig().model.pretrain.hash_view()


@pytest.mark.parametrize(
    "mixture, message",
    [
        ({"ordr": 0.1}, "did you mean 'order'"),
        ({"order": 0.0}, "must be in \\(0, 1\\)"),
        ({"order": float("nan")}, "finite number"),
        ({"order": 0.6, "hard": 0.4}, "sum to 1"),
    ],
)
def test_a_bad_mixture_is_a_one_line_error(mixture, message):
    with pytest.raises(ValidationError, match=message):
        PretrainSettings(mixture=mixture)
