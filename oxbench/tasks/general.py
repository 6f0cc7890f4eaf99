"""``general``: procedural general-domain tasks for the tiny models (the analogues of ARC, HellaSwag
and a generative task), so a post-training study can measure what a method does off its trained task.

The tiny models know nothing but what their pre-training shows them, so a general-domain
benchmark only measures something if pre-training gave them the skill. ``model.pretrain.mixture``
mixes these families' *train* split into pre-training; the evaluation reads their *test* split
through lm-eval (``oxbench/tasks/lm_eval_tasks/oxbench_{order,next,reverse}.yaml``). Post-training
trains on ``arith`` only, so these scores measure transfer and forgetting, as MMLU or ARC do after
GSM8K post-training.

Families (each row ``{"question", "answer", "choices", "gold", "id"}``; ``choices`` is empty for
generation):

* ``order`` (ARC analogue, 4-way multiple choice by log-likelihood): "Which word comes first in the
  alphabet: tamo, likure, besa or nopi?" -> ``besa``. Pseudo-words with distinct first letters, so
  the skill is a rule that transfers to unseen words. Chance 1/4.
* ``next`` (HellaSwag analogue, 4-way continuation by log-likelihood): "What comes next: March,
  April, May?" -> ``June``, over days, months, letters and number words (one to ninety-nine),
  forwards and backwards, in steps of 1, 2, 3, 5 or 10. Distractors are members of the same list, so
  the category alone does not answer. Knowledge: the lists' order, seen in pre-training through
  other items. Chance 1/4.
* ``reverse`` (generation, exact match): "Spell 'tamilo' backwards." -> ``olimat``. Chance ~0.

Splits are decided by a hash of an item's content (one in five is test), never by the seed, so no
seed can put a test item into pre-training.
"""

from __future__ import annotations

import hashlib
import random

FAMILIES = ("order", "next", "reverse")
CHANCE = {"order": 0.25, "next": 0.25, "reverse": 0.0}
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
LETTERS = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
_ONES = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_word(n: int) -> str:
    """``n`` (1-99) in words: ``21`` -> ``twenty-one``."""
    if not 1 <= n <= 99:
        raise ValueError(f"number_word: {n} is outside 1-99")
    if n < 20:
        return _ONES[n - 1]
    tens, ones = divmod(n, 10)
    return _TENS[tens - 2] + (f"-{_ONES[ones - 1]}" if ones else "")


NUMBERS = [number_word(n) for n in range(1, 100)]
LISTS = {
    "days": (DAYS, True),
    "months": (MONTHS, True),
    "letters": (LETTERS, False),
    "numbers": (NUMBERS, False),
}


def _is_test(key: str) -> bool:
    return int(hashlib.sha256(f"general/{key}".encode()).hexdigest()[:8], 16) % 5 == 0


def pseudo_word(rng: random.Random, first: str | None = None) -> str:
    syllables = [rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(rng.randint(2, 3))]
    if first is not None:
        syllables[0] = first + syllables[0][1]
    return "".join(syllables)


def _order_item(rng: random.Random) -> tuple[str, str, list[str]]:
    firsts = rng.sample(CONSONANTS, 4)
    words = [pseudo_word(rng, f) for f in firsts]
    question = f"Which word comes first in the alphabet: {', '.join(words[:3])} or {words[3]}?"
    return question, min(words), words


def _next_items() -> list[tuple[str, str, list[str]]]:
    """Every ``next`` item with its four choices (distractors drawn, seeded by the item)."""
    items = []
    for name, (seq, cyclic) in LISTS.items():
        for step in (1, 2, 3, 5, 10) if name == "numbers" else (1, 2):
            for sign in (1, -1):
                for start in range(len(seq)):
                    idx = [start + sign * step * i for i in range(4)]
                    if not cyclic and not all(0 <= i < len(seq) for i in idx):
                        continue
                    shown = [seq[i % len(seq)] for i in idx]
                    gold = shown[3]
                    rng = random.Random(f"next/{'|'.join(shown)}")
                    others = rng.sample([w for w in seq if w not in shown], 3)
                    choices = others + [gold]
                    rng.shuffle(choices)
                    items.append((f"What comes next: {', '.join(shown[:3])}?", gold, choices))
    return items


def _reverse_item(rng: random.Random) -> tuple[str, str, list[str]]:
    word = pseudo_word(rng)
    return f"Spell '{word}' backwards.", word[::-1], []


def generate(family: str, split: str = "train", n: int | None = 1000, *, seed: int = 0) -> list[dict]:
    """``n`` distinct items of one family's split (``n=None``: the whole of ``next``'s split, which is
    finite; the other families are unbounded)."""
    if family not in FAMILIES:
        raise ValueError(f"general: unknown family {family!r} (known: {', '.join(FAMILIES)})")
    if split not in ("train", "test"):
        raise ValueError(f"general: split must be 'train' or 'test', got {split!r}")
    want_test = split == "test"
    if family == "next":
        pool = [it for it in _next_items() if _is_test(it[0]) == want_test]
        random.Random(f"general/next/{split}/{seed}").shuffle(pool)
        if n is not None and n > len(pool):
            raise ValueError(f"general: only {len(pool)} {split} items of 'next', asked for {n}")
        return [_row(family, split, i, it) for i, it in enumerate(pool[:n] if n is not None else pool)]
    if n is None:
        raise ValueError(f"general: {family!r} is unbounded: give n")
    make = _order_item if family == "order" else _reverse_item
    rng = random.Random(f"general/{family}/{split}/{seed}")
    out, seen = [], set()
    while len(out) < n:
        item = make(rng)
        if item[0] in seen or _is_test(item[0]) != want_test:
            continue
        seen.add(item[0])
        out.append(_row(family, split, len(out), item))
    return out


def _row(family: str, split: str, i: int, item: tuple[str, str, list[str]]) -> dict:
    question, answer, choices = item
    gold = choices.index(answer) if choices else -1
    return {
        "question": question,
        "answer": answer,
        "choices": choices,
        "gold": gold,
        "id": f"general-{family}-{split}-{i}",
    }


def pretraining_rows(family: str, n: int, *, seed: int) -> list[dict]:
    """``n`` train items of ``family`` drawn with repetition (``next``'s train split is finite)."""
    if family == "next":
        pool = generate("next", "train", None)
        rng = random.Random(f"general/pretrain/{seed}")
        return [pool[rng.randrange(len(pool))] for _ in range(n)]
    return generate(family, "train", n, seed=seed)
