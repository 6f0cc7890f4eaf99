"""A full disk (issue 28.3): ENOSPC injected where oxbench writes a checkpoint, a run record and a report.

For each: the previous checkpoint stays loadable (and a rerun resumes from it, bitwise), nothing
half-written looks finished (no temp file left, nothing renamed into place, no record that says
finished for a cell that did not finish), and the error is one line naming the path: the cell's
record error, or the CLI's one-line error with exit 2 for the report.

The fault is injected where the disk would refuse: ``os.fsync`` or a write raising
``OSError(ENOSPC)`` with no file name (as the kernel's does), safetensors' serializer failing, or the
rename of a finished checkpoint.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from test_cli import micro_cell, runner
from test_report import record, write_run

from analysis.report import write_report
from oxbench.config import RunConfig
from oxbench.engine import checkpoint as C
from oxbench.grid import runner as grid_runner
from oxbench.grid.runs import read_record, run_dir, write_record
from oxbench.utils import write_json_atomic
from oxbench_cli import app

FULL = "No space left on device"


def enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # no file name: the write's own error


def leftovers(root: Path) -> list[str]:
    """Anything under ``root`` a failed write could leave looking like a file in progress."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name.endswith((".tmp", ".partial")))


def fsync_fails_for(monkeypatch, wants) -> list[str]:
    """``os.fsync`` raises ENOSPC for a file whose path and content ``wants(path, text)`` picks; the
    paths it refused are returned (as they fill up)."""
    real, refused = os.fsync, []

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        try:
            text = os.pread(fd, 1 << 20, 0).decode("utf-8", "replace")
        except OSError:  # opened write-only
            text = ""
        if wants(path, text):
            refused.append(path)
            raise enospc()
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return refused


# --------------------------------------------------------------------------- record writes


def test_an_atomic_write_on_a_full_disk_keeps_the_old_file_and_names_the_path(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    write_json_atomic(path, {"status": "running"})
    fsync_fails_for(monkeypatch, lambda p, text: True)
    with pytest.raises(OSError, match=FULL) as err:
        write_json_atomic(path, {"status": "finished"})
    assert str(path) in str(err.value) and len(str(err.value).splitlines()) == 1
    assert json.loads(path.read_text()) == {"status": "running"}  # the old file, whole
    assert leftovers(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def _cell(model_dir: str, **train) -> RunConfig:
    c = micro_cell(model_dir)
    c["train"] |= {"max_steps": 3, "batch_size": 2, **train}
    return RunConfig(grid="g", method="sft", checkpoint={"every": 1}, **c)


@pytest.mark.slow
@pytest.mark.parametrize("refused", ["finished", "every"])
def test_a_record_the_disk_refuses_is_never_left_finished(tmp_path, micro_model_dir, monkeypatch, refused):
    """The cell trains and evaluates, then its finished record cannot be written ("finished"), or no
    record can ("every"): the cell ends failed with one line naming run.json; the record on disk never
    says finished; its checkpoints stay, and a rerun on a freed disk resumes from the last one and
    evaluates to the same bytes."""
    cfg = _cell(micro_model_dir, max_steps=2)
    d = run_dir(tmp_path, "g", cfg.run_id())

    def full(path: str, text: str) -> bool:  # the disk fills once the cell has started
        if not Path(path).name.startswith(".run.json.") or '"status": "running"' in text:
            return False
        return refused == "every" or '"status": "finished"' in text

    with monkeypatch.context() as m:
        fsync_fails_for(m, full)
        rec = grid_runner.run_cell(cfg, tmp_path, verbose=False)
    assert rec["status"] == "failed", rec["error"]
    assert (
        len(rec["error"].splitlines()) == 1 and FULL in rec["error"] and str(d / "run.json") in rec["error"]
    )
    on_disk = read_record(d)
    assert on_disk["status"] == ("failed" if refused == "finished" else "running"), on_disk
    if refused == "finished":
        assert on_disk["error"] == rec["error"]
    assert leftovers(d) == [] and (d / "checkpoints" / "step-00000002").is_dir()
    evaluated = (d / "eval.jsonl").read_bytes()

    again = grid_runner.run_cell(cfg, tmp_path, verbose=False)
    assert again["status"] == "finished" and again["resumed_from_step"] == 2, again["error"]
    assert (d / "eval.jsonl").read_bytes() == evaluated


def test_a_record_write_the_disk_refuses_at_the_start_fails_the_cell_in_one_line(tmp_path, monkeypatch):
    cfg = RunConfig(grid="g", method="sft")
    d = run_dir(tmp_path, "g", cfg.run_id())
    fsync_fails_for(monkeypatch, lambda p, text: Path(p).name.startswith(".run.json."))
    rec = grid_runner.run_cell(cfg, tmp_path, verbose=False)
    assert rec["status"] == "failed" and rec["error"].count(FULL) == 1, rec["error"]
    assert str(d / "run.json") in rec["error"] and len(rec["error"].splitlines()) == 1
    assert read_record(d) is None and leftovers(d) == []


def test_the_record_writer_names_the_file_it_could_not_write(tmp_path, monkeypatch):
    from test_run_record import finished

    cfg = RunConfig(grid="g", method="dpo")
    fsync_fails_for(monkeypatch, lambda p, text: True)
    with pytest.raises(OSError, match=FULL) as err:
        write_record(tmp_path, finished(cfg, 0.5))
    assert err.value.filename == str(tmp_path / "run.json") and leftovers(tmp_path) == []


# --------------------------------------------------------------------------- checkpoint writes


def _state(step: int) -> dict:
    return {"w": torch.full((64,), float(step)), "step": step, "rng": torch.get_rng_state()}


WRITE_POINTS = ("tensors", "rank state", "manifest", "rename")


def _refuse(monkeypatch, where: str) -> None:
    """The checkpoint write fails at ``where``, after writing part of its file (a disk that filled)."""
    if where == "tensors":

        def save_file(tensors, filename):
            Path(filename).write_bytes(b"\0" * 100)  # a part of the file, then the disk is full
            raise SafetensorError(f"Error while serializing: I/O error: {FULL} (os error 28)")

        monkeypatch.setattr(C, "save_file", save_file)
    elif where == "rename":

        def replace(src, dst):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src), None, str(dst))

        monkeypatch.setattr(C.os, "replace", replace)
    else:
        name = {"rank state": "rank0.json", "manifest": C.MANIFEST}[where]
        real = C._write

        def write(path, data):
            if path.name != name:
                return real(path, data)
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
            raise enospc()

        monkeypatch.setattr(C, "_write", write)


