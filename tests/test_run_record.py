"""One typed run record (oxbench.grid.record.RunRecord) for every writer and reader; arms; report --baseline."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_report import Page, column, row_of
from typer.testing import CliRunner

import analysis
from analysis.report import write_report
from oxbench.config import RunConfig
from oxbench.grid import executors
from oxbench.grid.record import RunRecord, arm_label
from oxbench.grid.runs import read_record, run_dir, write_record
from oxbench.grid.spec import GridFile, expand
from oxbench_cli import app

#: RunConfig().run_id() before ``arm_keys`` existed: adding the field must not move any run id.
DEFAULT_RUN_ID = "tiny-xs-sft-s0-4a932bca3c"


def finished(cfg: RunConfig, accuracy: float, scale_params: int = 1_000_000) -> RunRecord:
    """The record the runner writes for a finished cell (no training needed)."""
    return RunRecord(
        run_id=cfg.run_id(),
        grid=cfg.grid,
        status="finished",
        scale=cfg.model.name,
        method=cfg.method,
        seed=cfg.seed,
        lora=cfg.model.lora.enabled,
        arm=cfg.arm(),
        config=cfg.model_dump(),
        paradigm="online" if cfg.method == "sgrpo" else "offline",
        loss_version=1,
        scale_params=scale_params,
        metrics={"accuracy": accuracy, "n_test": 40},
        timing={"total_s": 1},
    )


# ---------------------------------------------------------------------------------------------
# run ids and arm keys
# ---------------------------------------------------------------------------------------------


OLD_PATHS = {
    "online": {"backend": "hf", "share_prompt": False},
    "eval": {"backend": "hf", "batch_size": 128, "sample_stream": "call"},
    "seed_scope": "order",
}


def test_default_run_id_is_unchanged_by_arm_keys():
    """DEFAULT_RUN_ID is the default config's run_id from before the fast paths (and evaluation batched
    by memory, each problem's own sampling stream, a seed that redraws everything) became the defaults:
    pinning their old values gives it back (and arm_keys never enter it)."""
    assert RunConfig(**OLD_PATHS).run_id() == DEFAULT_RUN_ID != RunConfig().run_id()
    assert RunConfig(arm_keys=["train.lr", "online.n"], **OLD_PATHS).run_id() == DEFAULT_RUN_ID
    assert RunConfig(arm_keys=["train.lr"]).identity() == RunConfig().identity()


def test_expand_records_the_varying_axes_as_arm_keys():
    grid = GridFile(
        name="g",
        base={"model": {"name": "tiny-xs"}},
        axes={
            "scale": ["tiny-xs", "tiny-s"],
            "method": ["sgrpo", "dpo"],
            "train.lr": [1e-4, 1e-5],
            "online.n": [4],  # one value: not an arm axis
            "seed": [0, 1],
        },
    )
    cells = expand(grid)
    assert {tuple(c.arm_keys) for c in cells} == {("train.lr",)}
    cell = next(c for c in cells if c.method == "sgrpo" and c.train.lr == 1e-5 and c.model.name == "tiny-s")
    assert cell.arm() == {"scale": "tiny-s", "method": "sgrpo", "lora": False, "train.lr": 1e-5}
    assert arm_label(cell.arm(), cell.method) == "sgrpo lr=1e-05"
    # the seeds of one arm share it; different learning rates do not
    arms = {json.dumps(c.arm(), sort_keys=True) for c in cells}
    assert len(arms) == 2 * 2 * 2
    # without varying axes a cell's arm is its scale, method and LoRA setting, labelled by the method
    plain = expand(GridFile(name="p", axes={"method": ["dpo"], "seed": [0, 1]}))[0]
    assert plain.arm_keys == [] and arm_label(plain.arm(), plain.method) == "dpo"


def test_arm_label():
    assert arm_label({}, "dpo") == "dpo"
    assert arm_label(None, "dpo") == "dpo"
    arm = {"scale": "s", "method": "dpo", "lora": True, "model.lora.enabled": True, "loss.beta": 0.1}
    assert arm_label(arm, "dpo") == "dpo beta=0.1 (LoRA)"
    clash = {"method": "m", "train.lr": 0.1, "model.pretrain.lr": 0.2, "online.n": 4}
    assert arm_label(clash, "m") == "m model.pretrain.lr=0.2 n=4 train.lr=0.1"


# ---------------------------------------------------------------------------------------------
# the writers
# ---------------------------------------------------------------------------------------------


def test_runner_writes_a_run_record_with_its_arm(tmp_path):
    """A cell that fails at once (an unknown loss) still writes a whole, valid record."""
    from oxbench.grid.runner import run_cell

    cfg = RunConfig(grid="g", method="no-such-loss", arm_keys=["train.lr"])
    rec = run_cell(cfg, tmp_path, verbose=False)
    on_disk = read_record(run_dir(tmp_path, "g", cfg.run_id()))
    assert on_disk == rec
    assert set(on_disk) == set(RunRecord.model_fields)
    parsed = RunRecord.model_validate(on_disk)
    assert parsed.status == "failed" and "no-such-loss" in parsed.error
    assert parsed.arm == {"scale": "tiny-xs", "method": "no-such-loss", "lora": False, "train.lr": 1e-6}


@pytest.mark.parametrize("started", [False, True], ids=["died-at-once", "died-while-running"])
def test_a_dead_cell_process_leaves_a_record_the_report_reads(tmp_path, monkeypatch, started):
    """The executors' fallback for a cell whose process died before writing its outcome is a full
    record (grid, lora, arm, ...): load_runs, load_failed and the report read the directory."""
    grid = GridFile(name="g", base={"method": "dpo"}, axes={"train.lr": [1e-4, 1e-5], "seed": [0, 1]})
    cells = expand(grid)
    dead = cells[0]
    for cfg, acc in zip(cells[1:], (0.4, 0.5, 0.6)):
        write_record(run_dir(tmp_path, "g", cfg.run_id()), finished(cfg, acc))
    if started:  # the runner's first record, then the process is killed
        running = finished(dead, 0.0).model_copy(update={"status": "running", "metrics": None})
        write_record(run_dir(tmp_path, "g", dead.run_id()), running)
    monkeypatch.setattr(
        executors, "cell_command", lambda *a, **k: [sys.executable, "-c", "import sys; sys.exit(9)"]
    )
    rec = executors.run_subprocess(dead, tmp_path)

    assert rec["status"] == "failed" and "exited with code 9" in rec["error"]
    parsed = RunRecord.model_validate(read_record(run_dir(tmp_path, "g", dead.run_id())))
    assert (parsed.grid, parsed.scale, parsed.method, parsed.seed, parsed.lora) == (
        "g",
        "tiny-xs",
        "dpo",
        0,
        False,
    )
    assert parsed.arm == dead.arm() and parsed.config == dead.model_dump()
    failed = analysis.load_failed(tmp_path)
    assert failed["run_id"].tolist() == [dead.run_id()]
    every = analysis.load_runs(tmp_path, status=None)
    assert len(every) == 4 and every.set_index("run_id").at[dead.run_id(), "arm"] == "dpo lr=0.0001"
    html = write_report(tmp_path).read_text()
    assert dead.run_id() in html and "exited with code 9" in html


def test_remote_fallback_keeps_a_finished_record(tmp_path):
    """A Ray/Slurm failure after the cell recorded its outcome never overwrites that outcome."""
    cfg = RunConfig(grid="g", method="dpo")
    write_record(run_dir(tmp_path, "g", cfg.run_id()), finished(cfg, 0.5))
    rec = executors.failed_record(cfg, tmp_path, "ray task failed: RayTaskError")
    assert rec["status"] == "finished"
    assert read_record(run_dir(tmp_path, "g", cfg.run_id()))["status"] == "finished"


# ---------------------------------------------------------------------------------------------
# the readers: arms, not methods, pool seeds
# ---------------------------------------------------------------------------------------------


def two_lr_arms(root):
    grid = GridFile(name="g", axes={"method": ["sgrpo"], "train.lr": [1e-4, 1e-5], "seed": [0]})
    for cfg, acc in zip(expand(grid), (0.30, 0.50)):
        write_record(run_dir(root, "g", cfg.run_id()), finished(cfg, acc))


def test_runs_at_two_learning_rates_are_two_arms_not_two_seeds(tmp_path):
    two_lr_arms(tmp_path)
    runs = analysis.load_runs(tmp_path)
    assert runs["method"].tolist() == ["sgrpo", "sgrpo"]
    assert sorted(runs["arm"]) == ["sgrpo lr=0.0001", "sgrpo lr=1e-05"]
    summary = analysis.summarize(runs)
    assert summary["n"].tolist() == [1, 1]
    assert dict(zip(summary["method"], summary["mean"])) == {"sgrpo lr=0.0001": 0.30, "sgrpo lr=1e-05": 0.50}
    ranks = analysis.rank_table(runs)
    assert ranks["method"].tolist() == ["sgrpo lr=1e-05", "sgrpo lr=0.0001"]
    board = Page(write_report(tmp_path, baseline="sgrpo").read_text()).tables["leaderboard-0"]
    assert sorted(r[0][0] for r in board["rows"]) == ["sgrpo lr=0.0001", "sgrpo lr=1e-05"]
    assert row_of(board, "sgrpo lr=0.0001")[column(board, "Sig.")][0] == "baseline"


def test_arms_equal_to_methods_change_nothing(tmp_path):
    """Without varying axes (and for records written before arms) the arm is the method."""
    for method, acc in (("dpo", 0.4), ("sgrpo", 0.5)):
        for seed in (0, 1):
            cfg = RunConfig(grid="g", method=method, seed=seed)
            rec = finished(cfg, acc + seed / 100).model_dump(mode="json")
            path = run_dir(tmp_path, "g", cfg.run_id())
            path.mkdir(parents=True)
            if method == "dpo":
                del rec["arm"]  # a record written before the arm existed
            (path / "run.json").write_text(json.dumps(rec))
    runs = analysis.load_runs(tmp_path)
    assert (runs["arm"] == runs["method"]).all()
    summary = analysis.summarize(runs)
    assert summary["method"].tolist() == ["dpo", "sgrpo"] and summary["n"].tolist() == [2, 2]
    assert summary.equals(analysis.summarize(runs.drop(columns="arm")))


def test_analysis_rejects_a_record_that_is_not_a_run_record(tmp_path):
    cfg = RunConfig(grid="g")
    rec = finished(cfg, 0.5).model_dump(mode="json") | {"surprise": 1}
    path = run_dir(tmp_path, "g", cfg.run_id())
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="malformed run.json .'surprise'"):
        analysis.load_runs(tmp_path, strict=True)
    with pytest.warns(analysis.BadRecordWarning, match="malformed run.json .'surprise'"):
        assert len(analysis.load_runs(tmp_path)) == 0


def test_analysis_imports_no_engine():
    code = "import sys, analysis; bad = [m for m in sys.modules if m == 'torch' or m.startswith('oxbench.engine')]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# oxbench report --baseline
# ---------------------------------------------------------------------------------------------


def test_report_baseline_option(tmp_path):
    for method, acc in (("dpo", 0.4), ("kto", 0.5)):
        for seed in (0, 1):
            cfg = RunConfig(grid="g", method=method, seed=seed)
            write_record(run_dir(tmp_path, "g", cfg.run_id()), finished(cfg, acc + seed / 100))
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--baseline", "kto"])
    assert result.exit_code == 0, result.output
    board = Page((tmp_path / "report.html").read_text()).tables["leaderboard-0"]
    assert row_of(board, "kto")[column(board, "Sig.")][0] == "baseline"
    assert row_of(board, "dpo")[column(board, "Δ vs baseline")][0].startswith("-10.0 [")
    result = CliRunner().invoke(app, ["report", str(tmp_path)])  # dpo, as before
    assert result.exit_code == 0, result.output
    board = Page((tmp_path / "report.html").read_text()).tables["leaderboard-0"]
    assert row_of(board, "dpo")[column(board, "Sig.")][0] == "baseline"


@pytest.mark.slow
def test_a_finished_cell_keeps_the_base_s_per_problem_outcomes_beside_its_own(tmp_path, micro_model_dir):
    """``base_eval.jsonl``: the untrained base's outcomes on the same problems, the paired reference
    for what training changed (here through the shuffled-reward control, end to end)."""
    from oxbench.grid.runner import run_cell

    cfg = RunConfig(
        grid="b", method="sgrpo", model={"name": micro_model_dir}, train={"batch_size": 2, "lr": 1e-3},
        online={"n": 4, "prompts_per_batch": 2, "rounds": 2, "max_new_tokens": 8, "n_prompts": 16,
                "reward_grader": "shuffled-flexible"},
        eval={"n_test": 6, "n_ood": 0, "k": 0, "max_new_tokens": 8},
    )  # fmt: skip
    rec = run_cell(cfg, tmp_path, verbose=False)
    assert rec["status"] == "finished", rec["error"]
    d = run_dir(tmp_path, "b", cfg.run_id())
    mine, base = (
        [json.loads(x) for x in (d / f).read_text().splitlines()] for f in ("eval.jsonl", "base_eval.jsonl")
    )
    assert [o["id"] for o in base] == [o["id"] for o in mine] and len(base) == 6
    assert sum(o["correct"] for o in base) / 6 == pytest.approx(rec["metrics"]["base_accuracy"])
