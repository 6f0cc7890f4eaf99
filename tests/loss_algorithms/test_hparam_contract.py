"""The hyper-parameter contract of every built-in loss: hyper-parameters override ``defaults``.

So ``losses.get(name).fn(inputs, beta=0.1)``, every other hyper-parameter omitted, must run: each
``fn`` declares every key of its spec's ``defaults`` as a keyword-only parameter whose default value
is the spec's, and nothing else without a default. (Before this test, 37 of the 51 built-ins,
``fdpo`` among them, raised ``TypeError: missing required keyword-only argument`` there.) The registry
enforces the shape of the signature for plugins too (``tests/test_plugins.py``); this file checks
the values and runs every built-in on small random inputs of its ``data`` kind.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

import losses
from losses import LossInputs

BUILTINS = sorted(
    n for n, eps in losses.registry._entry_points().items() if eps[0].value.startswith("losses.")
)
DTYPE = torch.float64


def pair_inputs(seed: int = 0) -> LossInputs:
    """3 pairs, 4 positions, vocabulary 5: token log-probs are log_softmax(logits) at random ids, so
    the full-logit fields (wpo, tdpo) agree with them; grader scores for odpo."""
    g = torch.Generator().manual_seed(seed)
    b, t, v = 3, 4, 5
    cmask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=DTYPE)
    rmask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=DTYPE)
    logits = [torch.randn(b, t, v, generator=g, dtype=DTYPE).requires_grad_() for _ in range(2)]
    refs = [torch.randn(b, t, v, generator=g, dtype=DTYPE) for _ in range(2)]
    ids = [torch.randint(v, (b, t), generator=g) for _ in range(2)]

    def tok(lg, which, mask):
        return F.log_softmax(lg, -1).gather(-1, ids[which].unsqueeze(-1)).squeeze(-1) * mask

    ctok, rtok = tok(logits[0], 0, cmask), tok(logits[1], 1, rmask)
    ref_c, ref_r = tok(refs[0], 0, cmask), tok(refs[1], 1, rmask)
    return LossInputs(
        chosen_logps=ctok.sum(-1), rejected_logps=rtok.sum(-1),
        chosen_token_logps=ctok, rejected_token_logps=rtok, chosen_mask=cmask, rejected_mask=rmask,
        ref_chosen_logps=ref_c.sum(-1), ref_rejected_logps=ref_r.sum(-1),
        ref_chosen_token_logps=ref_c, ref_rejected_token_logps=ref_r,
        chosen_logits=logits[0], rejected_logits=logits[1], ref_chosen_logits=refs[0], ref_rejected_logits=refs[1],
        chosen_rewards=torch.tensor([1.0, 1.0, 0.8], dtype=DTYPE),
        rejected_rewards=torch.tensor([0.0, 0.5, 0.1], dtype=DTYPE),
    )  # fmt: skip


def completion_inputs(seed: int, b: int = 4, t: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) token log-probs (grad leaf, zero off the mask) and the mask of ragged completions."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(t)[None, :] < torch.tensor([3, 1, 2, 3][:b])[:, None]).to(DTYPE)
    logps = (-(torch.rand(b, t, generator=g, dtype=DTYPE) * 2 + 0.1) * mask).requires_grad_()
    return logps, mask


def unpaired_inputs(seed: int = 0) -> LossInputs:
    logps, mask = completion_inputs(seed)
    g = torch.Generator().manual_seed(seed + 1)
    seq = (logps * mask).sum(-1)
    return LossInputs(
        logps=seq, token_logps=logps, mask=mask, labels=torch.tensor([True, False, True, False]),
        ref_logps=seq.detach() - torch.rand(4, generator=g, dtype=DTYPE),
        kl_logps=seq.detach() - 0.3, ref_kl_logps=seq.detach() - 0.5,
    )  # fmt: skip


def sft_inputs(seed: int = 0) -> LossInputs:
    logps, mask = completion_inputs(seed)
    return LossInputs(logps=(logps * mask).sum(-1), token_logps=logps, mask=mask)


def online_inputs(seed: int = 0) -> LossInputs:
    """Two groups of two rollouts, off-policy, with a reference (for β > 0), a value head (ppo) and
    the generation limit the trainer fills (dr_grpo)."""
    logps, mask = completion_inputs(seed)
    g = torch.Generator().manual_seed(seed + 2)
    noise = lambda: torch.randn(4, 3, generator=g, dtype=DTYPE) * 0.1 * mask  # noqa: E731
    values = (noise() + 0.5 * mask).requires_grad_()
    return LossInputs(
        token_logps=logps, mask=mask, logps=(logps * mask).sum(-1),
        old_token_logps=logps.detach() + noise(), ref_token_logps=logps.detach() + noise(),
        rewards=torch.tensor([1.0, 0.0, 0.5, 1.0], dtype=DTYPE), group_ids=torch.tensor([0, 0, 1, 1]),
        values=values, old_values=values.detach() + noise(),
        policy_versions=torch.tensor([2, 2, 3, 3]), current_version=3, max_completion_length=5,
    )  # fmt: skip


def inputs_for(spec: losses.LossSpec, seed: int = 0) -> LossInputs:
    return {
        "pairs": pair_inputs,
        "unpaired": unpaired_inputs,
        "sft": sft_inputs,
        "online": online_inputs,
    }[spec.data](seed)


def test_there_are_51_builtins():
    assert len(BUILTINS) == 51


@pytest.mark.parametrize("name", BUILTINS)
def test_fn_signature_defaults_are_the_spec_defaults(name):
    """Every hyper-parameter is keyword-only with the spec's default: ``fn(inputs)`` = ``spec(inputs)``."""
    spec = losses.get(name)
    params = list(inspect.signature(spec.fn).parameters.values())[1:]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), name
    assert {p.name: p.default for p in params} == spec.defaults


@pytest.mark.parametrize("name", BUILTINS)
def test_fn_runs_with_only_beta(name):
    """``spec.fn(inputs, beta=0.1)`` (``spec.fn(inputs)`` for a loss without β) on small random inputs:
    a finite scalar with a finite gradient, and the same value as the registry call with the same β."""
    spec = losses.get(name)
    hp = {"beta": 0.1} if "beta" in spec.defaults else {}
    inputs = inputs_for(spec)
    out = spec.fn(inputs, **hp)
    assert out.loss.ndim == 0 and math.isfinite(out.loss.item()) and out.loss.requires_grad
    assert all(isinstance(v, float) and math.isfinite(v) for v in out.metrics.values())
    via_registry = spec(inputs_for(spec), **hp)
    torch.testing.assert_close(out.loss, via_registry.loss, rtol=1e-12, atol=0.0)


def test_fdpo_with_only_beta_is_reverse_kl_fdpo():
    """The audit's case: fdpo's other hyper-parameters fall back to reverse KL (= DPO) and α = 0.5."""
    fdpo, dpo = losses.get("fdpo"), losses.get("dpo")
    torch.testing.assert_close(fdpo.fn(pair_inputs(), beta=0.3).loss, dpo.fn(pair_inputs(), beta=0.3).loss)
