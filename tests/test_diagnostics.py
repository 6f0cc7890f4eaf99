"""Off-policy diagnostics (issue 15): hand-computed importance weights, ESS, truncation and KL."""

from __future__ import annotations

import math

import pytest
import torch

from oxbench.engine import diagnostics as diag


def test_weight_sums_and_ess_by_hand():
    """Two sequences. Log-ratios (π_θ − μ) per token: [ln 2, 0] and [0, −ln 2] (the second row's
    second token is masked). Sequence weights w = [2, 1]: ESS = (2 + 1)² / (2 · (4 + 1)) = 0.9.
    Token weights [2, 1, 1]: ESS_token = 16 / (3 · 6) = 8/9; max 2; with cap 1.5 one of three tokens is
    over it. k3 per token: (r − 1) − ln r = [1 − ln 2, 0, 0], mean (1 − ln 2) / 3."""
    old = torch.zeros(2, 2)
    logp = torch.tensor([[math.log(2), 0.0], [0.0, -math.log(2)]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    out = diag.combine([diag.weight_sums(logp * mask, old, mask, cap=1.5)])
    assert out["ess"] == pytest.approx(0.9)
    assert out["ess_token"] == pytest.approx(8 / 9)
    assert out["is_max"] == pytest.approx(2.0) and out["is_max_token"] == pytest.approx(2.0)
    assert out["is_truncated"] == pytest.approx(1 / 3)
    assert out["kl_behaviour"] == pytest.approx((1 - math.log(2)) / 3)


def test_split_batch_gives_the_whole_batch_diagnostics():
    """Sums over micro-batches combine to the numbers of the unsplit batch."""
    g = torch.Generator().manual_seed(0)
    logp, old = -torch.rand(6, 5, generator=g), -torch.rand(6, 5, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.3).float()
    whole = diag.combine([diag.weight_sums(logp, old, mask, 1.2)])
    parts = diag.combine(
        [diag.weight_sums(logp[i : i + 2], old[i : i + 2], mask[i : i + 2], 1.2) for i in (0, 2, 4)]
    )
    assert parts == pytest.approx(whole)


def test_on_policy_weights_are_one():
    logp = -torch.rand(4, 3)
    out = diag.combine([diag.weight_sums(logp, logp.clone(), torch.ones(4, 3), 2.0)])
    assert (
        out["ess"] == pytest.approx(1.0)
        and out["is_truncated"] == 0
        and out["kl_behaviour"] == pytest.approx(0)
    )


def test_staleness_histogram_and_cosine():
    assert diag.staleness_histogram([0, 2, 2, 1, 2]) == [1, 1, 3]
    assert diag.cosine(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0])) == pytest.approx(1 / math.sqrt(2))
    assert diag.cosine(None, torch.ones(2)) is None


@pytest.mark.slow
def test_the_trainer_logs_them_every_step(micro_model_dir, monkeypatch):
    """Delayed S = 2, five rounds: ESS is 1 on the on-policy first step and below 1 once the batch is two
    versions old; the histogram counts every rollout at its lag; the gradient cosine starts at step 2."""
    from test_sources import run

    _, _, _, res = run(micro_model_dir, monkeypatch, source="delayed", staleness=2)
    h = res.history
    assert h[0]["ess"] == pytest.approx(1.0, abs=1e-4) and h[0]["kl_behaviour"] == pytest.approx(0, abs=1e-4)
    assert h[4]["ess"] < 0.999 and h[4]["kl_behaviour"] > 0
    assert [row["staleness_hist"] for row in h] == [[8], [0, 8], [0, 0, 8], [0, 0, 8], [0, 0, 8]]
    cosines = [
        row["grad_cosine"] for row in h[1:]
    ]  # None where this or the last gradient is zero (tied groups)
    assert h[0]["grad_cosine"] is None and any(c is not None for c in cosines)
    assert all(-1 <= c <= 1 for c in cosines if c is not None)
    assert all(row["rollouts_per_s"] > 0 for row in h)
