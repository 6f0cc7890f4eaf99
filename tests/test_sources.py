"""Experience sources (issue 15): sync is the loop as it was; delayed lags by exactly S versions."""

from __future__ import annotations

import pytest
import torch
from helpers import cfg_for, length_parity_reward, rows_for, train_online
from pydantic import ValidationError

import losses
from oxbench.config import RunConfig
from oxbench.engine import distributed as D
from oxbench.engine.model import full_state_dict
from oxbench.models.loading import load_model

pytestmark = pytest.mark.slow


def run(model_dir, monkeypatch, **online):
    """Five rounds of sgrpo on the micro model; returns the final weights, the versions each round's
    rollouts carry, and a checksum of the weights each round sampled with."""
    from oxbench.engine.rollout import RolloutWorker

    D.init_distributed()
    spec = losses.get("sgrpo")
    cfg = cfg_for(model_dir, "sgrpo", max_steps=None)
    cfg = cfg.model_copy(update={"online": cfg.online.model_copy(update={"rounds": 5, **online})})
    model, tok = load_model(model_dir, cfg, init_seed=0)
    versions, sampled_with = [], []
    real = RolloutWorker.rollouts

    def spy(self, *a, **k):
        out = real(self, *a, **k)
        versions.append(sorted({r.policy_version for r in out}))
        sampled_with.append(float(sum(p.double().sum() for p in self.model.state_dict().values())))
        return out

    with monkeypatch.context() as m:
        m.setattr(RolloutWorker, "rollouts", spy)
        engine, res = train_online(cfg, spec, spec.resolve_hparams(), model, tok, rows_for("online", 8), run="src",
                                   reward_fn=length_parity_reward)  # fmt: skip
    return full_state_dict(engine), versions, sampled_with, res


def test_delayed_at_s0_is_the_sync_loop_bit_for_bit(micro_model_dir, monkeypatch):
    sync, v_sync, w_sync, _ = run(micro_model_dir, monkeypatch)
    delayed, v_del, w_del, _ = run(micro_model_dir, monkeypatch, source="delayed", staleness=0)
    assert v_sync == v_del == [[0], [1], [2], [3], [4]] and w_sync == w_del
    assert all(torch.equal(sync[k], delayed[k]) for k in sync)


def test_delayed_lags_by_exactly_s(micro_model_dir, monkeypatch):
    """S = 2: at learner versions 0..4 the rollouts come from versions 0, 0, 0, 1, 2, sampled with the
    very weights the on-policy run had at those versions (same checksums), and the loss sees
    staleness 0, 1, 2, 2, 2."""
    _, _, w_sync, _ = run(micro_model_dir, monkeypatch)
    _, versions, sampled_with, res = run(micro_model_dir, monkeypatch, source="delayed", staleness=2)
    assert versions == [[0], [0], [0], [1], [2]]
    assert sampled_with[:3] == [w_sync[0]] * 3
    assert [h["staleness_max"] for h in res.history] == [0, 1, 2, 2, 2]


def test_source_bad_input():
    with pytest.raises(ValidationError, match="staleness S must be >= 0"):
        RunConfig(method="sgrpo", online={"source": "delayed", "staleness": -1})
    with pytest.raises(ValidationError, match="needs online.source 'delayed' or 'async'"):
        RunConfig(method="sgrpo", online={"staleness": 2})
    with pytest.raises(ValidationError, match="leave sync_every at 1"):
        RunConfig(method="sgrpo", online={"source": "delayed", "staleness": 2, "sync_every": 4})
    from oxbench.grid.spec import GridError, validate_cell

    with pytest.raises(GridError, match="online.source"):
        validate_cell(RunConfig(method="spin", online={"source": "delayed", "staleness": 1}), "g")


def async_run(model_dir, staleness, *, kill_producer_at=None, rounds=6):
    """sgrpo on the micro model with the asynchronous producer; a spy records, per round, the learner
    version at consumption and the versions its rollouts carry."""
    import oxbench.engine.sources as src

    D.init_distributed()
    spec = losses.get("sgrpo")
    cfg = cfg_for(model_dir, "sgrpo", max_steps=None)
    cfg = cfg.model_copy(update={"online": cfg.online.model_copy(
        update={"rounds": rounds, "source": "async", "staleness": staleness, "queue_size": 2})})  # fmt: skip
    model, tok = load_model(model_dir, cfg, init_seed=0)
    seen = []
    real = src.AsyncSource.draw

    def spy(self, rnd, sample=None):
        if kill_producer_at == rnd:
            self.process.kill()
            self.process.join()
            while not self.queue.empty():
                self.queue.get()
        out = real(self, rnd, sample)
        version = self.version
        seen.append((rnd, version, sorted({r.policy_version for r in out}), [r.prompt_id for r in out]))
        return out

    src.AsyncSource.draw = spy
    try:
        _, res = train_online(cfg, spec, spec.resolve_hparams(), model, tok, rows_for("online", 8), run="async",
                              reward_fn=length_parity_reward)  # fmt: skip
    finally:
        src.AsyncSource.draw = real
    return seen, res


@pytest.mark.parametrize("staleness", [0, 2])
def test_async_rounds_arrive_once_in_order_within_s(micro_model_dir, staleness):
    """Every round arrives exactly once, in order, with the prompts the synchronous loop would use,
    and no rollout is more than S versions behind the learner that consumes it (at S = 0: on-policy)."""
    seen, res = async_run(micro_model_dir, staleness)
    assert [r for r, *_ in seen] == list(range(6)) and res.optimizer_steps == 6
    for rnd, version, versions, _ in seen:
        assert version == rnd and all(0 <= version - v <= staleness for v in versions)
    if staleness == 0:
        assert all(versions == [version] for _, version, versions, _ in seen)
    from oxbench.data.sampler import make_sampler
    from oxbench.engine.sources.rollouts import round_prompts

    sampler = make_sampler(8, seed=0, rank=0, world_size=1)
    want = [
        [p["id"] for p in round_prompts(rows_for("online", 8), r, 2, sampler) for _ in range(4)]
        for r in range(6)
    ]
    assert [ids for *_, ids in seen] == want
    assert all(h["queue_wait"] >= 0 and "producer_wait" in h for h in res.history)
    assert all(h["sync_s"] > 0 for h in res.history)  # the learner publishing its weights to the producer


def test_a_dead_producer_is_an_error_that_names_it(micro_model_dir):
    from oxbench.engine.sources import ProducerError

    with pytest.raises(
        ProducerError, match=r"rollout producer \(pid \d+\) died with exit code -9 before sending round 2"
    ):
        async_run(micro_model_dir, 1, kill_producer_at=2)
