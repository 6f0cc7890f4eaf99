"""Loading run records: analysis.load_runs, load_failed, load_problem_outcomes, scale_order."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from run_records import run_record, write_run

import analysis

PARADIGMS = {"sft": "sft", "dpo": "offline", "simpo": "offline_ref_free", "kto": "unpaired", "grpo": "online"}
SCALES = {"tiny-xs": 1_000_000, "Qwen/Qwen2.5-0.5B-Instruct": 494_000_000}


def record(method="dpo", scale="tiny-xs", seed=0, status="finished", **overrides) -> dict:
    own = {
        "scale_params": SCALES[scale],
        "paradigm": PARADIGMS[method],
        "error": "CUDA OOM" if status == "failed" else None,
        "seeds": {"data": seed, "model": seed},
        "config": {"lr": 1e-5},
        "config_hash": "abc123",
        "packages": {"torch": "2.13.0"},
        "timing": {"train_s": 1.0},
        "metrics": None if status != "finished" else {"accuracy": 0.5 + seed / 100, "ood_accuracy": 0.25},
    }
    return run_record(method, scale, seed, status, **{**own, **overrides})


def test_load_runs_columns_derived_and_order(tmp_path):
    """One row per finished run, derived online/family, metrics as columns, ordered by scale_params."""
    for method in PARADIGMS:
        write_run(tmp_path, record(method, scale="Qwen/Qwen2.5-0.5B-Instruct"))
        write_run(tmp_path, record(method, scale="tiny-xs"), sub="deeper/grid/dir")
    write_run(tmp_path, record("dpo", seed=1, status="failed"))
    write_run(tmp_path, record("dpo", seed=2, status="running"))
    df = analysis.load_runs(tmp_path)

    assert len(df) == 10
    for col in [
        "scale",
        "scale_params",
        "method",
        "paradigm",
        "seed",
        "lora",
        "run_id",
        "grid",
        "config_hash",
    ]:
        assert col in df.columns
    assert {"accuracy", "ood_accuracy"} <= set(df.columns)
    # "Qwen/..." sorts before "tiny-xs" by name, but has more parameters, so it comes last.
    assert df["scale"].tolist() == ["tiny-xs"] * 5 + ["Qwen/Qwen2.5-0.5B-Instruct"] * 5
    by_method = df[df.scale == "tiny-xs"].set_index("method")
    assert by_method["family"].to_dict() == {
        "dpo": "preference",
        "grpo": "online",
        "kto": "preference",
        "sft": "sft",
        "simpo": "preference",
    }
    assert by_method["online"].to_dict() == {
        "dpo": False,
        "grpo": True,
        "kto": False,
        "sft": False,
        "simpo": False,
    }
    assert df["accuracy"].dtype == float and df["accuracy"].iloc[0] == 0.5


def test_load_runs_status_filter(tmp_path):
    write_run(tmp_path, record("dpo", seed=0))
    write_run(tmp_path, record("dpo", seed=1, status="failed"))
    write_run(tmp_path, record("dpo", seed=2, status="running"))
    assert analysis.load_runs(tmp_path)["seed"].tolist() == [0]
    assert analysis.load_runs(tmp_path, status=None)["seed"].tolist() == [0, 1, 2]
    assert analysis.load_runs(tmp_path, status=("finished", "running"))["seed"].tolist() == [0, 2]
    with pytest.raises(ValueError, match="unknown status 'done'"):
        analysis.load_runs(tmp_path, status="done")


def test_load_runs_missing_and_null_metrics_are_nan(tmp_path):
    write_run(tmp_path, record("dpo", seed=0, metrics={"accuracy": 0.5, "best_at_k": None}))
    write_run(tmp_path, record("dpo", seed=1, metrics={"accuracy": 0.7, "ood_accuracy": 0.1}))
    df = analysis.load_runs(tmp_path).set_index("seed")
    assert math.isnan(df.at[0, "best_at_k"]) and math.isnan(df.at[0, "ood_accuracy"])
    assert df.at[1, "ood_accuracy"] == 0.1


def test_load_runs_empty_directory_and_missing_directory(tmp_path):
    df = analysis.load_runs(tmp_path)
    assert len(df) == 0 and "method" in df.columns and "family" in df.columns
    with pytest.raises(FileNotFoundError, match="nope"):
        analysis.load_runs(tmp_path / "nope")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "malformed run.json"),
        ("[1, 2]", "top level is list"),
        (json.dumps({k: v for k, v in record().items() if k != "seed"}), "missing key 'seed'"),
        (json.dumps(record(lora="yes")), "'lora' must be bool"),
        (json.dumps(record(seed=True)), "'seed' must be int"),
        (json.dumps(record(paradigm="rlhf")), "paradigm 'rlhf'"),
        (json.dumps(record(status="done")), "status 'done'"),
        (json.dumps(record(metrics={"accuracy": "high"})), "metric 'accuracy' must be a number"),
        (json.dumps(record(metrics=None)), "'metrics' must be an object"),
        (json.dumps(record(metrics={"seed": 1.0})), "clashes with a column"),
    ],
)
def test_malformed_run_json_is_named_and_skipped_or_an_error_when_strict(tmp_path, text, why):
    """By default the readers carry on with the other records, naming the bad one in a warning; with
    ``strict`` it is a one-line error naming the file."""
    write_run(tmp_path, record("dpo", seed=7))
    path = tmp_path / "g1" / "bad"
    path.mkdir(parents=True)
    (path / "run.json").write_text(text)
    with pytest.warns(analysis.BadRecordWarning) as seen:
        runs = analysis.load_runs(tmp_path)
    assert runs["seed"].tolist() == [7]
    assert str(path / "run.json") in str(seen[0].message) and why in str(seen[0].message)
    with pytest.raises(ValueError) as err:
        analysis.load_runs(tmp_path, strict=True)
    message = str(err.value)
    assert str(path / "run.json") in message and why in message and "\n" not in message


def test_binary_run_json_is_skipped_or_an_error_when_strict(tmp_path):
    write_run(tmp_path, record("dpo", seed=7))
    (tmp_path / "g1" / "bin").mkdir(parents=True)
    (tmp_path / "g1" / "bin" / "run.json").write_bytes(b"\x00\xff\xfe binary")
    with pytest.warns(analysis.BadRecordWarning, match="bin/run.json: malformed run.json"):
        assert len(analysis.load_failed(tmp_path)) == 0 and len(analysis.load_runs(tmp_path)) == 1
    with pytest.raises(ValueError, match="bin/run.json: malformed run.json"):
        analysis.load_failed(tmp_path, strict=True)


def test_duplicate_run_id_is_named_and_skipped_or_an_error_when_strict(tmp_path):
    """Two records with one run_id: the newer is kept (issue 28) and the older named; strict raises."""
    import os

    write_run(tmp_path, record("dpo"), sub="b")
    write_run(tmp_path, {**record("dpo"), "seed": 7}, sub="a")  # "a" sorts first but is written later
    older = next(tmp_path.rglob("b/**/run.json"))
    os.utime(older, (older.stat().st_atime, older.stat().st_mtime - 100))
    with pytest.warns(analysis.BadRecordWarning, match="newer and kept"):
        runs = analysis.load_runs(tmp_path)
    assert len(runs) == 1 and runs["seed"].tolist() == [7]
    with pytest.raises(ValueError, match="already used by"):
        analysis.load_runs(tmp_path, strict=True)


def test_load_failed(tmp_path):
    write_run(tmp_path, record("dpo", seed=0))
    write_run(tmp_path, record("simpo", seed=3, status="failed"))
    write_run(tmp_path, record("dpo", seed=1, status="failed", error=None))
    failed = analysis.load_failed(tmp_path)
    assert failed.columns.tolist() == ["run_id", "scale", "method", "seed", "error"]
    assert failed["method"].tolist() == ["dpo", "simpo"]
    assert failed["error"].iloc[1] == "CUDA OOM" and pd.isna(failed["error"].iloc[0])


def without(rec: dict, *keys: str) -> dict:
    return {k: v for k, v in rec.items() if k not in keys}


def test_unfinished_runs_need_no_paradigm_or_scale_params(tmp_path):
    """The runner's first 'running' record and a run that failed before loading its model lack both keys."""
    write_run(tmp_path, record("dpo", seed=0))
    write_run(tmp_path, without(record("dpo", seed=1, status="running"), "paradigm", "scale_params"))
    write_run(tmp_path, without(record("dpo", seed=2, status="failed"), "scale_params"))
    assert analysis.load_runs(tmp_path)["seed"].tolist() == [0]
    every = analysis.load_runs(tmp_path, status=None).set_index("seed")
    assert every.loc[1, ["paradigm", "family", "online", "scale_params"]].isna().all()
    assert every.at[2, "family"] == "preference" and pd.isna(every.at[2, "scale_params"])
    assert analysis.load_failed(tmp_path)["seed"].tolist() == [2]
    write_run(tmp_path, without(record("dpo", seed=3), "paradigm"))
    with pytest.raises(ValueError, match="missing key 'paradigm'"):
        analysis.load_runs(tmp_path, strict=True)


