"""``countdown``: the Countdown numbers game, the task of TinyZero (Jiayi-Pan/TinyZero), made here.

Given a few numbers and a target, write an equation that reaches the target with ``+ - * /`` and
parentheses, using each given number at most once. A problem:

* ``question``: ``Numbers: 3, 5, 2. Target: 16. Make the target with + - * / and parentheses, each
  number at most once.``
* ``answer``: the gold solution, what SFT trains on and what the graders read the problem from: the
  problem restated, one line of working per operation, and the equation in ``<answer>`` tags::

      Numbers: 3, 5, 2. Target: 16.
      3 + 5 = 8
      8 * 2 = 16
      <answer>(3 + 5) * 2</answer>

  A grader is ``fn(completion, answer)``: it sees no question, so the numbers and the target are read
  from the answer's first line (:func:`parse_reference`); a completion's own restatement is not graded.
* ``id``, and the columns ``numbers`` and ``target`` (TinyZero's ``ground_truth``), which a reward
  function in TRL's shape receives.

The generator. ``n_numbers`` numbers drawn from 1 to ``max_number`` (repeats allowed); the target is the
value of a random expression (random tree, random operations) over a random subset of at least two of
them, in random order, kept only where every step's result is a positive integer (``-`` stays positive,
``/`` divides exactly), the target is at most ``max_target`` and it is none of the given numbers. So
every problem is solvable by its gold answer. Options (``task: {name: countdown, options: {...}}``):
``n_numbers`` (2 to 6, default 3), ``max_number`` (default 20), ``max_target`` (default 100).

The splits are disjoint by construction: a problem's split class is a hash of its multiset of numbers and
its target (not of the seed, nor of the numbers' order), 20% ``test``, 5% ``validation``, 5% the locked
``confirm`` split, 70% ``train``; a split draws only problems of its class, each problem once. The
"whole" train split (``n=None``) is :data:`POOL_SIZE` problems, or every distinct one the options allow.

The graders (strict, flexible) and the reward, and where they differ from TinyZero's
(``verl/utils/reward_score/countdown.py``, ``compute_score``):

* **strict**: the last ``<answer>...</answer>`` on the completion's last non-empty line (TinyZero: the
  last line, so a completion ending in a newline has no answer there), holding an expression alone.
* **flexible**: the last ``<answer>...</answer>`` anywhere, else the last line that is an expression; in
  either, a trailing ``= N`` is allowed when ``N`` is the target.
* **the equation**: integer literals, binary ``+ - * /`` and parentheses only, parsed with :mod:`ast`
  (never ``eval``; TinyZero calls ``eval`` on text of the allowed characters) and evaluated in exact
  rationals (:class:`fractions.Fraction`), so ``(7 / 3) * 3`` is exactly 7 (TinyZero: floats within
  1e-5). Unary signs and decimals are not expressions here (TinyZero accepts both). Division by zero, and
  an expression over 200 characters, is wrong.
* **the numbers**: each given number at most once, as a multiset (a number given twice may be used
  twice), as the issue states the game. TinyZero requires every number exactly once.
* **the reward** ``countdown`` (TRL's ``reward_funcs`` shape): 1.0 for a right equation, 0.1
  (TinyZero's ``format_score``) for a strict answer that is wrong, 0.0 with no strict answer, as
  TinyZero's ``compute_score``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import random
import re
from collections import Counter
from fractions import Fraction
from itertools import combinations

from oxbench.tasks.errors import TaskError

POOL_SIZE = 10_000  # the "whole" train split, as arith's
DEFAULTS = {"n_numbers": 3, "max_number": 20, "max_target": 100}
LIMITS = {"n_numbers": (2, 6), "max_number": (2, 1000), "max_target": (1, 10**6)}
CHANCE_MAX_NUMBERS = 4  # chance accuracy is enumerated up to this many numbers (5 or 6: None)
MAX_EXPRESSION = 200  # characters: a longer expression is wrong, never parsed
FORMAT_SCORE, SCORE = 0.1, 1.0  # TinyZero's compute_score defaults
#: a problem's split class from its hash (mod 20): test 20%, validation 5%, confirm 5%, train 70%
CLASSES = (("test", range(0, 4)), ("validation", range(4, 5)), ("confirm", range(5, 6)))
SPLITS = ("train", "test", "validation", "confirm")
OPS = "+-*/"
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_REFERENCE = re.compile(r"Numbers: ([0-9][0-9, ]*)\. Target: ([0-9]+)\.")
_ANSWER = re.compile(r"<answer>(.*?)</answer>")
_EXPRESSION_CHARS = re.compile(r"[0-9+\-*/() ]+")
_BIN_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


# ------------------------------------------------------------------------------------------ options


def options(task: dict) -> dict[str, int]:
    """The generator's options: the defaults updated by ``task.options`` (one-line errors)."""
    given = dict(task.get("options") or {})
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise TaskError(
            f"task.options: countdown has no option {unknown[0]!r} (it has: {', '.join(DEFAULTS)})"
        )
    out = {**DEFAULTS, **given}
    for name, (lo, hi) in LIMITS.items():
        value = out[name]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise TaskError(f"task.options.{name}: countdown needs an integer in [{lo}, {hi}], got {value!r}")
    return out


