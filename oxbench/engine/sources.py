"""Experience sources: where an online round's rollouts come from. The learner does not know.

Every source hands :func:`~oxbench.engine.trainer.train_online` one graded rollout batch per round
(this rank's share) through :meth:`batch`, and is told after each optimiser step through
:meth:`after_update`. A rollout carries the version of the weights that sampled it, so the loss and
the diagnostics see its staleness (learner version − rollout version).

* :class:`SyncSource` (``online.source: sync``): the rollout worker copies the trainer's weights every
  ``online.sync_every`` rounds (1: on-policy); SPIN-style methods freeze an iterate for a whole
  iteration. This is the loop as it always was, bit for bit.
* :class:`DelayedSource` (``delayed``): a deterministic fixed lag S (``online.staleness``). The round
  the learner takes at version v is sampled by the weights of version max(0, v − S), kept in a ring
  buffer of the last S + 1 snapshots: the exact S of the staleness theory (arXiv 2607.01083),
  reproducible bit for bit. S = 0 is the synchronous loop.
* :class:`AsyncSource` (``async``): real concurrency. A producer process (:mod:`oxbench.engine.producer`)
  with its own model copy generates the rounds ahead of the learner, takes the learner's weights through
  shared memory after each step, and is admitted to a round only when that round will be at most S
  versions stale when consumed (AReaL-style throttling); finished rounds wait in a bounded queue of
  ``online.queue_size`` rounds. Each round arrives exactly once and in order (checked); the producer
  dying is a :class:`ProducerError` naming it, never a hang. One process (world size 1).
"""

from __future__ import annotations

import queue as queue_lib
import time
from collections.abc import Callable

import torch

from oxbench.engine.rollout import Rollout, RolloutWorker

Weights = Callable[[], dict]  # the policy's full state dict (every rank calls it: collective under ZeRO-3)


class SyncSource:
    def __init__(
        self, worker: RolloutWorker, sync_every: int, per_iteration: int | None = None, live_ref=None
    ):
        self.worker, self.sync_every, self.per_iteration, self.live_ref = (
            worker,
            sync_every,
            per_iteration,
            live_ref,
        )

    def batch(
        self, rnd: int, version: int, weights: Weights, sample: Callable[[], list[Rollout]]
    ) -> list[Rollout]:
        if self.per_iteration is not None:
            if rnd % self.per_iteration == 0:  # a new iterate: it samples this iteration and is the reference
                state = weights()
                self.worker.sync(state, version)
                if rnd > 0:
                    self.live_ref.refresh(state, 1.0)
        elif rnd % self.sync_every == 0:
            self.worker.sync(weights(), version)
        return sample()

    def after_update(self, version: int, weights: Weights) -> None:
        pass

    def state_dict(self) -> None:  # the rollout worker's weights are the whole state (the loop keeps them)
        return None

    def load_state_dict(self, state: None) -> None:
        pass

    def close(self) -> None:
        pass


class DelayedSource:
    def __init__(self, worker: RolloutWorker, staleness: int):
        self.worker, self.staleness = worker, staleness
        self.ring: dict[int, dict] = {}

    def batch(
        self, rnd: int, version: int, weights: Weights, sample: Callable[[], list[Rollout]]
    ) -> list[Rollout]:
        if not self.ring:
            self.ring[version] = weights()  # the initial policy, version 0
        behind = max(0, version - self.staleness)
        if self.worker.version != behind:
            self.worker.sync(self.ring[behind], behind)
        return sample()

    def after_update(self, version: int, weights: Weights) -> None:
        """Keep the snapshot of ``version``, and only the S + 1 newest (the oldest a batch may use)."""
        self.ring[version] = weights()
        for old in [v for v in self.ring if v < version - self.staleness]:
            del self.ring[old]

    def state_dict(self) -> dict:
        return {"ring": self.ring}

    def load_state_dict(self, state: dict) -> None:
        self.ring = dict(state["ring"])

    def close(self) -> None:
        pass


class ProducerError(RuntimeError):
    """The asynchronous rollout producer died or sent something out of order."""


class AsyncSource:
    def __init__(self, worker: RolloutWorker, job: dict, queue_size: int):
        from oxbench.engine.producer import produce

        ctx = torch.multiprocessing.get_context("spawn")
        self.shared = {k: v.detach().clone().share_memory_() for k, v in worker.model.state_dict().items()}
        self.version, self.lock = ctx.Value("l", max(0, worker.version)), ctx.Lock()
        self.queue, self.stop = ctx.Queue(maxsize=queue_size), ctx.Event()
        self.worker, self.stats = worker, {}
        self.process = ctx.Process(target=produce, name="oxbench-rollout-producer", daemon=True,
                                   args=(worker.model, worker.tokenizer, self.shared, self.version, self.lock,
                                         self.queue, self.stop, job))  # fmt: skip
        self.process.start()

    def batch(self, rnd: int, version: int, weights: Weights, sample=None) -> list[Rollout]:
        """The next round from the queue (waiting for it; the wait is the learner's idle time)."""
        start = time.time()
        while True:
            try:
                got, experience, producer_wait, gen_seconds = self.queue.get(timeout=0.5)
                break
            except queue_lib.Empty:
                if not self.process.is_alive():
                    raise ProducerError(
                        f"the rollout producer (pid {self.process.pid}) died with exit code "
                        f"{self.process.exitcode} before sending round {rnd}"
                    ) from None
        if got != rnd:
            raise ProducerError(f"the rollout producer sent round {got} where round {rnd} was due")
        self.worker.version = experience[0].policy_version if experience else self.worker.version
        self.stats = {
            "queue_wait": time.time() - start,
            "producer_wait": producer_wait,
            "producer_gen_seconds": gen_seconds,
        }
        return experience

    def after_update(self, version: int, weights: Weights) -> None:
        """Publish the learner's new weights to the producer; the time it takes is the round's ``sync_s``."""
        from oxbench.engine.producer import publish

        start = time.perf_counter()
        publish(self.shared, weights(), self.version, version, self.lock)
        self.stats["sync_s"] = self.stats.get("sync_s", 0.0) + time.perf_counter() - start

    def state_dict(self) -> None:  # a resumed producer starts afresh from the learner's weights
        return None

    def load_state_dict(self, state: None) -> None:
        pass

    def close(self) -> None:
        self.stop.set()
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def make_source(
    cfg, worker: RolloutWorker, per_iteration: int | None, live_ref, plan: Callable[[], dict] | None = None
):
    """The source ``online.source`` names; ``plan()`` gives the async producer its job (every round's
    prompts and sampling seed, the reward function...)."""
    o = cfg.online
    if o.source == "delayed":
        return DelayedSource(worker, o.staleness)
    if o.source == "async":
        return AsyncSource(worker, plan(), o.queue_size)
    return SyncSource(worker, o.sync_every, per_iteration, live_ref)
