"""The shared trainer: every loss trains, invariances hold, the reference is cached and checked."""

from __future__ import annotations

import pytest
import torch
from helpers import cfg_for, length_parity_reward, rows_for, train_offline, train_online

import losses
from oxbench.config import RunConfig  # noqa: F401
from oxbench.engine import distributed as D
from oxbench.models.loading import load_model

BUILTINS = sorted(
    n for n, eps in losses.registry._entry_points().items() if eps[0].value.startswith("losses.")
)


def train(method: str, path: str, **train_kw):
    D.init_distributed()
    spec = losses.get(method)
    cfg = cfg_for(path, method, **train_kw)
    model, tok = load_model(path, cfg, init_seed=0)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    hp = spec.resolve_hparams()
    if spec.data == "online" or spec.generates_own_pairs:
        engine, res = train_online(
            cfg, spec, hp, model, tok, rows_for("online", 8), run=method, reward_fn=length_parity_reward
        )
    else:
        engine, res = train_offline(cfg, spec, hp, model, tok, rows_for(spec.data), run=method)
    return engine, res, before


@pytest.mark.slow
@pytest.mark.parametrize("method", BUILTINS)
def test_three_trainer_steps_change_parameters(method, micro_model_dir):
    engine, res, before = train(method, micro_model_dir)
    assert res.optimizer_steps == 3
    logged = [h["loss"] for h in res.history if "loss" in h]  # a step whose pairs all tie logs none
    assert logged and all(torch.isfinite(torch.tensor(x)) for x in logged)
    module = engine.module.lm if hasattr(engine.module, "lm") else engine.module
    changed = any(not torch.equal(before[k], v.detach()) for k, v in module.named_parameters() if k in before)
    assert changed, f"{method}: three steps left every parameter unchanged"


def _params(engine):
    return torch.cat([p.detach().flatten() for p in engine.module.parameters()])


def test_batch_8_x_accum_1_equals_batch_1_x_accum_8(micro_model_dir):
    """One optimizer step on the same 8 pairs: one micro-batch of 8, or 8 micro-batches of 1."""
    a, _, _ = train("dpo", micro_model_dir, batch_size=8, grad_accum=1, max_steps=1, lr=1e-3)
    b, _, _ = train("dpo", micro_model_dir, batch_size=1, grad_accum=8, max_steps=1, lr=1e-3)
    torch.testing.assert_close(_params(a), _params(b), rtol=0, atol=2e-6)


def test_same_seed_same_metrics_and_other_seed_other_order(micro_model_dir):
    _, r1, _ = train("dpo", micro_model_dir)
    _, r2, _ = train("dpo", micro_model_dir)
    assert [h["loss"] for h in r1.history] == [h["loss"] for h in r2.history]
    assert r1.data_order_sha == r2.data_order_sha
    D.init_distributed()
    spec = losses.get("dpo")
    cfg = cfg_for(micro_model_dir, "dpo").model_copy(update={"seed": 1})
    model, tok = load_model(micro_model_dir, cfg, init_seed=1)
    _, r3 = train_offline(cfg, spec, spec.resolve_hparams(), model, tok, rows_for("pairs"), run="dpo-s1")
    assert r3.data_order_sha != r1.data_order_sha
    assert [h["loss"] for h in r3.history] != [h["loss"] for h in r1.history]


def test_reference_logps_are_cached_once(micro_model_dir, monkeypatch):
    """The second run with the same data reads the cache: no reference forward at all."""
    import oxbench.engine.reference as ref

    train("dpo", micro_model_dir, max_steps=1)
    calls = []
    real = ref.token_logps
    monkeypatch.setattr(ref, "token_logps", lambda *a, **k: calls.append(1) or real(*a, **k))
    train("dpo", micro_model_dir, max_steps=1)
    assert calls == []


