"""Tests for oxbench.tasks.grading: extraction, normalisation, grading, and agreement with lm-eval."""

from __future__ import annotations

import re

import pytest
from lm_eval.api.metrics import exact_match_hf_evaluate
from lm_eval.filters.extraction import RegexFilter

from oxbench.tasks import arith
from oxbench.tasks.grading import (
    extract_answer,
    grade_batch,
    is_correct,
    normalize_number,
    reference_answer,
    same_number,
)
from oxbench.tasks.gsm8k import default_gsm8k_dir, load_gsm8k

GSM8K_DIR = default_gsm8k_dir()
needs_gsm8k = pytest.mark.skipif(not GSM8K_DIR.is_dir(), reason=f"GSM8K data not at {GSM8K_DIR}")

# lm-eval's gsm8k task (lm_eval/tasks/gsm8k/gsm8k.yaml, version 3.0), copied verbatim.
LM_EVAL_FILTERS = {
    "strict": RegexFilter(regex_pattern=r"#### (\-?[0-9\.\,]+)"),
    "flexible": RegexFilter(regex_pattern=r"(-?[$0-9.,]{2,})|(-?[0-9]+)", group_select=-1),
}
LM_EVAL_IGNORE = [",", "\\$", "(?s).*#### ", "\\.$"]


def lm_eval_filtered(text: str, mode: str) -> str:
    """lm-eval's regex filter then take_first on one response."""
    return list(LM_EVAL_FILTERS[mode].apply([[text]], [{}]))[0][0]


def lm_eval_correct(text: str, answer_field: str, mode: str) -> bool:
    """lm-eval's gsm8k exact_match (after its filter) for one response."""
    pred = lm_eval_filtered(text, mode)
    score = exact_match_hf_evaluate(
        [pred], [answer_field], regexes_to_ignore=LM_EVAL_IGNORE, ignore_case=True
    )
    return bool(score["exact_match"] == 1.0)


@pytest.fixture(scope="module")
def gsm8k_rows() -> dict[str, list[dict]]:
    if not GSM8K_DIR.is_dir():
        pytest.skip(f"GSM8K data not at {GSM8K_DIR}")
    return {split: load_gsm8k(str(GSM8K_DIR / f"{split}.jsonl")) for split in ("train", "test")}


# ---------------------------------------------------------------- normalize_number


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1,234.0", "1234"),
        ("$5", "5"),
        ("+3", "3"),
        ("-0", "0"),
        ("-0.00", "0"),
        ("18.", "18"),
        ("18..", "18"),
        ("5.00", "5"),
        ("1.50", "1.5"),
        ("100", "100"),
        ("1000000", "1000000"),
        (".5", "0.5"),
        ("-$1,000.", "-1000"),
        (" 42 ", "42"),
        ("-3.25", "-3.25"),
        ("1.2.3", "1.2.3"),
    ],
)
def test_normalize_number(raw, expected):
    assert normalize_number(raw) == expected


def test_normalize_number_keeps_integer_zeros():
    """Only fractional zeros go: 10, 100 and 1,000 keep theirs."""
    assert [normalize_number(s) for s in ("10", "100.", "1,000", "20.0")] == ["10", "100", "1000", "20"]


# ---------------------------------------------------------------- extract_answer


@pytest.mark.parametrize(
    ("text", "mode", "expected"),
    [
        ("She makes 9 * 2 = 18 dollars.\n#### 18", "strict", "18"),
        ("#### 1,080", "strict", "1080"),
        ("#### -42", "strict", "-42"),
        ("#### 3.50", "strict", "3.5"),
        ("#### 7.", "strict", "7"),
        ("#### 5\n#### 6", "strict", "5"),  # first, as lm-eval's take_first
        ("The answer is 18.", "strict", None),  # no '#### '
        ("####18", "strict", None),  # the space is part of the pattern
        ("#### $18", "strict", None),  # lm-eval's strict pattern does not allow '$'
        ("#### .", "strict", None),  # matched, but no digit
        ("", "strict", None),
        ("The answer is 18.", "flexible", "18"),
        ("3 + 4 = 7, so 7 apples", "flexible", "7"),
        ("it costs $1,234.50 in total", "flexible", "1234.5"),
        ("goes down to -5", "flexible", "-5"),
        ("#### 5\n#### 6", "flexible", "6"),
        ("no numbers here", "flexible", None),
        ("", "flexible", None),
        ("The answer is 18...", "flexible", "18"),
        ("we get 12, then... ", "flexible", "12"),  # the last match '...' has no digit: skipped
    ],
)
def test_extract_answer(text, mode, expected):
    assert extract_answer(text, mode) == expected


