"""Live tracking (issue 17): one real online run logs to TensorBoard, W&B (offline), MLflow (a local file
store) and trackio (local) at once, and each backend's own reader gives back the rows of the run's
records: every optimiser step, every learning-curve point and the final evaluation. A backend that
cannot start or fails is a one-line warning and the run goes on."""

from __future__ import annotations

import json
import math
import struct
import sys

import pytest
from typer.testing import CliRunner

from oxbench.config import RunConfig
from oxbench.grid.runner import run_cell
from oxbench.grid.runs import run_dir
from oxbench.tracking import Tracker

pytestmark = pytest.mark.slow


def online_cell(model_dir: str, track: list[str]) -> RunConfig:
    return RunConfig(
        grid="trk", method="sgrpo", track=track, model={"name": model_dir},
        train={"batch_size": 2, "lr": 1e-3},
        online={"n": 4, "prompts_per_batch": 2, "rounds": 2, "max_new_tokens": 8, "n_prompts": 16},
        eval={"n_test": 4, "n_ood": 4, "k": 0, "max_new_tokens": 8, "every": 8, "n_val": 4},
    )  # fmt: skip


def same(got, want) -> bool:
    """Equal (step, value) pairs, values to float32 precision (TensorBoard stores float32)."""
    return len(got) == len(want) and all(
        a[0] == b[0] and math.isclose(a[1], b[1], rel_tol=1e-6, abs_tol=1e-9) for a, b in zip(got, want)
    )


def wandb_history(path) -> list[dict]:
    """The history rows of an offline W&B run, read from its ``.wandb`` file (W&B's record log: a
    7-byte header, then 32 KiB blocks of records, each a 7-byte header (crc, length, type) and a
    protobuf ``Record``; type 1 is whole, 2/3/4 are the first, middle and last part of a long one)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, part, rows = path.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7]) if left >= 7 else (0, 0, 0)
        if kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(part)
            if rec.WhichOneof("record_type") == "history":
                rows.append(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
                )
    return rows


def test_every_backend_gets_every_row_and_reads_back(tmp_path, micro_model_dir, monkeypatch):
    pytest.importorskip("wandb"), pytest.importorskip("mlflow"), pytest.importorskip("trackio")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = online_cell(micro_model_dir, ["tensorboard", "wandb", "mlflow", "trackio"])
    rec = run_cell(cfg, tmp_path / "out", verbose=False)
    assert rec["status"] == "finished", rec["error"]
    assert rec["tracking"] == {b: "ok" for b in cfg.track}
    d = run_dir(tmp_path / "out", "trk", cfg.run_id())
    steps = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    curve = [json.loads(line) for line in (d / "curve.jsonl").read_text().splitlines()]
    losses = [(r["step"], r["loss"]) for r in steps]
    points = [(r["rollouts"], r["accuracy"]) for r in curve]
    accuracy, name = rec["metrics"]["accuracy"], "sgrpo s0"
    assert len(losses) == 2 and [p[0] for p in points] == [0, 8, 16]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = (d / "tb").iterdir()
    assert events.name == "sgrpo_s0"
    ea = EventAccumulator(str(events))
    ea.Reload()
    assert same([(e.step, e.value) for e in ea.Scalars("train/loss")], losses)
    assert same([(e.step, e.value) for e in ea.Scalars("curve/accuracy")], points)
    assert ea.Scalars("eval/accuracy")[0].value == pytest.approx(accuracy)
    assert "train/cum_rollouts" in ea.Tags()["scalars"]  # the compute ledger streams too

    (history,) = [wandb_history(p) for p in d.glob("wandb/offline-run-*/*.wandb")]
    assert same([(r["train/step"], r["train/loss"]) for r in history if "train/loss" in r], losses)
    assert same(
        [(r["curve/rollouts"], r["curve/accuracy"]) for r in history if "curve/accuracy" in r], points
    )
    assert [r["eval/accuracy"] for r in history if "eval/accuracy" in r] == pytest.approx([accuracy])

    from mlflow.tracking import MlflowClient

    client = MlflowClient((tmp_path / "out" / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("trk").experiment_id])
    assert run.info.run_name == name and run.data.tags["arm"] == "sgrpo"
    assert same([(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/loss")], losses)
    assert same(
        [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "curve/accuracy")], points
    )

    from trackio.sqlite_storage import SQLiteStorage

    logs = SQLiteStorage.get_logs("trk", name)
    assert same([(r["train/step"], r["train/loss"]) for r in logs if "train/loss" in r], losses)
    assert [r["eval/accuracy"] for r in logs if "eval/accuracy" in r] == pytest.approx([accuracy])


def test_tensorboard_streams_while_the_run_trains(tmp_path):
    """A row is readable from the event file as soon as it is logged, before the run ends."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracker.start(
        ["tensorboard"], run_dir=tmp_path, project="g", name="dpo s0", group="dpo", config={}
    )
    tracker.log("train", {"loss": 0.5, "flag": True, "note": "x"}, 1)
    ea = EventAccumulator(str(tmp_path / "tb" / "dpo_s0"))
    ea.Reload()
    assert [(e.step, e.value) for e in ea.Scalars("train/loss")] == [(1, 0.5)]
    assert ea.Tags()["scalars"] == ["train/loss"]  # flags and text are not plotted
    tracker.close()


def test_a_backend_that_cannot_start_or_fails_is_a_warning_and_the_run_goes_on(
    tmp_path, micro_model_dir, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    cfg = online_cell(micro_model_dir, ["wandb", "tensorboard"])
    rec = run_cell(cfg, tmp_path, verbose=False)
    assert rec["status"] == "finished"
    assert (
        rec["tracking"]["wandb"].startswith("unavailable: ModuleNotFoundError")
        and rec["tracking"]["tensorboard"] == "ok"
    )
    err = [line for line in capsys.readouterr().err.splitlines() if "tracking" in line]
    assert err == [f"warning: tracking: wandb {rec['tracking']['wandb']}; the run logs to its records only"]

    class Broken:
        def log(self, *a):
            raise ConnectionError("server went away")

    tracker = Tracker({"mlflow": Broken()}, {"mlflow": "ok"})
    tracker.log("train", {"loss": 1.0}, 1)
    tracker.log("train", {"loss": 1.0}, 2)  # dropped after the first failure: one warning
    assert tracker.status == {"mlflow": "failed: ConnectionError: server went away"} and not tracker.backends
    assert capsys.readouterr().err.count("server went away") == 1


def test_the_grid_warns_once_at_start_up_about_a_missing_package(tmp_path, micro_model_dir, monkeypatch):
    import importlib.util

    from test_cli import grid, write

    from oxbench_cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "trackio" else real(n, *a))
    g = grid(micro_model_dir)
    g["base"]["track"] = ["tensorboard", "trackio"]
    r = CliRunner().invoke(app, ["run", "--grid", str(write(tmp_path, "g.yaml", g)), "--plan"])
    assert r.exit_code == 0 and r.output.count("warning") == 1
    assert "track: trackio is not installed (pip install 'oxbench[track]')" in " ".join(r.output.split())


def test_an_unknown_backend_is_a_one_line_error(tmp_path, micro_model_dir):
    from test_cli import grid, one_line_error, write

    from oxbench_cli import app

    g = grid(micro_model_dir)
    g["base"]["track"] = ["tensorbord"]
    r = CliRunner().invoke(app, ["run", "--grid", str(write(tmp_path, "g.yaml", g)), "--plan"])
    one_line_error(r, "g.yaml", "'track.0'")
