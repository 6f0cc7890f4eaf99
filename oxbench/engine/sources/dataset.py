"""The dataset source (:mod:`oxbench.engine.sources`): every offline method's batches."""

from __future__ import annotations

from collections.abc import Iterator

from oxbench.data.sampler import epoch_indices, make_sampler, order_sha
from oxbench.engine import distributed as D
from oxbench.engine.batches import ROLES
from oxbench.engine.reference import RefCache
from oxbench.engine.sources.batch import Batch


class DatasetSource:
    """A fixed dataset (encoded examples of one data kind) in a seeded ``DistributedSampler`` order,
    ``batch_size`` examples a micro-batch, ``grad_accum`` micro-batches an optimiser step, ``epochs``
    passes, at most ``max_steps`` steps. The seed fixes the order, so a round's number is its position:
    nothing else to checkpoint. With :meth:`cache_reference` its batches carry the reference's log-probs,
    computed once from the initial policy."""

    def __init__(
        self,
        examples: list[dict],
        kind: str,
        *,
        seed: int,
        batch_size: int,
        grad_accum: int,
        epochs: int,
        max_steps: int | None,
        run: str,
    ):
        self.examples, self.kind, self.grad_accum, self.stats = examples, kind, grad_accum, {}
        self.reference: RefCache | None = None
        sampler = make_sampler(len(examples), seed=seed, rank=D.rank(), world_size=D.world_size())
        micro = []
        for epoch in range(epochs):
            idx = epoch_indices(sampler, epoch)
            micro += [(epoch, idx[i : i + batch_size]) for i in range(0, len(idx), batch_size)]
        steps = len(micro) // grad_accum
        self.total_steps = steps if max_steps is None else min(steps, max_steps)
        if self.total_steps == 0:
            raise RuntimeError(
                f"run {run}: {len(examples)} examples give no full optimizer step "
                f"(batch {batch_size} x accum {grad_accum} x world {D.world_size()})"
            )
        self.micro = micro[: self.total_steps * grad_accum]
        self.rounds = self.total_steps
        steps_by_rank = D.all_gather_objects(self.step_indices())
        # each step's examples in the sampler's global order (rank r's i-th is position i x world + r): the
        # same sequence at any world size and accumulation, and at world size 1 the order they are read in
        self._order = [examples[i]["id"] for step in zip(*steps_by_rank) for at in zip(*step) for i in at]

    def step_indices(self) -> list[list[int]]:
        """The examples (indices) this rank trains on at each optimiser step."""
        a = self.grad_accum
        return [[i for _, m in self.micro[s * a : (s + 1) * a] for i in m] for s in range(self.total_steps)]

    def cache_reference(self, module, pad_id: int, key_parts: dict) -> None:
        """Cache the reference's log-probs of every example from ``module`` (the initial policy)."""
        self.reference = RefCache.build(module, self.examples, ROLES[self.kind], pad_id, key_parts=key_parts)

    def batches(self, start: int) -> Iterator[Batch]:
        for step in range(start, self.total_steps):
            part = self.micro[step * self.grad_accum : (step + 1) * self.grad_accum]
            chunks = [[self.examples[j] for j in mb] for _, mb in part]
            tokens = sum(len(ex[role][0]) for chunk in chunks for ex in chunk for role in ROLES[self.kind])
            yield Batch(
                round=step,
                passes=1,
                last=step == self.total_steps - 1,
                row={"epoch": part[-1][0]},
                trained_tokens=sum(D.all_gather_objects(tokens)),
                examples=chunks,
                reference=self.reference,
            )

    def after_step(self, version: int) -> None:
        pass

    def order_sha(self) -> str:
        """The digest of the examples of every optimiser step, in the sampler's global order: the same for
        any world size and accumulation that give the same global batches (at world size 1, the order the
        examples are read in)."""
        return order_sha(self._order)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def close(self) -> None:
        pass