def test_extract_answer_default_mode_is_strict():
    assert extract_answer("so 4\n#### 5") == "5"
    assert extract_answer("so 4") is None


def test_extract_answer_unknown_mode_names_it():
    with pytest.raises(ValueError, match="'loose'"):
        extract_answer("#### 5", "loose")


# ---------------------------------------------------------------- is_correct / grade_batch


def test_is_correct_bare_and_field_references():
    field = "Janet sells 16 - 3 - 4 = 9 duck eggs.\nShe makes 9 * 2 = $18.\n#### 18"
    assert is_correct("so #### 18", "18")
    assert is_correct("so #### 18", field)
    assert not is_correct("so #### 19", field)
    assert not is_correct("the answer is 18", field)  # strict needs '#### '
    assert is_correct("the answer is 18", field, mode="flexible")


@pytest.mark.parametrize("completion", ["#### 5", "#### 5.00", "#### 5.", "#### 05", "#### 5.0"])
def test_is_correct_numeric_equality(completion):
    assert is_correct(completion, "5")
    assert is_correct(completion, "$5.00")
    assert not is_correct(completion, "50")


def test_is_correct_commas_and_negatives():
    assert is_correct("#### 1,234", "1234")
    assert is_correct("#### 1234", "#### 1,234")
    assert is_correct("#### -7", "-7")
    assert not is_correct("#### 7", "-7")
    assert is_correct("#### -0", "0")
    assert is_correct("#### 0.25", ".25")


def test_is_correct_no_answer_is_wrong():
    assert not is_correct("I don't know", "5")
    assert not is_correct("I don't know", "5", mode="flexible")


def test_bad_reference_raises():
    with pytest.raises(ValueError, match="neither a number"):
        is_correct("#### 5", "five")
    with pytest.raises(ValueError, match="neither a number"):
        is_correct("#### 5", "so the answer is\n####")


def test_same_number():
    assert same_number("5", "5.0") and same_number("0.5", ".50") and same_number("1.2.3", "1.2.3")
    assert not same_number("5", "6") and not same_number("1.2.3", "1.23")


def test_grade_batch():
    got = grade_batch(["#### 1", "#### 2", "x 3", "#### 4"], ["1", "#### 3", "3", "4.0"], mode="strict")
    assert got == [True, False, False, True]
    assert grade_batch(["x 3"], ["3"], mode="flexible") == [True]
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        grade_batch(["#### 1", "#### 2"], ["1"])


def test_arith_answers_grade_as_their_own_reference():
    """arith writes GSM8K-format answers: each one's working ends in the '#### N' it is graded by."""
    for row in arith.generate("test", 50, n_ops=3):
        final = int(row["answer"].rsplit("#### ", 1)[1])
        assert reference_answer(row["answer"]) == str(final)
        assert is_correct(row["answer"], row["answer"])
        assert not is_correct(f"#### {final + 1}", row["answer"])


# ---------------------------------------------------------------- the real GSM8K files


