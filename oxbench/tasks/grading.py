"""Answer extraction and grading for GSM8K-format tasks (GSM8K itself and ``arith``).

A GSM8K answer field ends in a line ``#### N``; a model's completion is graded by pulling a
number out of it and comparing it with the reference's ``N``. Two extraction modes, the
same two filters as lm-eval's ``gsm8k`` task (``lm_eval/tasks/gsm8k/gsm8k.yaml``):

* ``"strict"``: lm-eval's "strict-match", ``#### (\\-?[0-9\\.\\,]+)``, first match. A completion
  without a ``#### N`` line has no answer.
* ``"flexible"``: lm-eval's "flexible-extract", ``(-?[$0-9.,]{2,})|(-?[0-9]+)``, last match.
  One deviation: matches without a digit (``"..."``, ``"$,"``) are skipped, so the answer
  is the last *number*; lm-eval would return that punctuation and grade it wrong.

Both modes return the number through :func:`normalize_number` (commas, ``$``, a leading
``+``, trailing periods and trailing fractional zeros removed; ``-0`` is ``0``), and
:func:`is_correct` compares normalised strings, or exact rationals when both are decimals,
so ``"5"``, ``"5.00"``, ``"$5"`` and ``"5."`` are all the same answer. lm-eval's exact_match
strips only commas, ``$`` and a final period, so it scores ``"5.00"`` against ``"5"`` as
wrong where we score it right: the one other place our grade and lm-eval's can differ.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction

STRICT_PATTERN = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE_PATTERN = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
MODES = ("strict", "flexible")
_DECIMAL = re.compile(r"-?(\d+\.?\d*|\.\d+)")


def normalize_number(s: str) -> str:
    """Canonical text of a number: ``"1,234.0"`` → ``"1234"``, ``"$5"`` → ``"5"``, ``"+3"`` → ``"3"``.

    Removes surrounding whitespace, commas, ``$``, one leading ``+`` and trailing periods;
    for a decimal ``a.b`` also the trailing zeros of ``b`` (and the point if ``b`` empties);
    a zero loses its sign (``"-0"`` → ``"0"``). Text that is not a decimal is returned stripped only
    of those characters, e.g. ``"1.2.3"`` stays ``"1.2.3"``. A bare fraction gains its zero
    (``".5"`` → ``"0.5"``).
    """
    t = s.strip().replace(",", "").replace("$", "").removeprefix("+").rstrip(".")
    if not _DECIMAL.fullmatch(t):
        return t
    sign, digits = ("-", t[1:]) if t.startswith("-") else ("", t)
    if "." in digits:
        digits = digits.rstrip("0").rstrip(".") or "0"
    if digits.startswith("."):
        digits = "0" + digits
    return digits if Fraction(digits) == 0 else sign + digits


def _has_digit(s: str) -> bool:
    return any(c.isdigit() for c in s)


def _strict(text: str) -> str | None:
    match = STRICT_PATTERN.search(text)
    return match.group(1).strip() if match else None


def _flexible(text: str) -> str | None:
    found = [m.group(1) or m.group(2) for m in FLEXIBLE_PATTERN.finditer(text)]
    numbers = [f.strip() for f in found if _has_digit(f)]
    return numbers[-1] if numbers else None


def extract_answer(text: str, mode: str = "strict") -> str | None:
    """The normalised number a completion answers with, or ``None`` if it has none.

    ``mode="strict"``: the first ``#### N``; ``mode="flexible"``: the last number anywhere.
    """
    if mode not in MODES:
        raise ValueError(f"extract_answer: unknown mode {mode!r}; expected one of {MODES}")
    raw = _strict(text) if mode == "strict" else _flexible(text)
    if raw is None or not _has_digit(raw):
        return None
    return normalize_number(raw)


def reference_answer(reference: str) -> str:
    """The normalised reference number: a bare number, or the ``#### N`` of a full answer field."""
    if "####" in reference:
        found = extract_answer(reference, "strict")
    else:
        found = normalize_number(reference)
        found = found if _DECIMAL.fullmatch(found) else None
    if found is None:
        raise ValueError(f"reference is neither a number nor an answer with a '#### N' line: {reference!r}")
    return found


def same_number(a: str, b: str) -> bool:
    """Equal normalised strings, or equal exact rationals when both are decimals (``5`` == ``05.0``)."""
    if a == b:
        return True
    if _DECIMAL.fullmatch(a) and _DECIMAL.fullmatch(b):
        return Fraction(a) == Fraction(b)
    return False


def is_correct(completion: str, reference: str, mode: str = "strict") -> bool:
    """Whether ``completion``'s extracted answer equals ``reference``'s number."""
    expected = reference_answer(reference)
    got = extract_answer(completion, mode)
    return got is not None and same_number(got, expected)


def grade_batch(completions: Sequence[str], references: Sequence[str], mode: str = "strict") -> list[bool]:
    """:func:`is_correct` elementwise; the two sequences must have the same length."""
    if len(completions) != len(references):
        raise ValueError(f"grade_batch: {len(completions)} completions but {len(references)} references")
    return [is_correct(c, r, mode) for c, r in zip(completions, references)]
