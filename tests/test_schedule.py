"""The one learning-rate schedule (``oxbench.utils.warmup_cosine``), as training and base pre-training
use it: values by hand."""

from __future__ import annotations

import pytest

from oxbench.engine.model import warmup_cosine
from oxbench.utils import warmup_cosine as schedule


def test_training_warms_up_to_one_a_step_after_its_warmup_then_decays_to_its_floor():
    f = warmup_cosine(10, 0.2, 0.1)  # warm-up 2 steps
    assert [f(0), f(1), f(2)] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert f(6) == pytest.approx(0.1 + 0.9 * 0.5)  # half-way through the decay
    assert f(10) == pytest.approx(0.1) and f(99) == pytest.approx(0.1)
    assert warmup_cosine(10, 0.2, constant=True)(7) == 1.0
    assert warmup_cosine(10, 0.9, warmup_steps=1)(1) == 1.0  # a fixed warm-up overrides the ratio


def test_pretraining_peaks_at_its_last_warmup_step():
    f = schedule(10, 2, peak_in_warmup=True)
    assert [f(0), f(1), f(2)] == pytest.approx([0.5, 1.0, 1.0])
    assert f(10) == pytest.approx(0.0)
    assert schedule(5, 0, peak_in_warmup=True)(0) == 1.0
