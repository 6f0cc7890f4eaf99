"""Tests for oxbench.tasks.gsm8k.load_gsm8k: every source kind, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from oxbench.tasks.errors import TaskError, TaskFileNotFoundError
from oxbench.tasks.gsm8k import default_gsm8k_dir, load_gsm8k

GSM8K_DIR = default_gsm8k_dir()
needs_gsm8k = pytest.mark.skipif(not GSM8K_DIR.is_dir(), reason=f"GSM8K data not at {GSM8K_DIR}")

FIRST_TEST_QUESTION = (
    "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
    "muffins for her friends every day with four. She sells the remainder at the farmers' market "
    "daily for $2 per fresh duck egg. How much in dollars does she make every day at the farmers' market?"
)
ROWS = [
    {"question": "Ann has 3 pens. Then Ann gets 2 more. How many pens?", "answer": "3 + 2 = 5\n#### 5"},
    {"question": "Ben has 9 cups. Then Ben gives away 4. How many cups?", "answer": "9 - 4 = 5\n#### 5"},
    {"question": "Cara has 1 egg. How many eggs?", "answer": "#### 1"},
]


def write_jsonl(path: Path, rows: list, extra_lines: tuple[str, ...] = ()) -> Path:
    lines = [json.dumps(r) for r in rows] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------- the real files


@needs_gsm8k
def test_real_files_counts_ids_and_first_question():
    test = load_gsm8k(str(GSM8K_DIR / "test.jsonl"))
    train = load_gsm8k(str(GSM8K_DIR / "train.jsonl"))
    assert (len(train), len(test)) == (7473, 1319)
    assert test[0]["question"] == FIRST_TEST_QUESTION
    assert test[0]["answer"].endswith("#### 18")
    assert [r["id"] for r in test[:2]] == ["gsm8k-test-0", "gsm8k-test-1"]
    assert len({r["id"] for r in train}) == 7473 and len({r["id"] for r in test}) == 1319


@needs_gsm8k
def test_real_directory_with_split_and_limit():
    rows = load_gsm8k(str(GSM8K_DIR), split="train", limit=5)
    assert [r["id"] for r in rows] == [f"gsm8k-train-{i}" for i in range(5)]
    assert rows[0]["question"].startswith("Natalia sold clips to 48 of her friends")
    assert load_gsm8k(str(GSM8K_DIR), limit=1)[0]["question"] == FIRST_TEST_QUESTION  # default split: test


# ---------------------------------------------------------------- formats


def test_jsonl_ids_extra_fields_and_blank_lines(tmp_path):
    rows = [dict(ROWS[0], id="mine-7", source="hand"), ROWS[1]]
    path = write_jsonl(tmp_path / "dev.jsonl", rows, extra_lines=("", "   "))
    got = load_gsm8k(str(path))
    assert [r["id"] for r in got] == ["mine-7", "gsm8k-dev-1"]  # stem names the split
    assert got[0]["source"] == "hand" and got[1]["answer"] == ROWS[1]["answer"]
    assert load_gsm8k(str(path), split="test")[1]["id"] == "gsm8k-test-1"


def test_json_list(tmp_path):
    path = tmp_path / "test.json"
    path.write_text(json.dumps(ROWS), encoding="utf-8")
    got = load_gsm8k(str(path))
    assert [r["question"] for r in got] == [r["question"] for r in ROWS]
    assert got[2]["id"] == "gsm8k-test-2"


def test_parquet_file_and_directory(tmp_path):
    pd.DataFrame(ROWS).to_parquet(tmp_path / "train.parquet")
    got = load_gsm8k(str(tmp_path / "train.parquet"))
    assert [(r["question"], r["answer"], r["id"]) for r in got] == [
        (r["question"], r["answer"], f"gsm8k-train-{i}") for i, r in enumerate(ROWS)
    ]
    assert load_gsm8k(str(tmp_path), split="train", limit=2) == got[:2]


def test_huggingface_sharded_parquet_layout(tmp_path):
    (tmp_path / "main").mkdir()
    pd.DataFrame(ROWS[:2]).to_parquet(tmp_path / "main" / "test-00000-of-00002.parquet")
    pd.DataFrame(ROWS[2:]).to_parquet(tmp_path / "main" / "test-00001-of-00002.parquet")
    got = load_gsm8k(str(tmp_path), split="test")
    assert [r["question"] for r in got] == [r["question"] for r in ROWS]
    assert [r["id"] for r in got] == ["gsm8k-test-0", "gsm8k-test-1", "gsm8k-test-2"]


def test_directory_prefers_jsonl(tmp_path):
    write_jsonl(tmp_path / "test.jsonl", ROWS[:1])
    pd.DataFrame(ROWS).to_parquet(tmp_path / "test.parquet")
    assert len(load_gsm8k(str(tmp_path))) == 1


def test_limit(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", ROWS)
    assert len(load_gsm8k(str(path), limit=2)) == 2
    assert load_gsm8k(str(path), limit=0) == []
    assert len(load_gsm8k(str(path), limit=99)) == 3
    with pytest.raises(TaskError, match="limit must be >= 0"):
        load_gsm8k(str(path), limit=-1)


def test_limit_stops_before_a_bad_line(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", ROWS, extra_lines=("{broken",))
    assert len(load_gsm8k(str(path), limit=3)) == 3
    with pytest.raises(TaskError, match="line 4"):
        load_gsm8k(str(path))


# ---------------------------------------------------------------- errors


def test_missing_file_is_file_not_found_task_error(tmp_path):
    missing = tmp_path / "nope" / "test.jsonl"
    with pytest.raises(TaskFileNotFoundError, match="nope/test.jsonl") as info:
        load_gsm8k(str(missing))
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, TaskError)
    assert isinstance(info.value, ValueError)


def test_directory_without_split_file(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", ROWS)
    with pytest.raises(TaskFileNotFoundError, match=r"has no test\.jsonl"):
        load_gsm8k(str(tmp_path))


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", ROWS[:2], extra_lines=('{"question": "x", "answer": '))
    with pytest.raises(TaskError) as info:
        load_gsm8k(str(path))
    message = str(info.value)
    assert str(path) in message and "line 3" in message and "invalid JSON" in message
    assert "\n" not in message


def test_row_without_answer_names_file_line_and_field(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", [ROWS[0], {"question": "no answer here"}])
    with pytest.raises(TaskError) as info:
        load_gsm8k(str(path))
    assert str(info.value) == f"{path}: line 2: missing field 'answer'"


def test_row_without_question_in_parquet_names_row(tmp_path):
    path = tmp_path / "test.parquet"
    pd.DataFrame([{"answer": "#### 1"}]).to_parquet(path)
    with pytest.raises(TaskError, match=r"test\.parquet: row 1: missing field 'question'"):
        load_gsm8k(str(path))


def test_non_string_field(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", [{"question": "q", "answer": 5}])
    with pytest.raises(TaskError, match="line 1: field 'answer' must be a string, got int"):
        load_gsm8k(str(path))


def test_non_object_row(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", [ROWS[0], ["q", "a"]])
    with pytest.raises(TaskError, match="line 2: expected a JSON object"):
        load_gsm8k(str(path))


def test_json_that_is_not_a_list(tmp_path):
    path = tmp_path / "test.json"
    path.write_text(json.dumps({"question": "q", "answer": "#### 1"}), encoding="utf-8")
    with pytest.raises(TaskError, match="expected a JSON list"):
        load_gsm8k(str(path))


def test_unsupported_suffix(tmp_path):
    path = tmp_path / "test.csv"
    path.write_text("question,answer\nq,#### 1\n", encoding="utf-8")
    with pytest.raises(TaskError, match="unsupported GSM8K file type '.csv'"):
        load_gsm8k(str(path))


def test_hub_id_failure_is_one_clear_line(monkeypatch):
    """No network here: with the Hub offline, an id fails fast with one line naming it."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(TaskError) as info:
        load_gsm8k("oxbench-tests/no-such-gsm8k", split="test")
    message = str(info.value)
    assert "'oxbench-tests/no-such-gsm8k'" in message and "split 'test'" in message
    assert "Hugging Face Hub" in message and "\n" not in message
    assert not isinstance(info.value, FileNotFoundError)


