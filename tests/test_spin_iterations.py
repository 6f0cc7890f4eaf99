"""SPIN's iterations (arXiv:2401.01335 Algorithm 1): which weights produced the rejected answers?

4 prompts, 2 per round, ``pair_refresh_every: 1`` -> an iteration is 2 rounds; 4 rounds = 2 iterations.
The rejected answers of rounds 0-1 must come from the initial weights (iterate θ_0), those of rounds 2-3
from the policy after round 1's update (θ_1), which is then also the reference. Version 1 of the spec
synced the sampler to the current policy every round, so round 1 sampled from θ after one update.
"""

from __future__ import annotations

import helpers
from helpers import cfg_for, length_parity_reward, rows_for

import losses
from oxbench.engine import build as tr
from oxbench.engine import distributed as D
from oxbench.engine.reference import LiveReference
from oxbench.engine.rollout import RolloutWorker
from oxbench.models.loading import load_model


def checksum(tensors) -> float:
    return float(sum(t.double().sum() * (i + 1) for i, t in enumerate(tensors)))


def test_spin_samples_each_iteration_from_the_frozen_iterate(monkeypatch, micro_model_dir):
    D.init_distributed()
    generated, synced, refreshed = [], [], []
    real_rollouts, real_pull, real_refresh = RolloutWorker.rollouts, RolloutWorker.pull, LiveReference.refresh

    def rollouts(self, *a, **k):
        out = real_rollouts(self, *a, **k)
        generated.append(
            (self.version, checksum(self.model.state_dict().values()), {r.policy_version for r in out})
        )
        return out

    def pull(self, version):  # the learner's weights copied into the sampler, in place
        real_pull(self, version)
        synced.append((version, checksum(self.model.state_dict().values())))

    def refresh(self, state, alpha=1.0):
        real_refresh(self, state, alpha)
        refreshed.append((alpha, checksum(self.model.state_dict().values())))

    monkeypatch.setattr(RolloutWorker, "rollouts", rollouts)
    monkeypatch.setattr(RolloutWorker, "pull", pull)
    monkeypatch.setattr(LiveReference, "refresh", refresh)

    spec = losses.get("spin")
    cfg = cfg_for(micro_model_dir, "spin", lr=1e-2)
    cfg = cfg.model_copy(
        update={
            "online": cfg.online.model_copy(
                update={"rounds": 4, "prompts_per_batch": 2, "pair_refresh_every": 1}
            )
        }
    )
    model, tok = load_model(micro_model_dir, cfg, init_seed=0)
    initial = checksum(model.state_dict().values())
    prompts = rows_for("online", 4)
    assert tr.rounds_per_iteration(_caps(spec), len(prompts), cfg) == 2
    _, res = helpers.train_online(
        cfg, spec, spec.resolve_hparams(), model, tok, prompts, run="spin", reward_fn=length_parity_reward
    )
    assert res.optimizer_steps == 4
    # the sampler is set twice, at the start of each iteration, to the iterate's weights
    assert [v for v, _ in synced] == [0, 2]
    assert synced[0][1] == initial and synced[1][1] != initial
    # every round's rejected answers come from that iteration's frozen iterate
    assert [(v, c) for v, c, _ in generated] == [synced[0], synced[0], synced[1], synced[1]]
    assert all(versions == {v} for v, _, versions in generated)
    # the iterate θ_1 is also the new reference, a hard copy
    assert refreshed == [(1.0, synced[1][1])]
    assert res.history[1]["policy_version"] == 0 and res.history[2]["policy_version"] == 2


def test_pair_refresh_every_sets_the_iteration_length(micro_model_dir):
    spec = losses.get("spin")
    cfg = cfg_for(micro_model_dir, "spin")
    for every, rounds in [(1, 3), (2, 6)]:
        c = cfg.model_copy(update={"online": cfg.online.model_copy(update={"pair_refresh_every": every})})
        assert tr.rounds_per_iteration(_caps(spec), 5, c) == rounds  # ceil(5 prompts / 2 per round) x passes
    assert tr.rounds_per_iteration(_caps(losses.get("online_dpo")), 5, cfg) is None


def _caps(spec):
    from oxbench.engine.plan import Capabilities

    return Capabilities.of(spec, spec.resolve_hparams())
