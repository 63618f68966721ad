"""Batches read by worker processes (`num_workers` > 0) that draw the same whichever worker reads them.

torch seeds each worker once, when an epoch's (or, for our repeating training loader, the run's)
iterator starts; a worker's RNGs then move on with every batch it reads. A dataset that draws as it reads
(random transforms, noise) therefore gives batch *n* values that depend on which batches its worker read
before: a resumed trial, whose workers start at batch *n*, would read other values than an uninterrupted
one. So `DataLoader` hands its batch sampler's batches out as `SeededBatch` (the indices and a seed made
of the trial seed, the rank and the batch number) and wraps the dataset in `SeededPerBatch`, which, in a
worker process, seeds `random`, numpy and torch from that seed before reading a batch. Batch *n* is then
a function of (seed, rank, n) alone, with or without workers. In the trial's own process (no workers)
nothing is reseeded: the dataset draws from the trial's RNGs, which checkpoints save and restore.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable
from typing import Any

_STRIDE = 1_000_003


class SeededBatch(list[int]):
    """A batch's dataset indices and the seed its reader uses (`seed`)."""

    def __init__(self, indices: Iterable[int], seed: int) -> None:
        super().__init__(indices)
        self.seed = seed


def batch_seed(seed: int, rank: int, number: int) -> int:
    """The seed of batch `number` of rank `rank` in a trial seeded with `seed` (below 2**63)."""
    return ((seed * _STRIDE + rank) * _STRIDE + number) % 2**63


class SeededPerBatch:
    """`dataset`, read a batch at a time (`__getitems__`, which torch's loader calls with each batch);
    in a worker process, every RNG is seeded from the batch's seed first."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, batch: list[int]) -> list[Any]:
        seed = getattr(batch, "seed", None)
        if seed is not None and _in_a_worker():
            _seed_all(seed)
        read_batch = getattr(self.dataset, "__getitems__", None)
        if callable(read_batch):
            return list(read_batch(list(batch)))
        return [self.dataset[i] for i in batch]


def _in_a_worker() -> bool:
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None


def _seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    with contextlib.suppress(ImportError):
        import numpy as np

        np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