def test_a_grid_reads_its_gsm8k_file_once_however_many_cells(tmp_path, monkeypatch):
    """Planning a grid checks its GSM8K file once per split, not once per cell (96 cells of the paper
    recipe read it 192 times, 15 s); a file that changes is read again."""
    from oxbench.grid import spec
    from oxbench.tasks import load_task_split as real

    data, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    for f in (data, test):
        f.write_text(
            "".join(json.dumps({"question": f"q{i}", "answer": f"#### {i}"}) + "\n" for i in range(40))
        )
    g = {"name": "g", "base": {"task": {"name": "gsm8k", "path": str(data), "test_path": str(test)}, "data": {"n_train": 8}, "eval": {"n_test": 8}},
         "axes": {"method": ["sft", "dpo"], "seed": [0, 1, 2]}}  # fmt: skip
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(g))
    reads = []
    monkeypatch.setattr("oxbench.tasks.load_task_split", lambda *a, **k: reads.append(a[1]) or real(*a, **k))
    spec._check_gsm8k.cache_clear()
    assert len(spec.expand(spec.load_grid(tmp_path / "g.yaml"), "g.yaml")) == 6
    assert sorted(reads) == ["test", "train"]
    data.write_text(data.read_text().replace('"#### 3"', '"#### three"'))  # another size: read again
    spec.expand(spec.load_grid(tmp_path / "g.yaml"), "g.yaml")
    assert len(reads) == 4