def test_unfinished_run_with_a_bad_scale_params_is_still_an_error(tmp_path):
    write_run(tmp_path, record("dpo", status="running", scale_params="big"))
    with pytest.raises(ValueError, match="'scale_params' must be int"):
        analysis.load_runs(tmp_path, status=None, strict=True)


def outcomes(pattern: str, split: str = "test", prefix: str = "q") -> list[dict]:
    return [
        {"id": f"{prefix}{i}", "split": split, "correct": c == "1", "correct_flexible": c == "1" or i == 0}
        for i, c in enumerate(pattern)
    ]


def test_load_problem_outcomes(tmp_path):
    write_run(tmp_path, record("dpo", seed=0), outcomes=outcomes("101") + outcomes("0", "ood", "o"))
    write_run(tmp_path, record("simpo", seed=0), outcomes=outcomes("011"))
    write_run(tmp_path, record("simpo", seed=1))  # no eval.jsonl: contributes nothing
    write_run(tmp_path, record("sft", seed=0, status="failed"), outcomes=outcomes("111"))
    df = analysis.load_problem_outcomes(tmp_path)
    assert df.columns.tolist() == ["run_id", "id", "split", "correct", "correct_flexible"]
    assert len(df) == 7 and df["correct"].dtype == bool
    dpo = df[df.run_id == "tiny-xs-dpo-s0"].set_index(["split", "id"])["correct"]
    assert dpo.to_dict() == {
        ("test", "q0"): True,
        ("test", "q1"): False,
        ("test", "q2"): True,
        ("ood", "o0"): False,
    }
    # flexible = correct or first problem: dpo q0, q2, o0 (3) + simpo q0, q1, q2 (3)
    assert df["correct_flexible"].sum() == 6
    assert len(analysis.load_problem_outcomes(tmp_path, status=None)) == 10


