"""One learner step per online loss on a fixed rollout batch; saves the averaged gradients and the
parameters after two steps (run by test_online_invariance.py, under torchrun or not).

usage: online_invariance_worker.py MODEL_DIR OUT_DIR WAYS METHOD [METHOD ...]

WAYS: comma-separated ``NAME:PROMPTS_PER_MICRO:SHARE``, each saved to OUT_DIR/NAME.pt; one process (or
one torchrun launch) runs them all, so the suite pays its start-up once, not once per way.

Every rank builds the same batch: 4 prompts x 4 rollouts sampled from the initial model with a
fixed seed, rewarded by length parity, behaviour log-probs perturbed by a fixed noise so that the
ratios are not 1 and the clipping is exercised. Rank r takes prompts [2r, 2r+2) at world size 2,
all 4 at world size 1; PROMPTS_PER_MICRO sets the micro-batch (4: the batch unsplit). With SHARE 1
the learner runs ``online.share_prompt`` (methods with a value head are skipped: the setting refuses
them).
"""

from __future__ import annotations

import os
import sys

import torch
from helpers import cfg_for, length_parity_reward, rows_for

import losses
from oxbench.config import micro_batches_per_rank
from oxbench.engine import distributed as D
from oxbench.engine import learner as learner_mod
from oxbench.engine import model as tr
from oxbench.engine.learner import Learner
from oxbench.engine.plan import plan_of
from oxbench.engine.rollout import RolloutWorker
from oxbench.models.loading import load_model

PROMPTS, N = 4, 4
OVERRIDES = {"rloo": {"normalize_advantages": True}, "grpo": {"beta": 0.04}}

REWARDS = [1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0]  # group 1 flat: DAPO drops it


def fixed_batch(model, tok) -> list:
    """The sampled rollouts, cut to lengths 2..12 and given fixed rewards, so that the micro-batches
    differ in token counts, kept groups and advantages (what a per-micro-batch reduction gets wrong)."""
    worker = RolloutWorker(model, tok, max_len=128)
    worker.sync(model.state_dict(), 0)
    batch = worker.rollouts(
        rows_for("online", PROMPTS),
        n=N,
        temperature=1.0,
        max_new_tokens=12,
        seed=1234,
        reward_fn=length_parity_reward,
    )
    g = torch.Generator().manual_seed(5)
    for i, r in enumerate(batch):
        k = 2 + (i * 5) % 11
        r.completion_ids, r.finished, r.reward = r.completion_ids[:k], False, float(REWARDS[i])
        r.behaviour_logps = [x + 0.3 * float(torch.randn((), generator=g)) for x in r.behaviour_logps[:k]]
    return batch


def run_method(model_dir: str, method: str, per_micro: int, share: bool) -> dict:
    spec = losses.get(method)
    hparams = spec.resolve_hparams(OVERRIDES.get(method))
    ws, rk = D.world_size(), D.rank()
    cfg = cfg_for(model_dir, method, batch_size=per_micro, lr=1e-4, weight_decay=0.0)
    cfg = cfg.model_copy(
        update={"online": cfg.online.model_copy(update={"prompts_per_batch": PROMPTS, "n": N})}
    )
    model, tok = load_model(model_dir, cfg, init_seed=0)
    batch = fixed_batch(model, tok)
    per_rank = PROMPTS // ws
    mine = batch[rk * per_rank * N : (rk + 1) * per_rank * N]
    model, _, live_ref = tr.online_policy(plan_of(cfg, spec, hparams, ws), model)
    micro = micro_batches_per_rank(PROMPTS, per_micro, ws, method)
    engine = tr.build_engine(model, cfg, 2, grad_accum=micro)
    learner = Learner(spec, hparams, engine, tok, live_ref, 128, 12, micro, method, share_prompt=share)
    grads = []
    real = learner_mod.grad_norm

    def capture(eng):
        grads.append(
            torch.cat(
                [p.grad.detach().flatten().clone() for p in eng.module.parameters() if p.grad is not None]
            )
        )
        return real(eng)

    learner_mod.grad_norm = capture
    try:
        prep = learner.prepare(mine, 0)
        for version in range(2):
            metrics, _ = learner.update(prep, version, progress=version / 2)
    finally:
        learner_mod.grad_norm = real
    params = torch.cat([p.detach().flatten() for p in tr.full_state_dict(engine).values()])
    return {"grads": grads, "params": params, "loss": [m["loss"] for m in metrics]}


def main(model_dir, out_dir, ways, *methods):
    D.init_distributed()
    for way in ways.split(","):
        name, per_micro, share = way.split(":")
        share = share == "1"
        chosen = [m for m in methods if not (share and losses.get(m).needs_value_model)]
        result = {m: run_method(model_dir, m, int(per_micro), share) for m in chosen}
        if D.is_main():
            torch.save({"world": D.world_size(), **result}, os.path.join(out_dir, f"{name}.pt"))
    D.shutdown()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(*sys.argv[1:])
