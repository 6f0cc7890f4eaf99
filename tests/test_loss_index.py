"""The loss registry's index (``losses/index.json``): what planning reads instead of importing the losses
(and torch). It is the live registry's metadata, regenerated here and compared byte for byte; every
entry answers as its live spec does (capabilities, hyper-parameter errors, run_id); and whenever the
index cannot speak for a name (stale sources, a plugin, a registered spec, a twice-declared name) the
live registry answers instead."""

from __future__ import annotations

import json

import pytest

import losses
import losses.registry as registry
from oxbench.config import RunConfig
from oxbench.engine.plan import Capabilities


def from_index(name: str) -> losses.LossInfo:
    entry = registry._index()[name]
    return losses.LossInfo(**{k: v for k, v in entry.items() if k != "entry_point"})


@pytest.fixture()
def fresh_index(monkeypatch):
    """The index read again (not the cached read) and no built-in registered in this process."""
    monkeypatch.setattr(registry, "_INDEX", {})
    monkeypatch.setattr(registry, "_INFO", {})
    for name in registry.builtin_names():
        monkeypatch.delitem(registry._REGISTRY, name, raising=False)


def test_the_committed_index_is_the_live_registry():
    """Regenerated from the live registry, the index is the committed file, byte for byte."""
    text = registry.render_index(registry.build_index())
    assert registry.INDEX.read_text(encoding="utf-8") == text, (
        "losses/index.json is stale: run `python -m losses` and commit it"
    )
    index = json.loads(text)
    assert set(index["losses"]) == set(registry.builtin_names()) and len(index["losses"]) == 52
    assert index["sources"] == registry.sources_digest()


def test_every_entry_answers_as_its_live_spec():
    for name in registry.builtin_names():
        spec, info = losses.get(name), from_index(name)
        assert info.metadata() == spec.metadata(), name
        assert info.trains_online == spec.trains_online, name
        for hparams in (spec.resolve_hparams(), {**spec.resolve_hparams(), "beta": 0.0, "entropy_coef": 0.1}):
            assert Capabilities.of(info, hparams) == Capabilities.of(spec, hparams), name
            assert info.uses_reference(hparams) == spec.uses_reference(hparams), name
            assert info.uses_entropy(hparams) == spec.uses_entropy(hparams), name
        assert info.resolve_hparams() == spec.resolve_hparams(), name
        numbers = [k for k, v in spec.defaults.items() if isinstance(v, float)]
        for bad in ({"betta": 0.1}, *({k: "high"} for k in numbers[:1])):
            with pytest.raises(losses.LossError) as live:
                spec.resolve_hparams(bad)
            with pytest.raises(losses.LossError) as indexed:
                info.resolve_hparams(bad)
            assert str(indexed.value) == str(live.value), name


def test_run_ids_from_the_index_are_the_live_registrys(fresh_index, monkeypatch):
    configs = [RunConfig(method=name, seed=1) for name in registry.builtin_names()]
    assert all(isinstance(losses.info(c.method), losses.LossInfo) for c in configs)
    indexed = [c.run_id() for c in configs]
    monkeypatch.setattr(registry, "_INDEX", {"entries": {}})  # no index: every name from the live spec
    assert all(isinstance(losses.info(c.method), losses.LossSpec) for c in configs)
    assert [c.run_id() for c in configs] == indexed


def test_a_stale_index_is_not_read(fresh_index, monkeypatch):
    """Sources changed since the index was written (a loss edited, `python -m losses` not run): the live
    registry answers, so a changed version can never keep an old run_id."""
    monkeypatch.setattr(registry, "sources_digest", lambda: "not-the-digest")
    assert isinstance(losses.info("dpo"), losses.LossSpec)


def test_a_missing_or_broken_index_is_not_read(fresh_index, monkeypatch, tmp_path):
    for text in (None, "{not json", '["a list"]', '{"sources": 3}'):
        path = tmp_path / "index.json"
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(registry, "INDEX", path)
        monkeypatch.setattr(registry, "_INDEX", {})
        assert isinstance(losses.info("sft"), losses.LossSpec), text
        path.unlink(missing_ok=True)


def test_a_name_the_index_lacks_is_the_live_registrys(fresh_index):
    with pytest.raises(losses.LossError, match=r"unknown loss 'dpoo'; did you mean 'dpo'\?"):
        losses.info("dpoo")
    spec = losses.LossSpec(name="tmp_indexless", fn=losses.get("sft").fn, paradigm="sft", data="sft",
                           needs_reference=False)  # fmt: skip
    losses.register(spec)
    try:
        assert losses.info("tmp_indexless") is spec
        assert spec in losses.all_info()
    finally:
        losses.unregister("tmp_indexless")


def test_a_second_entry_point_for_a_built_in_name_is_an_error_not_the_index(fresh_index, monkeypatch):
    from types import SimpleNamespace

    twin = SimpleNamespace(name="dpo", value="evil_pkg:spec", dist=SimpleNamespace(name="evil"), load=None)
    real = registry._entry_points
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real(), "dpo": [*real()["dpo"], twin]})
    with pytest.raises(losses.LossError, match="duplicate loss 'dpo'"):
        losses.info("dpo")
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real(), "dpo": [twin]})  # moved elsewhere
    with pytest.raises(losses.LossError, match="evil_pkg:spec"):
        losses.info("dpo")


def test_a_spec_registered_in_this_process_is_answered_live(fresh_index):
    """Once a built-in is loaded (training), ``info`` gives the spec itself, not its entry."""
    assert isinstance(losses.info("ipo"), losses.LossInfo)
    spec = losses.get("ipo")
    assert losses.info("ipo") is spec


def test_the_entry_point_scan_is_kept_until_the_path_changes(monkeypatch, tmp_path):
    calls = []
    real = registry.entry_points
    monkeypatch.setattr(registry, "entry_points", lambda **kw: calls.append(kw) or real(**kw))
    monkeypatch.setattr(registry, "_SCANNED", {})
    first = registry._entry_points()
    assert registry._entry_points() == first and len(calls) == 1
    first["dpo"].clear()  # a caller's copy: the kept scan is unchanged
    assert registry._entry_points()["dpo"]
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._entry_points()
    assert len(calls) == 2