def test_problem_outcomes_errors_name_file_and_line(tmp_path):
    path = write_run(tmp_path, record("dpo"), outcomes=outcomes("10"))
    with open(path / "eval.jsonl", "a") as f:
        f.write('{"id": "q9", "split": "test", "correct": 1}\n')
    with pytest.raises(ValueError, match=r"eval\.jsonl:3: 'correct' must be true/false"):
        analysis.load_problem_outcomes(tmp_path)
    (path / "eval.jsonl").write_text("".join(json.dumps(o) + "\n" for o in outcomes("10") + outcomes("1")))
    with pytest.raises(ValueError, match=r"eval\.jsonl:3: problem 'q0' \(test\) listed twice"):
        analysis.load_problem_outcomes(tmp_path)
    (path / "eval.jsonl").write_text('{"id": "q0", "correct": true}\n')
    with pytest.raises(ValueError, match=r"eval\.jsonl:1: .*'split'"):
        analysis.load_problem_outcomes(tmp_path)


def test_scale_order_uses_params_and_rejects_conflicts():
    df = pd.DataFrame({"scale": ["b", "a", "c", "b"], "scale_params": [10, 20, 5, 10]})
    assert analysis.scale_order(df) == ["c", "b", "a"]
    df.loc[3, "scale_params"] = 11
    with pytest.raises(ValueError, match="scale 'b' has several scale_params"):
        analysis.scale_order(df)


def test_loaded_runs_feed_the_statistics(tmp_path):
    """End to end: two seeds per method -> summarize and welch run on load_runs output."""
    for method in ("dpo", "simpo"):
        for seed in (0, 1):
            write_run(
                tmp_path,
                record(method, seed=seed, metrics={"accuracy": 0.1 * seed + (method == "simpo") / 2}),
            )
    df = analysis.load_runs(tmp_path)
    summary = analysis.summarize(df, n_boot=200).set_index("method")
    assert summary.at["dpo", "mean"] == pytest.approx(0.05) and summary.at["simpo", "values"] == [0.5, 0.6]
    welch = analysis.welch_vs_baseline(df)
    assert welch["method"].tolist() == ["simpo"] and welch["delta"].iloc[0] == pytest.approx(0.5)
