"""``arith``: a procedural, GSM8K-format arithmetic word-problem task.

Each problem is a short story (a start value, then ``n_ops`` additions or subtractions),
a step-by-step working with one equation per line, and a final ``#### N`` line, exactly
the format of GSM8K's ``answer`` field, so the same grader scores both tasks.

* Deterministic: the same (split, seed, knobs) always gives the same problems.
* Train and test never overlap: a problem's split is decided by a hash of its content,
  not by the seed, so no seed can put a test problem into training data.
* ``validation`` (learning curves) holds train-side problems outside the whole train pool
  (the first :data:`POOL_SIZE` train problems, which every prompt set and SFT set is a prefix of),
  so it is disjoint from any RL prompts and from the test split.
* Difficulty knobs: ``n_ops`` (operations per problem) and ``max_operand``.
* ``variant="ood"`` is an out-of-distribution version: another story template and
  wording ("A shelf holds ...", "are added", "are removed"), with the same arithmetic and
  the same working format. Models are trained on ``variant="id"`` only.
"""

from __future__ import annotations

import hashlib
import random
import re

NAMES = ["Ann", "Ben", "Cara", "Dan", "Eva", "Finn", "Gus", "Hana", "Ivy", "Jon", "Kim", "Leo", "Mia", "Ned"]
OBJECTS = ["apples", "pens", "cards", "coins", "books", "shells", "stamps", "eggs", "rocks", "cups"]
PLACES = ["shelf", "box", "jar", "bag", "basket", "crate"]
TEST_FRACTION_MOD = 5  # one problem in five (by content hash) belongs to the test split
POOL_SIZE = 10_000  # the "whole" train split of a procedural task: what online arms draw prompts from

# How a solution states its final answer. ``gsm8k`` is the graded format (strict match needs it);
# the others keep every line of working but end in words, so only the flexible grader scores them.
ANSWER_STYLES = {
    "gsm8k": "#### {n}",
    "sentence": "The answer is {n}.",
    "so": "So there are {n} in all.",
}
_EQUATION = re.compile(r"(-?\d+) ([+\-]) (\d+) = (-?\d+)")


def _split_of(key: str) -> str:
    digest = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
    return "test" if digest % TEST_FRACTION_MOD == 0 else "train"


#: the hash class each split draws from: validation from train's, the locked confirmation split from test's
SPLIT_CLASS = {"train": "train", "validation": "train", "test": "test", "confirm": "test"}


def _held_out(split: str, seed: int, n_ops: int, max_operand: int, variant: str) -> set[str]:
    """The answers a split must not contain: validation leaves out the whole train pool; the locked
    confirmation split (``confirm``) the whole test pool, so no evaluation of the test split, at any
    ``eval.n_test``, has seen one of its problems. It is drawn from its own random stream."""
    if split not in ("validation", "confirm"):
        return set()
    of = "train" if split == "validation" else "test"
    return {
        r["answer"]
        for r in generate(of, None, seed=seed, n_ops=n_ops, max_operand=max_operand, variant=variant)
    }


def _draw(rng: random.Random, n_ops: int, max_operand: int) -> tuple[int, list[tuple[str, int]]]:
    start = rng.randint(2, max_operand)
    ops, value = [], start
    for _ in range(n_ops):
        if value > 1 and rng.random() < 0.5:
            b = rng.randint(1, min(value - 1, max_operand))
            ops.append(("-", b))
            value -= b
        else:
            b = rng.randint(1, max_operand)
            ops.append(("+", b))
            value += b
    return start, ops


def _working(start: int, ops: list[tuple[str, int]]) -> tuple[str, int]:
    lines, value = [], start
    for op, b in ops:
        new = value + b if op == "+" else value - b
        lines.append(f"{value} {op} {b} = {new}")
        value = new
    return "\n".join(lines) + f"\n#### {value}", value