def test_stale_reference_cache_is_caught_at_step_0(micro_model_dir, monkeypatch):
    """If the cached reference does not match the initial policy, the run stops at step 0."""
    import oxbench.engine.reference as ref

    real = ref.RefCache.sequence_and_tokens

    def shifted(self, ids, role, mask):
        seq, tok = real(self, ids, role, mask)
        return seq + 0.5, tok

    monkeypatch.setattr(ref.RefCache, "sequence_and_tokens", shifted)
    with pytest.raises(RuntimeError, match="step-0"):
        train("dpo", micro_model_dir, max_steps=1)


def test_online_rollouts_carry_policy_version(micro_model_dir, monkeypatch):
    """Every rollout is stamped with the version of the weights that generated it."""
    from oxbench.engine.rollout import RolloutWorker

    seen = []
    real = RolloutWorker.rollouts

    def spy(self, *a, **k):
        out = real(self, *a, **k)
        seen.append({r.policy_version for r in out})
        return out

    monkeypatch.setattr(RolloutWorker, "rollouts", spy)
    _, res, _ = train("sgrpo", micro_model_dir)
    assert seen == [{0}, {1}, {2}]
    assert [h["step"] for h in res.history] == [1, 2, 3]


def test_the_online_compute_ledger_counts_every_rollout_and_token(micro_model_dir):
    """Issue 14's ledger: per round the rollouts, generated tokens and trained tokens (prompt +
    completion, once per pass), and the cumulative totals in every row and in the result."""
    D.init_distributed()
    spec = losses.get("sgrpo")
    model, tok = load_model(micro_model_dir, cfg_for(micro_model_dir, "sgrpo"), init_seed=0)
    cfg = cfg_for(micro_model_dir, "sgrpo")
    cfg = cfg.model_copy(update={"online": cfg.online.model_copy(update={"inner_epochs": 2})})
    _, res = train_online(cfg, spec, spec.resolve_hparams(), model, tok, rows_for("online", 8), run="ledger",
                          reward_fn=length_parity_reward)  # fmt: skip
    rounds = {h["round"]: h for h in res.history}
    o = cfg.online
    assert len(rounds) == o.rounds and all(
        h["rollouts"] == o.prompts_per_batch * o.n for h in rounds.values()
    )
    assert all(0 < h["generated_tokens"] <= h["rollouts"] * o.max_new_tokens for h in rounds.values())
    c = res.compute
    assert c["rollouts"] == o.rounds * o.prompts_per_batch * o.n
    assert c["generated_tokens"] == sum(h["generated_tokens"] for h in rounds.values())
    assert c["trained_tokens"] == o.inner_epochs * sum(h["trained_tokens"] for h in rounds.values())
    cum = [h["cum_trained_tokens"] for h in res.history]
    assert (
        cum == sorted(cum)
        and cum[-1] == c["trained_tokens"]
        and res.history[-1]["cum_rollouts"] == c["rollouts"]
    )


def test_the_offline_compute_ledger_counts_trained_tokens(micro_model_dir):
    """Offline, the ledger counts the tokens each optimiser step trains on (every role of every example:
    chosen and rejected for pairs) and the step's seconds; rollouts and generated tokens stay 0 (the
    self-play samples are shared preparation, counted in the record's data statistics)."""
    from oxbench.engine.batches import encode_examples

    _, res, _ = train("dpo", micro_model_dir, max_steps=2, grad_accum=2)  # 16 pairs: 2 steps of 4 x 2
    tok = load_model(micro_model_dir, cfg_for(micro_model_dir, "dpo"), init_seed=0)[1]
    examples = encode_examples("pairs", rows_for("pairs"), tok, 128)
    per_example = sorted(len(e["chosen"][0]) + len(e["rejected"][0]) for e in examples)
    steps = [h["trained_tokens"] for h in res.history]
    assert len(steps) == 2 and all(
        sum(per_example[:8]) <= s <= sum(per_example[-8:]) for s in steps
    )  # 4 x 2 pairs
    assert res.compute["trained_tokens"] == sum(steps) == res.history[-1]["cum_trained_tokens"]
    assert res.history[-1]["cum_rollouts"] == 0 and res.compute["train_seconds"] > 0
