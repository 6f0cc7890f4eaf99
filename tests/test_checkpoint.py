"""Mid-run checkpoints (issue 16): a run stopped at step k and resumed gives, bit for bit, the weights
and the metrics of the run that was never stopped; corrupt or partial checkpoints are passed over.

The stop is the pre-emption path itself: the logger of step k raises the signal flag that SIGTERM's
handler raises, so the loop checkpoints at that boundary and raises :class:`Preempted`; a fresh model,
engine and loop then resume from the directory. (The signal delivery itself is tested through a cell
process in test_preemption.py.)
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from helpers import cfg_for, length_parity_reward, rows_for, train_offline, train_online

import losses
from oxbench.engine import checkpoint as C
from oxbench.engine import distributed as D
from oxbench.engine.model import full_state_dict
from oxbench.models.loading import load_model

TIME_KEYS = {"elapsed", "train_seconds", "gen_seconds", "cum_train_seconds", "cum_gen_seconds",
             "rollouts_per_s", "queue_wait", "producer_wait", "producer_gen_seconds", "sync_s",
             "vllm_sync_s"}  # fmt: skip


def test_state_tree_round_trip():
    """Tensors (any dtype), tuples, int-keyed dicts, NaN, infinities and numpy arrays come back equal."""
    tree = {
        "a": torch.arange(6, dtype=torch.float32).view(2, 3),
        "b": torch.tensor([1.5], dtype=torch.bfloat16),
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2)}},
        "betas": (0.9, 0.999),
        "x": [math.nan, -math.inf, None, True, "s"],
        "np": np.arange(3, dtype=np.uint32),
    }
    tensors: dict = {}
    skeleton = json.loads(json.dumps(C.flatten(tree, tensors)))
    back = C.unflatten(skeleton, tensors)
    assert torch.equal(back["a"], tree["a"]) and back["b"].dtype == torch.bfloat16
    assert list(back["state"]) == [0] and torch.equal(back["state"][0]["exp_avg"], torch.ones(2))
    assert (
        back["betas"] == (0.9, 0.999)
        and math.isnan(back["x"][0])
        and back["x"][1:] == [-math.inf, None, True, "s"]
    )
    assert np.array_equal(back["np"], tree["np"])
    with pytest.raises(TypeError, match="checkpoint state /obj: cannot store a object"):
        C.flatten({"obj": object()}, {})


def test_corrupt_checkpoint_falls_back_and_old_ones_are_pruned(tmp_path, capsys):
    ck = C.Checkpointer(tmp_path, every=1, keep=2)
    for step in (1, 2, 3):
        ck.save(step, {"w": torch.full((4,), float(step)), "step": step})
    assert sorted(p.name for p in ck.root.iterdir()) == ["step-00000002", "step-00000003"]  # keep = 2
    step, state = ck.latest()
    assert step == 3 and torch.equal(state["w"], torch.full((4,), 3.0))
    blob = ck.root / "step-00000003" / "rank0.safetensors"
    blob.write_bytes(blob.read_bytes()[:-7])  # truncated, as by a full disk or a kill mid-copy
    step, state = ck.latest()
    assert step == 2 and state["step"] == 2
    assert (
        "step-00000003 is not usable (rank0.safetensors does not match its checksum)"
        in capsys.readouterr().err
    )
    (ck.root / "step-00000002" / C.MANIFEST).unlink()  # never finished writing
    (ck.root / ".step-00000004.partial").mkdir()  # a write killed before its rename
    assert ck.latest() is None
    ck.finish()
    assert not ck.root.exists()


def test_keep_final_keeps_only_the_newest(tmp_path):
    ck = C.Checkpointer(tmp_path, every=1, keep=3, keep_final=True)
    for step in (1, 2):
        ck.save(step, {"step": step})
    ck.finish()
    assert [p.name for p in ck.root.iterdir()] == ["step-00000002"]


def test_boundary_saves_on_crossing_every_and_on_the_last_step(tmp_path):
    """With 3 optimiser steps per round, the multiples of ``every: 4`` are passed at steps 6 (4), 9 (8)
    and 12 (12); the last step is saved too."""
    ck = C.Checkpointer(tmp_path, every=4, keep=10)
    for step in (3, 6, 9, 12, 15):
        ck.boundary(step, lambda s=step: {"step": s}, last=step == 15)
    assert ck.saved == [6, 9, 12, 15]


class StopAt:
    """A metrics logger that, at step ``k``, raises the flag a pre-emption signal raises."""

    def __init__(self, k: int | None):
        self.k, self.rows = k, []

    def __call__(self, row: dict) -> None:
        self.rows.append(row)
        if row["step"] == self.k:
            C._requested = "SIGTERM"

    def restart(self, rows: list[dict]) -> None:
        self.rows = list(rows)


def _train(kind, model_dir, method, ckpt, stop_at, **cfg_kw):
    D.init_distributed()
    spec = losses.get(method)
    cfg = cfg_for(model_dir, method, **{"lr": 1e-2, **cfg_kw.pop("train", {})})
    if cfg_kw:
        cfg = cfg.model_copy(update={"online": cfg.online.model_copy(update=cfg_kw)})
    model, tok = load_model(model_dir, cfg, init_seed=0)
    log = StopAt(stop_at)
    C._requested = None
    if kind == "online":
        engine, res = train_online(cfg, spec, spec.resolve_hparams(), model, tok, rows_for("online", 8), run=method,
                                   logger=log, reward_fn=length_parity_reward, ckpt=ckpt)  # fmt: skip
    else:
        engine, res = train_offline(cfg, spec, spec.resolve_hparams(), model, tok, rows_for(spec.data), run=method,
                                    logger=log, ckpt=ckpt)  # fmt: skip
    return full_state_dict(engine), res, log.rows


def _untimed(rows):
    """The rows without wall-clock times, and with ``grad_cosine`` to 6 digits: it is a float32 dot
    product of two gradient vectors, and a SIMD reduction's order depends on where a vector starts in
    memory, which differs for a gradient loaded from a checkpoint (the gradients themselves are equal)."""
    return [{k: round(v, 6) if k == "grad_cosine" and v is not None else v for k, v in r.items()
             if k not in TIME_KEYS} for r in rows]  # fmt: skip


CASES = {
    "dpo": ("offline", "dpo", {"train": {"max_steps": 4, "batch_size": 2}}),
    "sft-accum": ("offline", "sft", {"train": {"max_steps": 4, "batch_size": 2, "grad_accum": 2}}),
    "sgrpo-sync": ("online", "sgrpo", {"rounds": 4}),
    "sgrpo-sync-every-2": ("online", "sgrpo", {"rounds": 4, "sync_every": 2}),
    "sgrpo-delayed": ("online", "sgrpo", {"rounds": 4, "source": "delayed", "staleness": 1}),
    "ppo-inner-epochs": ("online", "ppo", {"rounds": 3, "inner_epochs": 2}),
    "dpo-zero1": ("offline", "dpo", {"train": {"max_steps": 4, "batch_size": 2, "zero_stage": 1}}),
    "dpo-zero2": ("offline", "dpo", {"train": {"max_steps": 4, "batch_size": 2, "zero_stage": 2}}),
    "dpo-zero3": ("offline", "dpo", {"train": {"max_steps": 4, "batch_size": 2, "zero_stage": 3}}),
    "sgrpo-zero3": ("online", "sgrpo", {"rounds": 4, "train": {"zero_stage": 3}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_resume_is_bitwise_the_uninterrupted_run(tmp_path, micro_model_dir, case):
    kind, method, kw = CASES[case]
    whole, whole_res, whole_rows = _train(kind, micro_model_dir, method, None, None, **kw)
    ck = C.Checkpointer(tmp_path, every=None)
    with pytest.raises(C.Preempted, match="SIGTERM received; checkpoint at step 2"):
        _train(kind, micro_model_dir, method, ck, 2, **kw)
    assert [p.name for p in ck.root.iterdir()] == ["step-00000002"]
    again, res, rows = _train(kind, micro_model_dir, method, C.Checkpointer(tmp_path), None, **kw)
    assert res.resumed_from == 2 and res.optimizer_steps == whole_res.optimizer_steps
    assert whole.keys() == again.keys() and all(torch.equal(whole[k], again[k]) for k in whole)
    assert _untimed(rows) == _untimed(whole_rows) and _untimed(res.history) == _untimed(whole_res.history)
    assert res.data_order_sha == whole_res.data_order_sha and res.loss_state == whole_res.loss_state


def test_an_asynchronous_run_resumes_at_its_round(tmp_path, micro_model_dir):
    """The async source's producer restarts at the round the checkpoint reached, from the learner's
    weights: every round is consumed once (the same prompt order as a run never stopped), within S.
    Not bitwise: which weights sample a round is the producer's race with the learner."""
    kw = {"rounds": 4, "source": "async", "staleness": 1}
    _, whole_res, _ = _train("online", micro_model_dir, "sgrpo", None, None, **kw)
    with pytest.raises(C.Preempted):
        _train("online", micro_model_dir, "sgrpo", C.Checkpointer(tmp_path), 2, **kw)
    _, res, rows = _train("online", micro_model_dir, "sgrpo", C.Checkpointer(tmp_path), None, **kw)
    assert res.resumed_from == 2 and res.optimizer_steps == 4
    assert res.data_order_sha == whole_res.data_order_sha
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and max(r["staleness_max"] for r in rows) <= 1
