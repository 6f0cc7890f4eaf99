"""analysis.paper_order (issue 42, item 2): a grid's order of methods against a reference's, Kendall's
tau-b and every pair tested two-way (seeds and problems crossed)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from run_records import run_record, write_run

from analysis import paper_order

N = 200  # test problems


def grid(root: Path, rates: dict[str, float]) -> Path:
    """3 seeds per method, each problem right with the method's rate (one fixed draw per seed)."""
    rng = np.random.default_rng(0)
    for method, rate in rates.items():
        for seed in range(3):
            right = rng.random(N) < rate
            outcomes = [{"id": f"p{i}", "split": "test", "correct": bool(r)} for i, r in enumerate(right)]
            metrics = {"accuracy": float(right.mean()), "n_test": N, "chance": 0.0}
            rec = run_record(
                method, "tiny-m", seed, grid="cd", metrics=metrics, scale_params=800_000, paradigm="offline"
            )
            write_run(root, rec, outcomes=outcomes)
    return root / "cd"


def run(root: Path, capsys, monkeypatch, *extra: str) -> str:
    monkeypatch.setattr(sys, "argv", ["paper_order", str(root), *extra])
    paper_order.main()
    return capsys.readouterr().out


def test_an_order_that_agrees_has_tau_1_and_no_inverted_pair(tmp_path, capsys, monkeypatch):
    out = run(grid(tmp_path, {"sgrpo": 0.8, "rft": 0.6, "dpo": 0.4, "simpo": 0.2}), capsys, monkeypatch)
    assert "Kendall's tau-b over 4 methods: +1.00" in out
    assert "verdict: the order agrees (no pair inverted); 6 of 6 pairs separated" in out
    assert "with Holm over the 6 pairs, 6 separated" in out


def test_an_inversion_is_counted_and_its_interval_decides_whether_it_is_separated(
    tmp_path, capsys, monkeypatch
):
    out = run(grid(tmp_path, {"sgrpo": 0.2, "rft": 0.6, "dpo": 0.4, "simpo": 0.8}), capsys, monkeypatch)
    assert "Kendall's tau-b over 4 methods: -0.67" in out  # 5 of 6 pairs inverted: 1 - 2 * 5 / 6
    assert "| sgrpo > simpo | -" in out and "inverted |" in out
    assert (
        "verdict: the order 5 of 6 pairs inverted; 6 of 6 pairs separated (interval excludes 0), 5 of" in out
    )
    close = grid(tmp_path / "close", {"sgrpo": 0.5, "rft": 0.5, "dpo": 0.5, "simpo": 0.5})
    assert "not separated" in run(close, capsys, monkeypatch)


def test_a_custom_order_and_its_errors(tmp_path, capsys, monkeypatch):
    root = grid(tmp_path, {"sgrpo": 0.8, "dpo": 0.4})
    out = run(root, capsys, monkeypatch, "--order", "dpo=2", "sgrpo=1")
    assert "verdict: the order 1 of 1 pairs inverted" in out
    with pytest.raises(SystemExit, match="--order: 'dpo' is not METHOD=VALUE"):
        run(root, capsys, monkeypatch, "--order", "dpo")
    with pytest.raises(SystemExit, match=r"no finished runs of \['rft', 'simpo'\]"):
        run(root, capsys, monkeypatch)
