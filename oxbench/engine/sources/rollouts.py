"""What the online sources share (:mod:`oxbench.engine.sources`): the rounds' prompts and seeds, the
sampling, the rollout statistics and the compute of each round. A subclass says only which weights
sample a round (:meth:`RolloutSource.draw`) and what it keeps across steps."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from oxbench.data.sampler import epoch_indices, make_sampler, order_sha
from oxbench.engine import distributed as D
from oxbench.engine.rollout import Rollout, RolloutWorker
from oxbench.engine.sources.batch import Batch, Weights


@dataclass
class Rounds:
    """An online run's rounds: ``online.rounds`` of ``online.n`` rollouts for each of
    ``online.prompts_per_batch`` prompts, sampled by ``worker``; ``weights()`` gives the learner's."""

    online: object  # the run's OnlineConfig
    prompts: list[dict]
    worker: RolloutWorker
    weights: Weights
    reward_fn: Callable[[str, str], float]
    sampling_seed: int
    data_seed: int


def round_prompts(prompts: list[dict], step: int, per_round: int, sampler) -> list[dict]:
    """This rank's prompts for a round: consecutive slices of the seeded, sharded order."""
    per_epoch = len(sampler)
    start = step * per_round
    epoch, offset = divmod(start, per_epoch)
    idx = epoch_indices(sampler, epoch)
    out = idx[offset : offset + per_round]
    while len(out) < per_round:
        epoch += 1
        out += epoch_indices(sampler, epoch)[: per_round - len(out)]
    return [prompts[i] for i in out]


def rollout_stats(experience: list, world_size: int = 1) -> dict:
    """What shows whether RL can learn from a rollout batch (this rank's): the share of groups whose
    rewards are all the same (they carry no group-relative signal) and the share of rollouts cut off
    at ``max_new_tokens`` (truncated)."""
    groups: dict[int, set] = {}
    for r in experience:
        groups.setdefault(r.group, set()).add(r.reward)
    return {
        "rollouts": len(experience) * world_size,
        "zero_variance_groups": sum(len(v) == 1 for v in groups.values()) / max(1, len(groups)),
        "truncated": sum(not r.finished for r in experience) / max(1, len(experience)),
    } | reward_parts(experience)


def reward_parts(experience: list) -> dict:
    """``online.rewards``: each reward function's mean over the rollouts it rewarded (``reward/<name>``;
    a function that gave none, None); nothing for a run with one reward."""
    parts = [r.reward_parts for r in experience if r.reward_parts is not None]
    if not parts:
        return {}
    out = {}
    for name in parts[0]:
        given = [p[name] for p in parts if p[name] is not None]
        out[f"reward/{name}"] = sum(given) / len(given) if given else None
    return out


def ledger_round(experience: list, max_len: int) -> dict:
    """One round's generated tokens and trained tokens of one pass over them (prompt + completion, as
    collated), summed over every rank."""
    mine = [
        sum(len(r.completion_ids) for r in experience),
        sum(min(max_len, len(r.prompt_ids) + len(r.completion_ids)) for r in experience),
    ]
    return dict(
        zip(("generated_tokens", "trained_tokens"), (sum(col) for col in zip(*D.all_gather_objects(mine))))
    )


class RolloutSource:
    """The synchronous loop's rounds, on-policy: the base every online source refines."""

    def __init__(self, rounds: Rounds):
        o = rounds.online
        self.r, self.worker, self.stats, self.version = rounds, rounds.worker, {}, 0
        self.ws, self.rk = D.world_size(), D.rank()
        self.per_rank, self.rounds, self.total_steps = (
            o.prompts_per_batch // self.ws,
            o.rounds,
            o.rounds * o.inner_epochs,
        )
        self.sampler = make_sampler(
            len(rounds.prompts), seed=rounds.data_seed, rank=self.rk, world_size=self.ws
        )
        self.consumed: list[str] = []

    def prompts(self, rnd: int) -> list[dict]:
        return round_prompts(self.r.prompts, rnd, self.per_rank, self.sampler)

    def seed(self, rnd: int) -> int:
        return self.r.sampling_seed * 100_003 + rnd * 1009 + self.rk

    def draw(self, rnd: int, sample: Callable[[], list[Rollout]]) -> list[Rollout]:
        """Round ``rnd``'s graded rollouts (``sample()`` draws them with the rollout worker as it stands)."""
        return sample()

    def batches(self, start: int) -> Iterator[Batch]:
        o = self.r.online
        for rnd in range(start, self.rounds):
            rows = self.prompts(rnd)
            self.consumed += [r["id"] for r in rows]
            started = time.time()
            sample = functools.partial(
                self.worker.rollouts,
                rows,
                n=o.n,
                temperature=o.temperature,
                max_new_tokens=o.max_new_tokens,
                seed=self.seed(rnd),
                reward_fn=self.r.reward_fn,
                group_offset=self.rk * self.per_rank,
            )
            yield self._batch(rnd, self.draw(rnd, sample), started)

    def _batch(self, rnd: int, experience: list[Rollout], started: float) -> Batch:
        stats = rollout_stats(experience, self.ws) | ledger_round(experience, self.worker.max_len)
        stats["gen_seconds"] = time.time() - started  # weight sync + sampling + grading, this rank
        stats |= self.worker.take_sync_stats()  # of it, the weight sync (async: the source's publish)
        rewards = torch.tensor([r.reward for r in experience], device="cpu")  # host bookkeeping
        compute = {k: stats[k] for k in ("rollouts", "generated_tokens", "gen_seconds")}
        return Batch(
            round=rnd,
            passes=self.r.online.inner_epochs,
            last=rnd == self.rounds - 1,
            row={"round": rnd, "reward_mean": rewards.mean().item(), **stats},
            trained_tokens=stats["trained_tokens"],
            compute=compute,
            rollouts=experience,
            rewards=rewards,
            started=started,
            policy_version=self.worker.version,
        )

    def after_step(self, version: int) -> None:
        self.version = version

    def order_sha(self) -> str:
        return order_sha([i for part in D.all_gather_objects(self.consumed) for i in part])

    def state_dict(self) -> dict:
        w = self.worker
        return {
            "version": self.version,
            "consumed": self.consumed,
            "worker": {"weights": w.model.state_dict(), "version": w.version},
        }

    def load_state_dict(self, state: dict) -> None:
        self.version, self.consumed = state["version"], state["consumed"]
        self.worker.sync(state["worker"]["weights"], state["worker"]["version"])
        self.worker.take_sync_stats()  # the resume's load is no round's sync (rows equal the unstopped run's)

    def close(self) -> None:
        self.worker.close()  # a vLLM server process
