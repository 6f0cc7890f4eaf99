"""The gradient cosine keeps a bounded sketch of the last gradient, never a full fp32 copy (issue 36):
exact for a gradient that fits the bound (every tiny rung), an unbiased CountSketch estimate above."""

from __future__ import annotations

import pytest
import torch

import losses
from oxbench.engine import diagnostics as diag
from oxbench.engine.learner import Learner


def _grads(seed: int, base=None):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(300, 100), (500,), (200, 70), (3,)]
    noise = [torch.randn(s, generator=gen) for s in shapes]
    return noise if base is None else [0.6 * b + 0.8 * n for b, n in zip(base, noise)]


def _flat(gs):
    return torch.cat([g.flatten() for g in gs])


def test_a_gradient_that_fits_is_kept_whole_and_its_cosine_is_exact():
    a, b = _grads(0), _grads(1)
    sa = diag.grad_sketch(a, size=10**6)
    assert torch.equal(sa, _flat(a))
    assert diag.cosine(sa, diag.grad_sketch(b, size=10**6)) == diag.cosine(_flat(a), _flat(b))


def test_a_large_gradient_is_sketched_to_the_bound_and_its_cosine_estimated(monkeypatch):
    """Size 2^12 for 44,503 elements, hashed 4,096 at a time (chunks straddle parameters): the sketch
    has 2^12 floats, sketching the pieces equals sketching the flattened vector (an old checkpoint's
    whole gradient), and the cosine is within a few 1/sqrt(2^12) of the true one."""
    monkeypatch.setattr(diag, "SKETCH_CHUNK", 4096)
    a = _grads(0)
    b = _grads(1, base=a)
    sa, sb = diag.grad_sketch(a, size=4096), diag.grad_sketch(b, size=4096)
    assert sa.shape == (4096,) and sb.shape == (4096,)
    assert torch.allclose(diag.grad_sketch([_flat(a)], size=4096), sa, atol=1e-5)
    true = diag.cosine(_flat(a), _flat(b))
    assert true == pytest.approx(0.6, abs=0.02)
    assert diag.cosine(sa, sb) == pytest.approx(true, abs=0.05)
    assert diag.cosine(sa, diag.grad_sketch(a, size=4096)) == pytest.approx(1.0)  # the same hash every step


def test_an_old_checkpoint_with_a_whole_gradient_resumes(monkeypatch):
    """A checkpoint written before the sketch holds ``prev_grad``, the whole last gradient: it loads, kept
    whole when it fits the bound, sketched to it when not."""
    learner = Learner(spec=losses.get("sgrpo"), hparams={}, engine=None, tokenizer=None, live_ref=None,
                      max_len=8, max_new_tokens=4, micro_batches=1, run="r")  # fmt: skip
    small = torch.arange(10.0)
    learner.load_state_dict({"loss_state": None, "prev_grad": small, "live_ref": None})
    assert torch.equal(learner._prev_grad, small)
    monkeypatch.setattr(diag, "SKETCH", 8)
    learner.load_state_dict({"loss_state": None, "prev_grad": small, "live_ref": None})
    assert learner._prev_grad.shape == (8,)
    assert learner.state_dict()["prev_grad"].numel() == 8