@needs_gsm8k
def test_every_gsm8k_reference_parses_and_grades_itself(gsm8k_rows):
    assert {split: len(rows) for split, rows in gsm8k_rows.items()} == {"train": 7473, "test": 1319}
    for split, rows in gsm8k_rows.items():
        assert {row["id"] for row in rows} == {f"gsm8k-{split}-{i}" for i in range(len(rows))}
        for row in rows:
            ref = reference_answer(row["answer"])
            assert re.fullmatch(r"-?\d+", ref), (row["id"], ref)
            assert is_correct(row["answer"], row["answer"]), row["id"]
            assert is_correct(row["answer"], row["answer"], mode="flexible"), row["id"]


@needs_gsm8k
def test_gsm8k_reference_equals_lm_eval_target(gsm8k_rows):
    """lm-eval's target is the answer field after its regexes_to_ignore; ours is its '#### N'."""
    for rows in gsm8k_rows.values():
        for row in rows:
            target = row["answer"]
            for pattern in LM_EVAL_IGNORE:
                target = re.sub(pattern, "", target)
            assert reference_answer(row["answer"]) == target, row["id"]


@needs_gsm8k
def test_gsm8k_answer_fields_agree_with_lm_eval_filters(gsm8k_rows):
    """On every test answer field (and a wrong variant), our verdict equals lm-eval's, both filters."""
    for row in gsm8k_rows["test"]:
        answer = row["answer"]
        wrong = answer.rsplit("#### ", 1)[0] + "#### 123456789"
        for mode in ("strict", "flexible"):
            assert is_correct(answer, answer, mode) == lm_eval_correct(answer, answer, mode) is True
            assert is_correct(wrong, answer, mode) == lm_eval_correct(wrong, answer, mode) is False


# ---------------------------------------------------------------- agreement with lm-eval's own filters

# Completions in the formats both graders read the same way: integers, commas, '$',
# a final period, negatives, several numbers, missing answers.
OVERLAP_CASES = [
    ("9 * 2 = 18\n#### 18", "#### 18"),
    ("9 * 2 = 18\n#### 18", "#### 19"),
    ("The answer is 18.", "#### 18"),
    ("The answer is $18.", "#### 18"),
    ("He has 1,080 stamps.\n#### 1,080", "#### 1,080"),
    ("He has 1,080 stamps.\n#### 1080", "#### 1,080"),
    ("It drops to -5\n#### -5", "#### -5"),
    ("It drops to -5", "#### 5"),
    ("first 3 then 4 then 12", "#### 12"),
    ("#### 5\n#### 6", "#### 5"),
    ("#### 5\n#### 6", "#### 6"),
    ("I do not know", "#### 7"),
    ("#### 7 apples", "#### 7"),
    ("####7", "#### 7"),
    ("", "#### 0"),
]


@pytest.mark.parametrize(("completion", "reference"), OVERLAP_CASES)
@pytest.mark.parametrize("mode", ["strict", "flexible"])
def test_agrees_with_lm_eval_where_formats_overlap(completion, reference, mode):
    assert is_correct(completion, reference, mode) == lm_eval_correct(completion, reference, mode)


@pytest.mark.parametrize(("completion", "_reference"), OVERLAP_CASES)
@pytest.mark.parametrize("mode", ["strict", "flexible"])
def test_extraction_equals_lm_eval_filter(completion, _reference, mode):
    """Our extracted number is lm-eval's filtered string, normalised; None where it says [invalid]."""
    filtered = lm_eval_filtered(completion, mode)
    expected = None if filtered == "[invalid]" else normalize_number(filtered)
    assert extract_answer(completion, mode) == expected


def test_lm_eval_agreement_cases_are_not_all_one_verdict():
    """The overlap cases exercise both verdicts in both modes, so agreement is informative."""
    for mode in ("strict", "flexible"):
        verdicts = {lm_eval_correct(c, r, mode) for c, r in OVERLAP_CASES}
        assert verdicts == {True, False}


@pytest.mark.parametrize(
    ("completion", "reference", "mode", "ours", "lm_eval"),
    [
        ("#### 5.00", "#### 5", "strict", True, False),  # we compare numbers
        ("the answer is 18...", "#### 18", "flexible", True, False),  # we skip digit-less '...'
    ],
)
def test_documented_deviations_from_lm_eval(completion, reference, mode, ours, lm_eval):
    assert is_correct(completion, reference, mode) is ours
    assert lm_eval_correct(completion, reference, mode) is lm_eval


