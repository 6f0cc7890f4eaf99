"""What an arith test set's records say per problem beyond eval.jsonl's columns (issue 40, item 4).

``eval.jsonl`` holds, per test problem, the greedy completion and its strict, flexible and (strict)
verified correctness, but neither the question nor the gold working, and not the per-problem
verified-flexible outcome behind ``accuracy_verified_flexible`` (the number right *and* every line of
working right). Records before issue 40 hold the base's metrics only; since then each run writes the
base's per-problem outcomes too (``base_eval.jsonl``, :func:`load_base_completions`). From
the completions of runs that share one test set, and nothing else, this module recovers:

* :func:`gold_workings`: each problem's working, where one exists in the records: the most common
  working among the flexible-correct completions whose lines are right arithmetic and chain (a
  completion that lands on the right number by consistent arithmetic states the problem's operands
  unless it miscopied them and still reached the answer; the vote and the check below catch that);
* :func:`with_verified_flexible`: the per-problem ``verified_flexible`` outcome (flexible-correct and
  its working equal to the gold one; False where the records hold no gold working, since no completion
  was right there); :func:`verified_flexible_mismatches` checks that each run's mean is its recorded
  ``accuracy_verified_flexible``, which validates the recovery run by run;
* :func:`problem_operands`: each problem's operands (start and the two operands), from its gold working
  or, where no completion was right, from what the completions copied from the question (the most
  common copy the task definition allows: start in [2, max_operand], operands in [1, max_operand], a
  subtraction below the running value), with ``source`` saying which;
* :func:`final_answers`: the last number of each completion, for answer-change rates.

``analysis`` imports nothing from ``oxbench`` but the record schema, so the working line's pattern is
the task's (``oxbench.tasks.arith``), restated here; ``tests/test_skill_gain.py`` checks the recovery
against the task's generator on the committed records.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

EQUATION = re.compile(r"(-?\d+) ([+\-]) (\d+) = (-?\d+)")  # oxbench.tasks.arith's working line
NUMBER = re.compile(r"-?\d+")
COLUMNS = ["run_id", "id", "split", "correct", "correct_flexible", "completion"]


BASE = "base"  #: the run_id of the base's rows in a completions table (:func:`load_base_completions`)


def _test_lines(path: Path) -> list[dict]:
    """The test-split lines of an ``eval.jsonl`` or ``base_eval.jsonl``, as their :data:`COLUMNS`."""
    items = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return [{c: item.get(c) for c in COLUMNS[1:]} for item in items if item.get("split") == "test"]


def _table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["correct"] = table["correct"].astype(bool)
    table["correct_flexible"] = table["correct_flexible"].fillna(False).astype(bool)
    return table


def load_completions(runs: pd.DataFrame) -> pd.DataFrame:
    """:data:`COLUMNS` of every test line of the ``eval.jsonl`` of each run of ``runs`` (rows of
    :func:`analysis.load_runs`, whose ``path`` is the run directory); runs without one add nothing."""
    rows = []
    for r in runs.itertuples():
        path = Path(r.path) / "eval.jsonl"
        if path.is_file():
            rows += [{"run_id": r.run_id, **line} for line in _test_lines(path)]
    return _table(rows)


def load_base_completions(runs: pd.DataFrame) -> pd.DataFrame:
    """The base's per-problem test outcomes, as :func:`load_completions` rows of run_id :data:`BASE`:
    the ``base_eval.jsonl`` each run has written beside its own since issue 40 (one greedy evaluation
    of the untrained base on the run's test problems). Empty when some run has none (older records);
    a ValueError when two runs' differ (runs of more than one base or test set)."""
    seen = {}
    for r in runs.itertuples():
        path = Path(r.path) / "base_eval.jsonl"
        if not path.is_file():
            return _table([])
        seen.setdefault(path.read_bytes(), path)
    if len(seen) > 1:
        raise ValueError(
            f"the runs hold {len(seen)} different base evaluations; give runs of one base and test set"
        )
    if not seen:
        return _table([])
    return _table([{"run_id": BASE, **line} for line in _test_lines(next(iter(seen.values())))])


def task_config(runs: pd.DataFrame) -> dict:
    """The task of the runs' records (``config.task``) and the base's pre-training task
    (``config.model.pretrain.task``, None when the base was pre-trained on the grid's own task);
    raises ValueError when the runs disagree."""
    seen = set()
    for path in runs["path"]:
        cfg = json.loads((Path(path) / "run.json").read_text(encoding="utf-8"))["config"]
        pre = (cfg["model"].get("pretrain") or {}).get("task")
        seen.add(json.dumps({"task": cfg["task"], "pretrain_task": pre}, sort_keys=True))
    if len(seen) != 1:
        raise ValueError(f"the runs hold {len(seen)} different tasks; give runs of one test set")
    return json.loads(seen.pop())


def trained_max_operand(config: dict) -> int:
    """The largest operand the base saw in pre-training: its pre-training task's ``max_operand``, or
    the grid's own when it pre-trained on that."""
    return int((config["pretrain_task"] or config["task"])["max_operand"])


def equations(text: str) -> tuple[tuple[int, str, int, int], ...]:
    """The working lines ``a op b = c`` of a completion, in order."""
    return tuple((int(a), op, int(b), int(c)) for a, op, b, c in EQUATION.findall(text or ""))


def consistent(eqs: tuple) -> bool:
    """Every line is right arithmetic and each starts from the previous line's result."""
    right = all((a + b if op == "+" else a - b) == c for a, op, b, c in eqs)
    return bool(eqs) and right and all(x[3] == y[0] for x, y in zip(eqs, eqs[1:]))


def gold_workings(table: pd.DataFrame, n_ops: int | None = None) -> dict[str, tuple]:
    """Problem id -> its working (module doc), for the problems some completion got right. With
    ``n_ops`` (the task's operations per problem), a working of another length is no candidate: a
    completion that reaches the answer in one line skipped a step of the problem, whatever it wrote."""
    votes: dict[str, Counter] = {}
    for pid, flexible, text in table[["id", "correct_flexible", "completion"]].itertuples(index=False):
        eqs = equations(text)
        if flexible and consistent(eqs) and (n_ops is None or len(eqs) == n_ops):
            votes.setdefault(pid, Counter())[eqs] += 1
    return {pid: c.most_common(1)[0][0] for pid, c in votes.items()}


def with_verified_flexible(table: pd.DataFrame, gold: dict[str, tuple]) -> pd.DataFrame:
    """``table`` with ``verified_flexible``: flexible-correct and the working equal to the gold one."""
    ok = [
        bool(f) and pid in gold and equations(text) == gold[pid]
        for pid, f, text in table[["id", "correct_flexible", "completion"]].itertuples(index=False)
    ]
    return table.assign(verified_flexible=ok)


def verified_flexible_mismatches(table: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """The runs whose mean recovered ``verified_flexible`` is not their recorded
    ``accuracy_verified_flexible`` (empty: the recovery reproduces every run's metric)."""
    means = table.groupby("run_id")["verified_flexible"].mean()
    recorded = runs.set_index("run_id")["accuracy_verified_flexible"]
    return [r for r, m in means.items() if not np.isclose(m, recorded.get(r, np.nan), atol=1e-9)]


def _copied(table: pd.DataFrame, max_operand: int) -> dict[str, tuple[int, int, int]]:
    """Problem id -> (start, b1, b2) as the completions copied them (the most common copy of line 1
    and of line 2's operand that the task allows)."""
    first: dict[str, Counter] = {}
    second: dict[str, Counter] = {}
    for pid, text in table[["id", "completion"]].itertuples(index=False):
        lines = (text or "").split("\n")
        m1 = re.match(r"(-?\d+) ([+\-]) (\d+) =", lines[0])
        m2 = re.search(r"([+\-]) (\d+) = ", lines[1]) if len(lines) > 1 else None
        if m1:
            first.setdefault(pid, Counter())[(int(m1[1]), m1[2], int(m1[3]))] += 1
        if m2:
            second.setdefault(pid, Counter())[(m2[1], int(m2[2]))] += 1
    out = {}
    for pid in set(first) & set(second):
        for (a, op, b), _ in first[pid].most_common():
            if not (2 <= a <= max_operand and 1 <= b <= max_operand and (op == "+" or b <= a - 1)):
                continue
            value = a + b if op == "+" else a - b
            allowed = [
                b2
                for (op2, b2), _ in second[pid].most_common()
                if 1 <= b2 <= max_operand and (op2 == "+" or b2 <= value - 1)
            ]
            if allowed:
                out[pid] = (a, b, allowed[0])
                break
    return out


def problem_operands(table: pd.DataFrame, gold: dict[str, tuple], max_operand: int) -> pd.DataFrame:
    """One row per problem id of ``table``: ``start``, ``b1``, ``b2``, ``max_op`` and ``source``
    (``working``: from its gold working; ``copied``: from the completions' copies; missing where
    neither gives them: every operand NaN)."""
    copied = _copied(table, max_operand)
    rows = []
    for pid in dict.fromkeys(table["id"]):
        if pid in gold and len(gold[pid]) >= 2:
            ops, source = (gold[pid][0][0], gold[pid][0][2], gold[pid][1][2]), "working"
        else:
            ops, source = copied.get(pid, (np.nan,) * 3), "copied" if pid in copied else None
        rows.append({"id": pid, "start": ops[0], "b1": ops[1], "b2": ops[2], "source": source})
    out = pd.DataFrame(rows, columns=["id", "start", "b1", "b2", "source"])
    out["max_op"] = out[["start", "b1", "b2"]].max(axis=1, skipna=False)
    return out


def final_answers(table: pd.DataFrame) -> pd.Series:
    """The last number of each completion of ``table`` (None where there is none)."""
    return table["completion"].map(lambda t: (NUMBER.findall(t or "") or [None])[-1])