# ---------------------------------------------------------------------------------------- generator


def _split_of(numbers: list[int], target: int) -> str:
    key = f"countdown|{','.join(map(str, sorted(numbers)))}|{target}"
    digest = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 20
    return next((split for split, where in CLASSES if digest in where), "train")


def _apply(op: str, a, b):
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return None if b == 0 else Fraction(a) / b


def _expression(rng: random.Random, values: list[int]) -> tuple[str, int, int, list[str]] | None:
    """A random expression over ``values`` (in order, each once): (text, value, precedence, working
    lines); None where a step's result is not a positive integer."""
    if len(values) == 1:
        return str(values[0]), values[0], 3, []
    cut = rng.randint(1, len(values) - 1)
    left, right = _expression(rng, values[:cut]), _expression(rng, values[cut:])
    op = rng.choice(OPS)
    if left is None or right is None:
        return None
    value = _apply(op, left[1], right[1])
    if value is None or value <= 0 or value != int(value):
        return None
    value, prec = int(value), _PRECEDENCE[op]
    a = f"({left[0]})" if left[2] < prec else left[0]
    b = f"({right[0]})" if right[2] <= prec else right[0]  # a - (b - c), a + (b + c): as drawn
    return f"{a} {op} {b}", value, prec, [*left[3], *right[3], f"{left[1]} {op} {right[1]} = {value}"]


def _draw(rng: random.Random, n_numbers: int, max_number: int, max_target: int) -> tuple | None:
    """(numbers, target, expression text, working lines), or None where the draw is rejected."""
    numbers = [rng.randint(1, max_number) for _ in range(n_numbers)]
    used = rng.sample(numbers, rng.randint(2, n_numbers))
    expr = _expression(rng, used)
    if expr is None or expr[1] > max_target or expr[1] in numbers:
        return None
    return numbers, expr[1], expr[0], expr[3]


def restatement(numbers: list[int], target: int) -> str:
    return f"Numbers: {', '.join(map(str, numbers))}. Target: {target}."


def question_text(numbers: list[int], target: int) -> str:
    rules = "Make the target with + - * / and parentheses, each number at most once."
    return f"{restatement(numbers, target)} {rules}"


def gold_answer(numbers: list[int], target: int, expression: str, working: list[str]) -> str:
    return "\n".join([restatement(numbers, target), *working, f"<answer>{expression}</answer>"])


