"""A record's ``git_sha``: the checkout's commit, or the commit a tree was exported from (the GPU kit's
stamp, ``oxbench/_export.json``), never the commit of another repository the tree happens to lie in."""

import json
import subprocess
from pathlib import Path

import pytest

from oxbench.grid import runs

ROOT = Path(__file__).resolve().parent.parent


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip


@pytest.fixture
def outer(tmp_path):
    """Another repository, with one commit, holding an exported tree at ``kit/``."""
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "not oxbench")
    (tmp_path / "kit" / "oxbench").mkdir(parents=True)
    return tmp_path


def _as_tree(monkeypatch, root: Path):
    monkeypatch.setattr(runs, "ROOT", root.resolve())
    monkeypatch.setattr(runs, "EXPORT_STAMP", root / "oxbench" / "_export.json")


def test_a_checkout_names_its_own_commit():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    head = _git(ROOT, "rev-parse", "HEAD")
    assert runs.git_sha().removesuffix("+dirty") == head


def test_an_exported_tree_names_the_commit_in_its_stamp_not_the_repository_around_it(outer, monkeypatch):
    _as_tree(monkeypatch, outer / "kit")
    (outer / "kit" / "oxbench" / "_export.json").write_text(json.dumps({"git_sha": "a" * 40}))
    assert runs.git_sha() == "a" * 40


def test_an_exported_tree_without_a_stamp_is_unknown(outer, monkeypatch):
    _as_tree(monkeypatch, outer / "kit")
    assert runs.git_sha() == "unknown"
    (outer / "kit" / "oxbench" / "_export.json").write_text("{not json")
    assert runs.git_sha() == "unknown"


def test_a_stamp_outside_any_repository_is_read(tmp_path, monkeypatch):
    (tmp_path / "oxbench").mkdir()
    (tmp_path / "oxbench" / "_export.json").write_text(json.dumps({"git_sha": "b" * 40}))
    _as_tree(monkeypatch, tmp_path)
    assert runs.git_sha() == "b" * 40
