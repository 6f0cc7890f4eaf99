"""The asynchronous source (:mod:`oxbench.engine.sources`): a producer process and its typed job."""

from __future__ import annotations

import queue as queue_lib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from oxbench.engine.rollout import Rollout, vllm_options
from oxbench.engine.sources.rollouts import RolloutSource, Rounds
from oxbench.text.formatting import format_prompt


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
    prompt: Callable = format_prompt  # the task's prompt format (the rollout worker's)


class ProducerError(RuntimeError):
    """The asynchronous rollout producer died or sent something out of order."""


class AsyncSource(RolloutSource):
    """``online.source: async``: a producer process generates the rounds ahead of the learner, at most
    ``staleness`` versions stale when consumed, through a queue of ``queue_size`` rounds. It starts with
    the first batch asked for, from the rollout worker's weights then (a resumed run's: the learner's)."""

    def __init__(self, rounds: Rounds, staleness: int, queue_size: int, backend: str):
        super().__init__(rounds)
        self.backend = backend  # the producer's sampler (the learner's copy never samples)
        if self.ws > 1:
            raise ValueError(f"online.source 'async' runs at world size 1 (got {self.ws} ranks)")
        self.staleness, self.queue_size, self.process = staleness, queue_size, None

    def plan(self, first_round: int) -> RoundPlan:
        """The producer's job: every round's prompts and sampling seed, and how to sample."""
        o = self.r.online
        return RoundPlan(
            rounds=[self.prompts(r) for r in range(self.rounds)],
            seeds=[self.seed(r) for r in range(self.rounds)],
            n=o.n,
            temperature=o.temperature,
            max_new_tokens=o.max_new_tokens,
            reward_fn=self.r.reward_fn,
            inner_epochs=o.inner_epochs,
            staleness=self.staleness,
            max_len=self.worker.max_len,
            backend=self.backend,
            vllm=vllm_options(o),
            threads=max(1, torch.get_num_threads() // 2),
            first_round=first_round,
            prompt=self.worker.prompt,
        )

    def _start(self, first_round: int) -> None:
        from oxbench.engine.producer import produce

        ctx, worker = torch.multiprocessing.get_context("spawn"), self.worker
        self.shared = {k: v.detach().clone().share_memory_() for k, v in worker.model.state_dict().items()}
        self.shared_version, self.lock = ctx.Value("l", max(0, worker.version)), ctx.Lock()
        self.queue, self.stop = ctx.Queue(maxsize=self.queue_size), ctx.Event()
        self.process = ctx.Process(
            target=produce,
            name="oxbench-rollout-producer",
            daemon=True,
            args=(
                worker.model,
                worker.tokenizer,
                self.shared,
                self.shared_version,
                self.lock,
                self.queue,
                self.stop,
                self.plan(first_round),
            ),
        )
        self.process.start()

    def batches(self, start: int):
        self._start(start)
        yield from super().batches(start)

    def draw(self, rnd: int, sample=None) -> list[Rollout]:
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

    def after_step(self, version: int) -> None:
        """Publish the learner's new weights to the producer: gathered (ZeRO-3) and copied straight from
        the live parameters into the shared tensors (no intermediate copy). The time it takes, gather
        included, is the round's ``sync_s`` (its bytes ``sync_bytes``, its path ``sync_path`` "shared
        memory"); the producer's own copy out of the shared tensors (and on to its vLLM server) happens in
        its process, inside its ``producer_wait``."""
        from oxbench.engine.model import gathered
        from oxbench.engine.producer import publish

        super().after_step(version)
        start = time.perf_counter()
        with gathered(self.worker.source) as lm:
            publish(self.shared, lm.state_dict(), self.shared_version, version, self.lock)
        self.stats["sync_s"] = self.stats.get("sync_s", 0.0) + time.perf_counter() - start
        sent = sum(v.numel() * v.element_size() for v in self.shared.values())
        self.stats |= {"sync_bytes": self.stats.get("sync_bytes", 0) + sent, "sync_path": "shared memory"}

    def load_state_dict(self, state: dict) -> None:
        """A resumed producer starts afresh from the learner's weights at the round it resumes."""
        self.version, self.consumed = state["version"], state["consumed"]
        self.worker.pull(self.version)
        self.worker.take_sync_stats()  # the resume's copy is no round's sync

    def close(self) -> None:
        if self.process is not None:
            self.stop.set()
            self.process.join(timeout=10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        super().close()
