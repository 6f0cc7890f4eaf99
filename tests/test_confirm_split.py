"""The locked confirmation split (issue 40, item 2): test-class problems no design choice has seen,
read only by grids marked ``confirmatory: true``; anything else asking for it is a one-line error
(exit 2) naming the file and the field, before any work."""

from __future__ import annotations

import textwrap

from typer.testing import CliRunner

from oxbench.config import RunConfig
from oxbench.eval import evaluate
from oxbench.tasks import arith
from oxbench_cli import app

KNOBS = {"n_ops": 2, "max_operand": 40}


def test_the_confirmation_split_lies_outside_the_whole_test_pool_and_the_train_split():
    confirm = arith.generate("confirm", 200, **KNOBS)
    tests, train = arith.generate("test", None, **KNOBS), arith.generate("train", None, **KNOBS)
    assert len(confirm) == 200 and confirm[0]["id"] == "arith-id-confirm-0"
    assert not {r["answer"] for r in confirm} & ({r["answer"] for r in tests} | {r["answer"] for r in train})
    cfg = RunConfig(task={"name": "arith", **KNOBS}, eval={"split": "confirm", "n_test": 20})
    assert evaluate.test_rows(cfg) == confirm[:20]
    assert "split" not in RunConfig().identity()["eval"]  # the test split, as before: run_ids stand


def grid(tmp_path, confirmatory: bool, task: str = "{name: arith, n_ops: 2, max_operand: 40}"):
    path = tmp_path / "g.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        name: g
        confirmatory: {str(confirmatory).lower()}
        base: {{task: {task}, eval: {{split: confirm, n_test: 20}}}}
        axes: {{method: [sft]}}
    """)
    )
    return CliRunner().invoke(app, ["run", "--grid", str(path), "--out", str(tmp_path / "out"), "--plan"])


def test_only_a_confirmatory_grid_may_read_it(tmp_path):
    assert grid(tmp_path, True).exit_code == 0
    refused = grid(tmp_path, False)
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1
    assert "g.yaml" in refused.output and "eval.split" in refused.output and "confirmatory" in refused.output
    single = tmp_path / "c.yaml"
    single.write_text("method: sft\neval: {split: confirm}\n")
    r = CliRunner().invoke(app, ["run", "--config", str(single), "--out", str(tmp_path / "o"), "--plan"])
    assert r.exit_code == 2 and "c.yaml" in r.output and "eval.split" in r.output


def test_a_task_without_one_is_refused_before_any_work(tmp_path):
    r = grid(tmp_path, True, task="{name: gsm8k, path: ../shared/data/gsm8k}")
    assert r.exit_code == 2 and "eval.split" in r.output and "gsm8k" in r.output
