"""KTO's mismatched (prompt, completion) pairs are scored only for a loss that reads them
(``LossSpec.reads_kl_pairs``): BCO's unpaired form has no KL reference point, so its micro-batches take
one policy forward (the labelled completions) instead of two, and its loss is the same number."""

from __future__ import annotations

import torch
from helpers import rows_for

import losses
from oxbench.config import RunConfig
from oxbench.engine import batches
from oxbench.engine.plan import resolve
from oxbench.models.loading import load_model


def test_only_kto_among_the_unpaired_losses_asks_for_the_mismatched_pairs():
    caps = {m: resolve(RunConfig(method=m), live=False).caps for m in ("kto", "bco_unpaired", "dpo")}
    assert caps["kto"].kl_pairs and not caps["bco_unpaired"].kl_pairs and not caps["dpo"].kl_pairs


def test_bco_unpaired_skips_the_forward_its_loss_never_reads(micro_model_dir, monkeypatch):
    model, tok = load_model(micro_model_dir, RunConfig(model={"name": micro_model_dir}), init_seed=0)
    chunk = batches.encode_examples("unpaired", rows_for("unpaired", 4), tok, 96)
    seen, forward = [], batches._forward_roles
    monkeypatch.setattr(
        batches, "_forward_roles", lambda m, c, roles, *a: seen.append(roles) or forward(m, c, roles, *a)
    )
    torch.manual_seed(0)
    full = batches.build_offline_inputs("unpaired", model, chunk, tok.pad_token_id, live_ref=None)
    lean = batches.build_offline_inputs("unpaired", model, chunk, tok.pad_token_id, kl_pairs=False)
    assert seen == [("main",), ("kl",), ("main",)]  # KTO's micro-batch: two forwards; BCO's: one
    assert lean.kl_logps is None and full.kl_logps is not None
    spec = losses.get("bco_unpaired")
    for inp in (full, lean):  # the reference's log-probs, as a cache would give them (the policy's own)
        inp.ref_logps = inp.logps.detach() - 0.1
    a = spec.fn(full, **spec.defaults).loss
    b = spec.fn(lean, **spec.defaults).loss
    assert torch.equal(a, b)
