"""The board's analysis (issue 41; analysis.board): the compact letter display, the refusal of a tuning
record that may hold test metrics, and the board read from records (ranking, letters, tuning)."""

from __future__ import annotations

import json
import sys

import pytest
from run_records import run_record, write_run
from test_skill_gain import CONFIG, PROBLEMS, outcomes

from analysis import board


def test_letters_group_the_methods_no_test_tells_apart():
    means = {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.2}
    # a differs from c and d; b from d; c from d: a b share "a", b c share "b", d alone
    got = board.letters(means, {frozenset("ac"), frozenset("ad"), frozenset("bd"), frozenset("cd")})
    assert got == {"a": "a", "b": "ab", "c": "b", "d": "c"}
    assert board.letters(means, set()) == dict.fromkeys(means, "a")  # nothing distinguished: one group


def test_a_tuning_record_on_the_test_split_is_refused(tmp_path):
    cfg = {"eval": {"split": "validation", "n_ood": 0, "lm_eval": {"tasks": {}}}}
    write_run(tmp_path, run_record("sft", "tiny-m", 100, grid="b_tune", config=cfg))
    assert board.check_tuning(tmp_path / "b_tune") == 1
    bad = {"eval": {**cfg["eval"], "split": "test"}}
    write_run(tmp_path, run_record("dpo", "tiny-m", 100, grid="b_tune", config=bad))
    with pytest.raises(SystemExit, match="may hold test metrics: eval.split is 'test'"):
        board.check_tuning(tmp_path / "b_tune")


def _records(root, grid: str, method: str, seed: int, right: set[int], lr: float, split: str) -> None:
    share = len(right) / len(PROBLEMS)
    metrics = {"accuracy": 0.0, "accuracy_flexible": share, "accuracy_verified_flexible": share,
               "base_accuracy": 0.0, "base_accuracy_flexible": 0.5, "base_accuracy_verified_flexible": 0.5,
               "n_test": len(PROBLEMS), "chance": 0.01}  # fmt: skip
    config = {**CONFIG, "train": {"lr": lr}, "loss": {}, "eval": {"split": split, "n_ood": 0}, "data": {},
              "online": {"n": 8, "prompts_per_batch": 4, "rounds": 2}}  # fmt: skip
    rec = run_record(method, "tiny-m", seed, grid=grid, run_id=f"{grid}-{method}-{lr:g}-s{seed}",
                     scale_params=800_000, paradigm="sft" if method == "sft" else "offline",
                     metrics=metrics, config=config)  # fmt: skip
    d = write_run(root, rec, outcomes=outcomes(right))
    if split == "test":
        (d / "base_eval.jsonl").write_text("".join(json.dumps(o) + "\n" for o in outcomes(set(range(6)))))
        (d / "curve.jsonl").write_text(
            json.dumps(
                {"step": 0, "rollouts": 0, "generated_tokens": 0, "trained_tokens": 0, "accuracy": 0.5}
            )
            + "\n"
        )  # eval.k 0


def test_the_board_reads_the_ranking_the_letters_and_the_tune_from_records(tmp_path, capsys, monkeypatch):
    strong = [
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 10},
        {0, 1, 2, 3, 4, 5, 6, 7, 9, 10},
    ]
    weak = [{0, 1, 2}, {0, 1, 3}, {0, 2, 3}]
    for seed in range(3):
        _records(tmp_path, "b", "sft", seed, strong[seed], 1e-5, "test")
        _records(tmp_path, "b", "dpo", seed, weak[seed], 3e-6, "test")
    for method, picked, other in (("sft", 1e-5, 3e-6), ("dpo", 3e-6, 1e-5)):
        for seed, (good, bad) in enumerate(zip(strong[:2], weak[:2])):
            _records(tmp_path, "b_tune", method, 100 + seed, good, picked, "validation")
            _records(tmp_path, "b_tune", method, 100 + seed, bad, other, "validation")
    picks = {f"b-{m}": {"method": m, "status": "picked", "point": {"train.lr": p}, "default": {"train.lr": 1e-5},
                        "means": [{"point": {"train.lr": p}, "mean": 0.83}, {"point": {"train.lr": q}, "mean": 0.25}]}
             for m, p, q in (("sft", 1e-5, 3e-6), ("dpo", 3e-6, 1e-5))}  # fmt: skip
    (tmp_path / "b_tune" / "picks.json").write_text(json.dumps(picks))
    monkeypatch.setattr(sys, "argv", ["board", str(tmp_path / "b")])
    board.main()
    out = capsys.readouterr().out
    assert "8 tuning records, every one on the validation split" in out
    sft = next(line for line in out.splitlines() if line.startswith("| 1 | sft |"))
    assert "| a |" in sft and "| 2 | dpo | b |" in out  # told apart: two letters
    dpo = next(line for line in out.splitlines() if line.startswith("| dpo | train.lr=3e-06"))
    assert "| 2 → 1 |" in dpo and "[" in dpo  # tuned away from the default (ties share the better rank)
    assert "| sft | train.lr=1e-05 |" in out and "the pick is the default" in out
    assert "cell time: 8 tuning cells" in out and "+ 6 final cells" in out and "(budget: 5 h)" in out

    from analysis.report import render_report

    html = render_report(tmp_path / "b", baseline="sft", metric="accuracy_verified_flexible")
    assert '<h2 id="tuning">Tuning</h2>' in html and "lr=3e-06: 83.0 (pick) · lr=1e-05: 25.0" in html


def test_the_cost_is_the_sum_of_the_cells_own_time(tmp_path):
    for i, timing in enumerate(({"total_s": 30.5}, {"total_s": 12}, {})):  # one record without a time
        d = tmp_path / "g" / f"r{i}"
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({"status": "finished", "timing": timing}))
    assert board.cell_seconds(tmp_path / "g") == (3, 42.5)
