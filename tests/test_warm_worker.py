"""Warm workers (issue 13): cells run in long-lived processes that import once, with the isolation a
process per cell gave. A cell gives the same record in a warm worker, after another cell, as in a
fresh process; a worker that dies takes only its own cell with it; a leaking one is retired."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import losses
from oxbench.config import RunConfig
from oxbench.grid import executors

TIMING = ("elapsed", "seconds", "gen_seconds", "train_seconds", "cum_gen_seconds", "cum_train_seconds")


def cell(micro_model_dir: str, method: str = "sft", seed: int = 0, grid: str = "warm") -> RunConfig:
    return RunConfig(
        grid=grid,
        method=method,
        seed=seed,
        model={"name": micro_model_dir},
        data={"n_train": 8},
        train={"batch_size": 4, "max_steps": 2, "lr": 1e-3},
        eval={"n_test": 4, "n_ood": 4, "k": 2, "n_samples": 2, "n_sampled": 2, "max_new_tokens": 6},
    )


def outcome(out: Path, cfg: RunConfig) -> dict:
    d = out / cfg.grid / cfg.run_id()
    rec = json.loads((d / "run.json").read_text())
    history = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    return {
        "status": rec["status"],
        "metrics": {k: v for k, v in rec["metrics"].items() if k not in TIMING},
        "history": [{k: v for k, v in row.items() if k not in TIMING} for row in history],
        "data_order_sha": rec["data_order_sha"],
    }


def test_a_cell_in_a_warm_worker_is_the_cell_in_a_fresh_process(micro_model_dir, tmp_path):
    first, second = cell(micro_model_dir, seed=1), cell(micro_model_dir, seed=2)
    recs = executors.run_local([first, second], tmp_path / "warm", workers=1)
    assert [r["status"] for r in recs] == ["finished", "finished"]
    executors.run_local([second], tmp_path / "fresh", workers=1, warm=False)
    assert outcome(tmp_path / "warm", second) == outcome(tmp_path / "fresh", second)
    for c in (first, second):  # each cell's output went to its own log, not the pool's
        assert (tmp_path / "warm" / "warm" / c.run_id() / "train.log").exists()


def test_a_worker_that_dies_fails_only_its_cell(micro_model_dir, tmp_path, monkeypatch):
    """A plugin loss that kills its process (as the OOM killer would): that cell is recorded failed
    with the exit code; the next cell, on a fresh worker, finishes."""
    plugin = tmp_path / "plugins" / "crashing_loss.py"
    plugin.parent.mkdir()
    plugin.write_text(
        textwrap.dedent(
            """
            import os
            import losses

            def crash(inputs, **_):
                os._exit(9)

            SPEC = losses.register(losses.LossSpec(name="crash_test", fn=crash, paradigm="offline", data="sft", needs_reference=False))
            """
        )
    )
    monkeypatch.setenv("PYTHONPATH", f"{plugin.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("OXBENCH_PLUGINS", "crashing_loss")
    monkeypatch.syspath_prepend(str(plugin.parent))
    import crashing_loss  # noqa: F401  (the parent validates and hashes cells by the registry)

    bad, good = cell(micro_model_dir, method="crash_test"), cell(micro_model_dir, seed=3)
    try:
        recs = {r["method"]: r for r in executors.run_local([bad, good], tmp_path / "out", workers=1)}
    finally:
        losses.unregister("crash_test")
    assert recs["crash_test"]["status"] == "failed" and "exited with code 9" in recs["crash_test"]["error"]
    assert recs["sft"]["status"] == "finished"


def test_a_worker_is_retired_after_its_cell_quota_and_when_its_memory_grows(micro_model_dir, tmp_path):
    w = executors.WarmWorker(workers=1, max_cells=2)
    pids = []
    for seed in (4, 5, 6):
        assert w.run(cell(micro_model_dir, seed=seed), tmp_path)["status"] == "finished"
        pids.append(w.proc.pid if w.proc else None)
    assert pids[0] is not None and pids[1] is None and pids[2] is not None and pids[2] != pids[0]
    w.first_rss, w.cells = 100.0, 0
    w._maybe_retire(151.0)  # grew past 1.5x its first cell's memory: retired
    assert w.proc is None


def _files(root: Path) -> dict[str, str]:
    """Each cached artefact's digest; its seal (``*.seal.json``) is checked to be there, not compared: it
    holds the file's modification time."""
    import hashlib

    files = [
        p for p in root.rglob("*") if p.is_file() and p.parent.name != "prepared"
    ]  # the marker: absolute paths
    artefacts = [p for p in files if not p.name.endswith(".seal.json")]
    assert all(p.with_name(p.name + ".seal.json") in files for p in artefacts)
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in artefacts}


def test_a_preparation_in_a_warm_worker_makes_what_its_own_process_makes(
    micro_model_dir, tmp_path, monkeypatch
):
    """The shared work (base evaluation, self-play data) made in a warm worker, which then runs the cell
    itself with nothing imported again, is byte for byte what a ``--prepare`` process makes."""
    quick = {
        "updates": 800,
        "batch_size": 96,
        "lr": 3.0e-3,
        "n_examples": 20000,
        "answer_styles": {"gsm8k": 0.3, "sentence": 0.7},
    }  # fmt: skip  (the quickstart's shipped tiny-s base)
    cfg = RunConfig(
        **{**cell(micro_model_dir, method="dpo").model_dump(), "model": {"name": "tiny-s", "pretrain": quick}}
    )
    made = {}
    for how in ("worker", "process"):
        cache = tmp_path / how / "cache"
        monkeypatch.setenv("OXBENCH_CACHE", str(cache))
        if how == "worker":
            w = executors.WarmWorker(workers=1)
            secs, err = w.prepare(cfg, tmp_path / how, 1)
            pid = w.proc.pid
            assert w.run(cfg, tmp_path / how)["status"] == "finished" and w.proc.pid == pid
            w.close()
        else:
            secs, err = executors._prepare_one(cfg, tmp_path / how, 1)
        assert err is None and secs > 0
        made[how] = _files(cache / "base_eval") | _files(cache / "data")
    assert made["worker"] == made["process"] and len(made["worker"]) >= 2


def test_a_preparation_that_fails_in_a_warm_worker_is_one_line_and_the_worker_goes_on(
    micro_model_dir, tmp_path
):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    w = executors.WarmWorker(workers=1)
    try:
        _, err = w.prepare(cell(str(broken)), tmp_path, 1)
        assert err.startswith(f"preparing {broken} for sft: ") and "\n" not in err, err
        assert w.run(cell(micro_model_dir, seed=7), tmp_path)["status"] == "finished"
    finally:
        w.close()
