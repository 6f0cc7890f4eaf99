"""Seeded, sharded data order.

The reference study's ``DistributedSampler`` never received the run seed, so its "seeds"
trained on identical orders. Here the sampler gets the data seed and ``set_epoch`` every
epoch, and the order actually used is summarised by ``data_order_sha``.
"""

from __future__ import annotations

import hashlib

from torch.utils.data import DistributedSampler


def make_sampler(
    n: int, *, seed: int, rank: int, world_size: int, shuffle: bool = True
) -> DistributedSampler:
    return DistributedSampler(
        range(n), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=False
    )


def epoch_indices(sampler: DistributedSampler, epoch: int) -> list[int]:
    sampler.set_epoch(epoch)
    return list(iter(sampler))


def global_order(n: int, *, seed: int, world_size: int, epochs: int) -> list[list[list[int]]]:
    """``order[epoch][rank]``: the indices every rank sees, as the samplers produce them."""
    return [
        [
            epoch_indices(make_sampler(n, seed=seed, rank=r, world_size=world_size), e)
            for r in range(world_size)
        ]
        for e in range(epochs)
    ]


def order_sha(ids_in_order: list[str]) -> str:
    """Digest of the training-example ids in the order they were consumed."""
    h = hashlib.sha256()
    for i in ids_in_order:
        h.update(str(i).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]