def generate(
    split: str = "train",
    n: int | None = 1000,
    *,
    seed: int = 0,
    n_numbers: int = 3,
    max_number: int = 20,
    max_target: int = 100,
    distinct: bool = True,
) -> list[dict]:
    """``n`` problems of ``split`` (``n=None``: the whole split, :data:`POOL_SIZE` or every distinct
    one), distinct unless ``distinct=False`` (pre-training draws with repetition). Deterministic in
    (split, seed, options); raises ``ValueError`` when the options allow fewer than an explicit ``n``."""
    if split not in SPLITS:
        raise ValueError(f"countdown: split must be one of {', '.join(SPLITS)}, got {split!r}")
    whole, n = n is None, POOL_SIZE if n is None else n
    rng = random.Random(f"countdown/{split}/{seed}/{n_numbers}/{max_number}/{max_target}")
    out, seen, attempts, since_new = [], set(), 0, 0
    while len(out) < n:
        attempts, since_new = attempts + 1, since_new + 1
        if whole and since_new > 20_000:  # the options allow fewer than POOL_SIZE: that is the split
            break
        if attempts > 200 * n + 10_000:
            raise ValueError(f"countdown: only {len(out)} distinct {split} problems for these options")
        drawn = _draw(rng, n_numbers, max_number, max_target)
        if drawn is None or _split_of(drawn[0], drawn[1]) != split:
            continue
        key = (tuple(sorted(drawn[0])), drawn[1])
        if distinct and key in seen:
            continue
        seen.add(key)
        since_new = 0
        numbers, target = drawn[0], drawn[1]
        out.append(
            {
                "question": question_text(numbers, target),
                "answer": gold_answer(*drawn),
                "id": f"countdown-{split}-{len(out)}",
                "numbers": numbers,
                "target": target,
            }
        )
    return out


# ------------------------------------------------------------------------------------------ grading


def parse_reference(answer: str) -> tuple[list[int], int]:
    """(numbers, target) from a gold answer's restatement ``Numbers: 3, 5, 2. Target: 16.``."""
    match = _REFERENCE.search(answer)
    if match is None:
        raise ValueError(f"countdown: the reference has no 'Numbers: ... Target: N.' line: {answer[:80]!r}")
    numbers = [int(x) for x in match.group(1).replace(",", " ").split()]
    return numbers, int(match.group(2))


def _value(node: ast.AST, literals: list[int]):
    """The exact value of an expression node (literals collected in ``literals``); ValueError where a
    node is not an integer literal, a binary + - * / or a division by zero."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        literals.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN_OPS:
        a, b = _value(node.left, literals), _value(node.right, literals)
        value = _apply(_BIN_OPS[type(node.op)], a, b)
        if value is None:
            raise ValueError("division by zero")
        return value
    raise ValueError(f"not allowed: {type(node).__name__}")


def evaluate(expression: str) -> tuple[Fraction, list[int]] | None:
    """(exact value, the integer literals in order) of an expression of integers, ``+ - * /`` and
    parentheses; None for anything else (a name, a call, a unary sign, a decimal, division by zero, text
    over :data:`MAX_EXPRESSION` characters). Parsed with :mod:`ast`, never executed."""
    text = expression.strip()
    if not text or len(text) > MAX_EXPRESSION or not _EXPRESSION_CHARS.fullmatch(text):
        return None
    try:
        tree = ast.parse(text, mode="eval")
        literals: list[int] = []
        return _value(tree.body, literals), literals
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def uses_given(literals: list[int], numbers: list[int]) -> bool:
    """Each number of the equation is a given one, each given number used at most once (multisets)."""
    return not Counter(literals) - Counter(numbers)


def equation_is_right(
    expression: str, numbers: list[int], target: int, *, allow_result: bool = False
) -> bool:
    """Whether ``expression`` uses only the given numbers, each at most once, and equals ``target``;
    with ``allow_result``, a trailing ``= N`` is allowed when ``N`` is the target."""
    if allow_result and "=" in expression:
        expression, _, result = expression.partition("=")
        if result.strip() != str(target):
            return False
    got = evaluate(expression)
    return got is not None and uses_given(got[1], numbers) and got[0] == target


def strict_equation(completion: str) -> str | None:
    """The last ``<answer>...</answer>`` on the completion's last non-empty line."""
    lines = [line for line in completion.splitlines() if line.strip()]
    found = _ANSWER.findall(lines[-1]) if lines else []
    return found[-1] if found else None


def flexible_equation(completion: str) -> str | None:
    """The last ``<answer>...</answer>`` anywhere, else the last line that is an expression (with an
    optional ``= N``)."""
    found = _ANSWER.findall(completion)
    if found:
        return found[-1]
    lines = [line.strip() for line in completion.splitlines()]
    candidates = [line for line in lines if line and _EXPRESSION_CHARS.fullmatch(line.replace("=", " "))]
    return candidates[-1] if candidates else None


