"""The asynchronous rollout producer: its own process, its own model copy, generating ahead of the learner.

:class:`~oxbench.engine.sources.AsyncSource` starts :func:`produce` in a spawned process. It owns a
:class:`~oxbench.engine.rollout.RolloutWorker` and generates the rounds in order. The learner publishes
its weights into shared-memory tensors after each optimiser step (``publish``); the producer copies them
in under the same lock before each round it generates. AReaL-style admission control keeps every
rollout within S versions of the learner that will consume it: round r is consumed at learner version
r · inner_epochs, so the producer starts it only once the learner has published version
r · inner_epochs − S, and samples it with the newest weights then available. Finished rounds wait in a
bounded queue (``queue_size`` rounds), so the producer blocks rather than run further ahead.
"""

from __future__ import annotations

import time

import torch

from oxbench.engine.sources.asynchronous import RoundPlan


def publish(shared: dict[str, torch.Tensor], state: dict[str, torch.Tensor], version, new: int, lock) -> None:
    """Copy the learner's weights into the shared tensors and announce them as version ``new``."""
    with lock:
        for k, v in state.items():
            shared[k].copy_(v)
        version.value = new


def produce(model, tokenizer, shared, version, lock, queue, stop, job: RoundPlan) -> None:
    """The producer's loop (the spawn target), generating ``job``'s rounds from ``job.first_round`` on."""
    from oxbench.engine.rollout import RolloutWorker

    torch.set_num_threads(job.threads)
    worker = RolloutWorker(
        model, tokenizer, max_len=job.max_len, backend=job.backend, vllm=job.vllm, prompt=job.prompt
    )
    try:
        for rnd in range(job.first_round, len(job.rounds)):  # a resumed run starts later
            rows = job.rounds[rnd]
            idle_start = time.time()
            need = rnd * job.inner_epochs - job.staleness
            while version.value < need:  # admission: the round would be more than S versions stale
                if stop.is_set():
                    return
                time.sleep(0.002)
            with lock:
                if worker.version != version.value:
                    worker.sync({k: v.clone() for k, v in shared.items()}, int(version.value))
            gen_start = time.time()
            experience = worker.rollouts(
                rows,
                n=job.n,
                temperature=job.temperature,
                max_new_tokens=job.max_new_tokens,
                seed=job.seeds[rnd],
                reward_fn=job.reward_fn,
            )
            done = time.time()
            while not stop.is_set():
                try:
                    queue.put((rnd, experience, gen_start - idle_start, done - gen_start), timeout=0.1)
                    break
                except Exception:  # queue.Full: the learner is behind; wait
                    continue
    finally:
        worker.close()