# per variant: who the story is about, then the templates of its opening, of "+ b", of "- b" and of the question
_STORIES = {
    "id": (
        NAMES,
        "{who} has {start} {obj}.",
        "{who} gets {b} more.",
        "{who} gives away {b}.",
        "How many {obj} now?",
    ),
    "ood": (
        PLACES,
        "A {who} holds {start} {obj}.",
        "Next, {b} are added.",
        "Next, {b} are removed.",
        "How many {obj} are in the {who}?",
    ),
}


def _story(variant: str, rng: random.Random, start: int, ops: list[tuple[str, int]]) -> str:
    pool, opening, gets, gives, question = _STORIES[variant]
    who, obj = rng.choice(pool), rng.choice(OBJECTS)
    parts = [opening.format(who=who, start=start, obj=obj)]
    parts += [(gets if op == "+" else gives).format(who=who, b=b) for op, b in ops]
    parts.append(question.format(who=who, obj=obj))
    return " ".join(parts)


def generate(
    split: str = "train",
    n: int | None = 1000,
    *,
    seed: int = 0,
    n_ops: int = 2,
    max_operand: int = 30,
    variant: str = "id",
    distinct: bool = True,
) -> list[dict]:
    """``n`` problems ``{"question", "answer", "id"}`` of one split, distinct unless ``distinct=False``
    (pre-training draws with repetition from the split).

    ``n=None`` is the whole split: :data:`POOL_SIZE` problems, or every distinct one the knobs allow
    if there are fewer. Raises ``ValueError`` if the knobs allow fewer than an explicit ``n``.
    """
    whole = n is None
    n = POOL_SIZE if whole else n
    if split not in ("train", "test", "validation", "confirm"):
        raise ValueError(f"arith: split must be 'train', 'test', 'validation' or 'confirm', got {split!r}")
    held = _held_out(split, seed, n_ops, max_operand, variant)
    if variant not in ("id", "ood"):
        raise ValueError(f"arith: variant must be 'id' or 'ood', got {variant!r}")
    if n_ops < 1 or max_operand < 2:
        raise ValueError("arith: n_ops must be >= 1 and max_operand >= 2")
    actual_steps = n_ops
    rng = random.Random(f"arith/{variant}/{split}/{seed}/{n_ops}/{max_operand}")
    out, seen, attempts, since_new = [], set(), 0, 0
    while len(out) < n:
        attempts += 1
        since_new += 1
        if whole and since_new > 20_000:  # the knobs allow fewer than POOL_SIZE: that is the split
            break
        if attempts > 200 * n + 10_000:
            raise ValueError(
                f"arith: only {len(out)} distinct {split} problems for n_ops={n_ops}, max_operand={max_operand}"
            )
        start, ops = _draw(rng, actual_steps, max_operand)
        key = f"{start}|" + "|".join(f"{op}{b}" for op, b in ops)
        if (distinct and key in seen) or _split_of(key) != SPLIT_CLASS[split]:
            continue
        answer, _ = _working(start, ops)
        if answer in held:
            continue
        seen.add(key)
        since_new = 0
        out.append(
            {
                "question": _story(variant, rng, start, ops),
                "answer": answer,
                "id": f"arith-{variant}-{split}-{len(out)}",
            }
        )
    return out


def restyle(answer: str, style: str) -> str:
    """``answer`` (a gold answer field ending in ``#### N``) with its final line in ``style``."""
    if style not in ANSWER_STYLES:
        raise ValueError(f"arith: unknown answer style {style!r} (known: {', '.join(ANSWER_STYLES)})")
    working, _, n = answer.rpartition("#### ")
    return working + ANSWER_STYLES[style].format(n=n.strip())


def working_lines(text: str) -> list[tuple[int, str, int, int]]:
    """The equations ``a op b = c`` of a solution, in order."""
    return [(int(a), op, int(b), int(c)) for a, op, b, c in _EQUATION.findall(text)]


def working_is_correct(completion: str, answer: str) -> bool:
    """Every line of working is the gold one: the right operation on the right numbers with the
    right result, in order, and nothing extra. The gold working is unique for an arith problem
    (the running value, then each operation of the story), so equality is the check."""
    return working_lines(completion) == working_lines(answer)