def is_correct(completion: str, answer: str, mode: str = "strict") -> bool:
    """Whether ``completion``'s equation (``mode``: strict or flexible) reaches the target of the
    reference ``answer`` with its numbers, each at most once."""
    numbers, target = parse_reference(answer)
    if mode == "strict":
        equation = strict_equation(completion)
        return equation is not None and equation_is_right(equation, numbers, target)
    if mode != "flexible":
        raise ValueError(f"countdown: unknown grader {mode!r}")
    equation = flexible_equation(completion)
    return equation is not None and equation_is_right(equation, numbers, target, allow_result=True)


GRADERS = {mode: functools.partial(is_correct, mode=mode) for mode in ("strict", "flexible")}


def score(completion: str, answer: str) -> float:
    """TinyZero's score: 1.0 for a right equation, 0.1 for a wrong one in the strict answer format, 0.0
    with no strict answer."""
    numbers, target = parse_reference(answer)
    equation = strict_equation(completion)
    if equation is None:
        return 0.0
    return SCORE if equation_is_right(equation, numbers, target) else FORMAT_SCORE


def reward(completions: list[str], answer: list[str], **columns) -> list[float]:
    """The task's reward ``countdown`` in TRL's ``reward_funcs`` shape: :func:`score` per completion."""
    return [score(c, a) for c, a in zip(completions, answer)]


def metrics(rows: list[dict], completions: list[str]) -> dict[str, float]:
    """``countdown_format``: the share of completions with a strict answer; ``countdown_numbers``: the
    share whose strict answer is an expression of the given numbers, each at most once (right or not)."""
    fmt = valid = 0
    for row, completion in zip(rows, completions):
        equation = strict_equation(completion)
        if equation is None:
            continue
        fmt += 1
        got = evaluate(equation)
        valid += got is not None and uses_given(got[1], parse_reference(row["answer"])[0])
    n = max(1, len(rows))
    return {"countdown_format": fmt / n, "countdown_numbers": valid / n}


# ------------------------------------------------------------------------------------------- chance


def _values(numbers: tuple[int, ...]) -> dict[int, Counter]:
    """Subset mask -> Counter of the values of every expression over exactly that subset of positions
    (each leaf order, tree and operations once; ``None``: a division by zero)."""
    n, table = len(numbers), {}
    for size in range(1, n + 1):
        for subset in combinations(range(n), size):
            mask = sum(1 << i for i in subset)
            if size == 1:
                table[mask] = Counter({Fraction(numbers[subset[0]]): 1})
                continue
            counts: Counter = Counter()
            sub = (mask - 1) & mask
            while sub:  # every ordered split (left, right) of the subset
                left, right = table[sub], table[mask ^ sub]
                for a, ca in left.items():
                    for b, cb in right.items():
                        for op in OPS:
                            value = None if a is None or b is None else _apply(op, a, b)
                            counts[value] += ca * cb
                sub = (sub - 1) & mask
            table[mask] = counts
    return table


@functools.lru_cache(maxsize=4096)
def hit_probability(numbers: tuple[int, ...], target: int) -> float:
    """The chance that an equation drawn uniformly from every expression over a non-empty subset of the
    numbers (each order of leaves, tree shape and operations counted once) equals ``target``."""
    table = _values(numbers)
    total = sum(sum(c.values()) for c in table.values())
    return sum(c[Fraction(target)] for c in table.values()) / total


def chance(task: dict, test_rows: list[dict]) -> float | None:
    """The accuracy of a guesser who writes a uniformly random well-formed equation of the given numbers
    (:func:`hit_probability`), averaged over the test problems; None above :data:`CHANCE_MAX_NUMBERS`
    numbers (the enumeration grows as n! 4^n)."""
    if options(task)["n_numbers"] > CHANCE_MAX_NUMBERS or not test_rows:
        return None
    refs = [parse_reference(r["answer"]) for r in test_rows]
    return sum(hit_probability(tuple(sorted(nums)), t) for nums, t in refs) / len(refs)