def test_the_sampled_metrics_grade_with_eval_sampled_grader(monkeypatch):
    """avg/best/worst@k count what ``eval.sampled_grader`` accepts: strict wants the ``####`` line;
    flexible takes the last number, so a sentence answer counts (issue 27.3: a study that rewards
    flexibly measures sharpening of the answer, not of the format). Strict leaves run_ids unchanged."""
    from oxbench.config import RunConfig
    from oxbench.eval import evaluate as E

    samples = ["so 3 + 4 = 7\n#### 7", "the answer is 7", "#### 8"]  # strict 1 of 3, flexible 2 of 3
    monkeypatch.setattr(E, "generate", lambda model, tok, prompts, **kw: [samples for _ in prompts])
    monkeypatch.setattr(E, "eval_batch_size", lambda cfg, model: 8)
    monkeypatch.setattr(E, "eval_backend", lambda cfg, model: "hf")
    rows = [{"question": "3 + 4?", "answer": "3 + 4 = 7\n#### 7"}] * 2
    counts = {}
    for grader in ("strict", "flexible"):
        cfg = RunConfig(method="sft", eval={"k": 2, "n_samples": 3, "sampled_grader": grader})
        got = E.sampled_metrics(None, None, rows, cfg, seed=0, per_problem=True)
        counts[grader] = got["correct_counts"]
        assert got["avg_at_2"] == pytest.approx(counts[grader][0] / 3)
    assert counts == {"strict": [1, 1], "flexible": [2, 2]}
    strict = RunConfig(method="sft", eval={"sampled_grader": "strict"})
    assert (
        strict.run_id()
        == RunConfig(method="sft").run_id()
        != RunConfig(method="sft", eval={"sampled_grader": "flexible"}).run_id()
    )


def test_self_play_scores_with_data_self_play_grader(monkeypatch, tmp_path):
    """Self-play samples, and so the pairs chosen from them, are scored by ``data.self_play_grader``:
    flexible accepts a sentence answer, so a base whose format is already accepted gets pairs that
    differ in the number (issue 27.4). Strict keeps the cache key and the run_id it had before."""
    from oxbench.config import RunConfig
    from oxbench.data import pipeline

    monkeypatch.setenv("OXBENCH_CACHE", str(tmp_path))
    samples = ["so 3 + 4 = 7\n#### 7", "the answer is 7", "#### 8"]
    monkeypatch.setattr(pipeline, "generate", lambda model, tok, prompts, **kw: [samples for _ in prompts])
    monkeypatch.setattr(pipeline, "format_prompt", lambda tok, q: q)
    rows = [{"id": "p0", "question": "3 + 4?", "answer": "3 + 4 = 7\n#### 7"}]
    kw = dict(k=3, temperature=1.0, seed=0, max_new_tokens=8, cache_key={"model": "m"}, verbose=False)
    strict = pipeline.self_play(None, None, rows, **kw)
    flexible = pipeline.self_play(None, None, rows, grader="flexible", **kw)
    assert strict["samples"][0]["scores"] == [1.0, 0.0, 0.0]
    assert flexible["samples"][0]["scores"] == [1.0, 1.0, 0.0]
    assert (
        pipeline.self_play(None, None, rows, grader="strict", **kw)["key"] == strict["key"] != flexible["key"]
    )
    pairs, _ = pipeline.preference_pairs(flexible["samples"])
    assert (pairs[0]["chosen"], pairs[0]["rejected"]) == (samples[0], samples[2])
    base = RunConfig(method="dpo")
    assert base.run_id() == RunConfig(method="dpo", data={"self_play_grader": "strict"}).run_id()
    assert base.run_id() != RunConfig(method="dpo", data={"self_play_grader": "flexible"}).run_id()
