"""The asynchronous source (:mod:`oxbench.engine.sources`): a producer process and its typed job."""

from __future__ import annotations

import queue as queue_lib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from oxbench.engine.rollout import Rollout, RolloutWorker

Weights = Callable[[], dict]  # the policy's full state dict


@dataclass(frozen=True)
class RoundPlan:
    """What the asynchronous producer needs to generate every round itself (it runs in its own process,
    so everything here is picklable)."""

    rounds: list[list[dict]]  # each round's prompt rows, in order
    seeds: list[int]  # each round's sampling seed
    n: int
    temperature: float
    max_new_tokens: int
    reward_fn: Callable[[str, str], float]
    inner_epochs: int
    staleness: int  # S: a round is admitted only once it will be at most S versions stale when consumed
    max_len: int
    backend: str
    vllm: dict | None  # the vLLM server's placement, for backend vllm
    threads: int
    first_round: int = 0  # a resumed run starts here


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

    def after_step(self, version: int, weights: Weights) -> None:
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