@pytest.mark.parametrize("where", WRITE_POINTS)
def test_a_checkpoint_the_disk_refuses_leaves_the_one_before_loadable(tmp_path, monkeypatch, where):
    ck = C.Checkpointer(tmp_path, every=1)
    ck.save(1, _state(1))
    with monkeypatch.context() as m, pytest.raises(C.CheckpointWriteError) as err:
        _refuse(m, where)
        ck.save(2, _state(2))
    message = str(err.value)
    assert len(message.splitlines()) == 1 and FULL in message, message
    assert str(ck.root / "step-00000002") in message, message
    assert leftovers(tmp_path) == [] and [p.name for p in ck.root.iterdir()] == ["step-00000001"]
    step, state = C.Checkpointer(tmp_path).latest()
    assert step == 1 and torch.equal(state["w"], torch.full((64,), 1.0)) and state["step"] == 1


def test_a_partial_checkpoint_a_killed_writer_left_is_removed_at_resume(tmp_path):
    ck = C.Checkpointer(tmp_path, every=1)
    ck.save(1, _state(1))
    partial = ck.root / ".step-00000002.partial"
    partial.mkdir()
    (partial / "rank0.safetensors").write_bytes(b"\0" * 10)
    assert C.Checkpointer(tmp_path).latest()[0] == 1
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_a_cell_whose_checkpoint_fills_the_disk_fails_in_one_line_and_resumes_bitwise(
    tmp_path, micro_model_dir, monkeypatch
):
    """The third checkpoint of a 3-step cell cannot be written: the cell fails with one line naming it,
    the second stands, and a rerun resumes from it to the same evaluation, byte for byte, as a run the
    disk never interrupted."""
    cfg = _cell(micro_model_dir)
    whole = grid_runner.run_cell(cfg, tmp_path / "whole", verbose=False)
    assert whole["status"] == "finished", whole["error"]
    reference = (run_dir(tmp_path / "whole", "g", cfg.run_id()) / "eval.jsonl").read_bytes()

    out = tmp_path / "out"
    d = run_dir(out, "g", cfg.run_id())
    real = C.save_file

    def save_file(tensors, filename):
        if ".step-00000003.partial" in filename:
            raise SafetensorError(f"Error while serializing: I/O error: {FULL} (os error 28)")
        return real(tensors, filename)

    with monkeypatch.context() as m:
        m.setattr(C, "save_file", save_file)
        rec = grid_runner.run_cell(cfg, out, verbose=False)
    assert rec["status"] == "failed" and read_record(d)["status"] == "failed"
    assert rec["error"].startswith("CheckpointWriteError: cannot write checkpoint "), rec["error"]
    assert str(d / "checkpoints" / "step-00000003") in rec["error"] and FULL in rec["error"]
    assert len(rec["error"].splitlines()) == 1
    assert leftovers(d) == [] and sorted(p.name for p in (d / "checkpoints").iterdir()) == [
        "step-00000001",
        "step-00000002",
    ]
    again = grid_runner.run_cell(cfg, out, verbose=False)
    assert again["status"] == "finished" and again["resumed_from_step"] == 2, again["error"]
    assert (d / "eval.jsonl").read_bytes() == reference


# --------------------------------------------------------------------------- report writes


def _results(root: Path) -> Path:
    for method in ("dpo", "simpo"):
        for seed in range(2):
            write_run(root, record(method, "tiny", seed))
    return root


def _report_refused(monkeypatch) -> None:
    real = Path.write_text

    def write_text(self, data, *args, **kwargs):
        if not self.name.startswith(".report.html."):
            return real(self, data, *args, **kwargs)
        real(self, data[: len(data) // 2], *args, **kwargs)  # half the report, then the disk is full
        raise enospc()

    monkeypatch.setattr(Path, "write_text", write_text)


def test_a_report_the_disk_refuses_keeps_the_old_one_and_names_the_path(tmp_path, monkeypatch):
    root = _results(tmp_path)
    before = write_report(root).read_bytes()
    with monkeypatch.context() as m, pytest.raises(OSError, match=FULL) as err:
        _report_refused(m)
        write_report(root)
    assert err.value.filename == str(root / "report.html")
    assert (root / "report.html").read_bytes() == before and leftovers(root) == []


def test_oxbench_report_on_a_full_disk_is_one_line_exit_2(tmp_path, monkeypatch):
    root = _results(tmp_path)
    with monkeypatch.context() as m:
        _report_refused(m)
        result = runner.invoke(app, ["report", str(root)])
    assert result.exit_code == 2, result.output
    err = result.output.strip()
    assert len(err.splitlines()) == 1 and FULL in err and str(root / "report.html") in err, err
    assert "Traceback" not in err and not (root / "report.html").exists() and leftovers(root) == []
