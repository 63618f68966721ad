"""Data loading that survives a pause: Determined's `DataLoader`.

`DataLoader` takes the arguments of `torch.utils.data.DataLoader` and keeps them; the trainer builds the
real loader with a batch sampler whose batch *n* is a function of (trial seed, *n*) alone:

- epoch *e* visits the dataset in the order of a permutation drawn from a generator seeded with
  (seed, e) when `shuffle=True` (in order otherwise), cut into batches of `batch_size` (the last partial
  batch is dropped with `drop_last=True`);
- with several ranks, rank *r* of *R* gets batches r, r+R, r+2R, ... of every epoch (for training each
  epoch is trimmed to a multiple of R so that ranks stay in step; validation keeps every batch);
- a resumed trial skips the batches it already trained, so it sees exactly the batches an uninterrupted
  trial would have seen; with `num_workers` > 0 a worker reads batch *n* under RNGs seeded from
  (seed, rank, n), so what the dataset draws as it reads does not depend on the worker either
  (harness/pytorch/_workers.py).

The loader is also given its own seeded `torch.Generator`, so iterating it never draws from torch's
global RNG (which the checkpoint saves and restores). A plain `torch.utils.data.DataLoader` is accepted
too; it is iterated epoch after epoch, and a resumed trial reads again the batches of the current epoch
that it had trained, under the RNG states of the epoch's start (harness/pytorch/_plain_loader.py).

A `sampler` or `batch_sampler` of the user's is iterated once per epoch (after its `set_epoch(e)`, when it
has one) with `random`, numpy, torch and its own generator seeded from (seed, e), and those RNGs put back
after: its order, too, depends on (seed, e) alone, and iterating it draws nothing from the trial's RNGs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stratus.harness.pytorch._workers import SeededBatch, SeededPerBatch, batch_seed

if TYPE_CHECKING:
    import torch
    import torch.utils.data

_SEED_STRIDE = 1_000_003


class DataLoader:
    """Determined's DataLoader: the arguments of `torch.utils.data.DataLoader`, kept for the trainer.

    One default differs: `pin_memory` left unsaid pins the batches where CUDA is available (the trial
    trains on the GPU there), so that copying a batch to the GPU does not hold the host up; pass
    `pin_memory=False` to keep them in pageable memory."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Any = None,
        pin_memory: bool | None = None,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
    ) -> None:
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError("batch_sampler is exclusive with batch_size, shuffle, sampler and drop_last.")
        if sampler is not None and shuffle:
            raise ValueError("sampler is exclusive with shuffle.")
        if batch_sampler is None and (isinstance(batch_size, bool) or batch_size < 1):
            raise ValueError(f"batch_size={batch_size!r} must be a whole number >= 1.")
        self.dataset = dataset
        self.batch_size = batch_size if batch_sampler is None else getattr(batch_sampler, "batch_size", None)
        self.shuffle = shuffle
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.drop_last = drop_last
        self.generator = generator
        self._loader_kwargs: dict[str, Any] = {
            "num_workers": num_workers,
            "collate_fn": collate_fn,
            "pin_memory": pin_memory,
            "timeout": timeout,
            "worker_init_fn": worker_init_fn,
            "multiprocessing_context": multiprocessing_context,
            "persistent_workers": persistent_workers,
        }
        if prefetch_factor is not None:
            self._loader_kwargs["prefetch_factor"] = prefetch_factor

    def __len__(self) -> int:
        """Batches in one epoch on a single rank."""
        return len(self._batch_sampler(seed=0, repeat=False, skip=0, num_replicas=1, rank=0))

    def get_data_loader(
        self, *, repeat: bool = False, skip: int = 0, num_replicas: int = 1, rank: int = 0, seed: int = 0
    ) -> torch.utils.data.DataLoader[Any]:
        """The torch loader for one rank: epochs in a row when `repeat`, the first `skip` batches left out."""
        import torch
        import torch.utils.data

        workers = bool(self._loader_kwargs["num_workers"])
        sampler = self._batch_sampler(
            seed=seed, repeat=repeat, skip=skip, num_replicas=num_replicas, rank=rank, seeded=workers
        )
        generator = self.generator or torch.Generator().manual_seed(seed)
        # With workers, each batch is read under RNGs seeded from its number (_workers.py).
        dataset: Any = SeededPerBatch(self.dataset) if workers else self.dataset
        kwargs = dict(self._loader_kwargs)
        if kwargs["pin_memory"] is None:  # not said: pinned where the trial trains on a GPU (see to_device)
            kwargs["pin_memory"] = torch.cuda.is_available()
        return torch.utils.data.DataLoader(dataset, batch_sampler=sampler, generator=generator, **kwargs)

    def _batch_sampler(
        self, *, seed: int, repeat: bool, skip: int, num_replicas: int, rank: int, seeded: bool = True
    ) -> EpochBatchSampler:
        return EpochBatchSampler(
            size=_dataset_length(self.dataset) if self.batch_sampler is None else 0,
            batch_size=self.batch_size or 1,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            sampler=self.sampler,
            batch_sampler=self.batch_sampler,
            seed=seed,
            repeat=repeat,
            skip=skip,
            num_replicas=num_replicas,
            rank=rank,
            seeded=seeded,
        )


class EpochBatchSampler:
    """Yields lists of dataset indices; see the module docstring for the order. `__len__` is the number
    of batches of one epoch on this rank. With `seeded`, each batch is a `SeededBatch` carrying the seed
    its worker reads it under; without (no worker processes, nothing to seed), a plain list."""

    def __init__(
        self,
        *,
        size: int,
        batch_size: int,
        shuffle: bool,
        drop_last: bool,
        sampler: Any,
        batch_sampler: Any,
        seed: int,
        repeat: bool,
        skip: int,
        num_replicas: int,
        rank: int,
        seeded: bool = True,
    ) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} of {num_replicas} replicas is impossible.")
        self.size = size
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.seed = seed
        self.repeat = repeat
        self.skip = skip
        self.num_replicas = num_replicas
        self.rank = rank
        self.seeded = seeded

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of epoch `epoch`."""
        every = self._all_batches(epoch)
        # Training ranks must stay in step (every rank the same number of batches); a validation pass
        # (not repeated) keeps every batch, so some ranks may get one fewer.
        usable = len(every) - len(every) % self.num_replicas if self.repeat else len(every)
        return every[self.rank : usable : self.num_replicas]

    def __len__(self) -> int:
        return len(self.epoch_batches(0))

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's batches from number `skip` on (each a `SeededBatch` when `seeded`, _workers.py)."""
        if not self.repeat:
            yield from self._numbered(self.epoch_batches(0)[self.skip :], self.skip)
            return
        per_epoch = len(self)
        if per_epoch == 0:
            raise ValueError("the training data gives no batch on this rank; use a smaller batch size.")
        epoch, within = divmod(self.skip, per_epoch)
        while True:
            yield from self._numbered(self.epoch_batches(epoch)[within:], epoch * per_epoch + within)
            epoch, within = epoch + 1, 0

    def _numbered(self, batches: list[list[int]], first: int) -> Iterator[list[int]]:
        if not self.seeded:
            yield from batches
            return
        for number, batch in enumerate(batches, start=first):
            yield SeededBatch(batch, batch_seed(self.seed, self.rank, number))

    def _all_batches(self, epoch: int) -> list[list[int]]:
        if self.batch_sampler is not None:
            _set_epoch(self.batch_sampler, epoch)
            with self._seeded(epoch, self.batch_sampler):
                return [list(b) for b in self.batch_sampler]
        order = self._order(epoch)
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def _seeded(self, epoch: int, sampler: Any) -> contextlib.AbstractContextManager[None]:
        """RNGs seeded from (seed, `epoch`) while a sampler of the user's is iterated, put back after."""
        from stratus.harness.pytorch._rng import loader_generators, seeded_rngs

        return seeded_rngs(self.seed * _SEED_STRIDE + epoch, loader_generators(sampler))

    def _order(self, epoch: int) -> list[int]:
        if self.sampler is not None:
            _set_epoch(self.sampler, epoch)
            with self._seeded(epoch, self.sampler):
                return [int(i) for i in self.sampler]
        if not self.shuffle:
            return list(range(self.size))
        import torch

        generator = torch.Generator().manual_seed(self.seed * _SEED_STRIDE + epoch)
        return [int(i) for i in torch.randperm(self.size, generator=generator).tolist()]


def _set_epoch(sampler: Any, epoch: int) -> None:
    set_epoch = getattr(sampler, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


def _dataset_length(dataset: Any) -> int:
    try:
        return len(dataset)
    except TypeError as e:
        raise ValueError(
            "the dataset has no len(); stratus.harness.pytorch.DataLoader needs a map-style dataset (or return a "
            "torch.utils.data.DataLoader for an iterable one)."
        ) from e


def to_device(data: Any, device: torch.device) -> Any:
    """`data` with every tensor moved to `device` (lists, tuples, dicts and namedtuples are walked);
    tensors already there are passed on as they are (no call into torch per tensor per batch).

    A copy from the host to a GPU is queued on the device's stream and not waited for (`non_blocking`): a
    blocking copy waits until the GPU has finished every step queued before it, so the host could not read
    and collate the next batch while the GPU trains on this one. From pinned memory (the trainer's
    `DataLoader` pins batches when the trial trains on a GPU) the copy itself overlaps the GPU's work; from
    pageable memory the driver stages it first, so the host may still change the tensor after the call.
    Every other copy (a GPU's tensor to the host, whose values are read next) is waited for."""
    import torch

    return _moved(data, device, torch.Tensor)


def _moved(data: Any, device: Any, tensor: Any) -> Any:
    if isinstance(data, tensor):
        if data.device == device:
            return data
        return data.to(device, non_blocking=device.type == "cuda" and data.device.type == "cpu")
    kind = type(data)
    if kind is tuple or kind is list:  # the usual batch, without the ABC checks below
        return kind([_moved(v, device, tensor) for v in data])
    if isinstance(data, Mapping):
        return kind({k: _moved(v, device, tensor) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return kind(*(_moved(v, device, tensor) for v in data))
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        return kind(_moved(v, device, tensor) for v in data)
    return data


def batch_length(batch: Any) -> int:
    """Records in a batch: the first dimension of its first tensor."""
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, Mapping):
        return batch_length(next(iter(batch.values())))
    if isinstance(batch, Sequence) and batch:
        return batch_length(batch[0])
    raise ValueError(f"cannot tell the length of a batch of type {type(batch).__name__}.")


def batches_per_epoch(data: Any, *, num_replicas: int, rank: int, seed: int) -> int:
    """Training batches in one epoch of `data` on this rank (0 when the loader has no length)."""
    if isinstance(data, DataLoader):
        return len(data._batch_sampler(seed=seed, repeat=True, skip=0, num_replicas=num_replicas, rank=rank))
    try:
        return len(data)
    except TypeError:
        return 0


def training_batches(
    data: Any,
    skip: int,
    *,
    num_replicas: int,
    rank: int,
    seed: int,
    position: Mapping[str, Any] | None = None,
) -> Iterator[Any]:
    """Training batches from batch number `skip` on, epoch after epoch. A `DataLoader` skips by batch
    number alone; any other loader resumes from `position`, what its stream's `position()` gave when the
    checkpoint was written (see harness/pytorch/_plain_loader.py)."""
    if isinstance(data, DataLoader):
        return _batches_of(data, skip, num_replicas=num_replicas, rank=rank, seed=seed)
    from stratus.harness.pytorch._plain_loader import PlainLoaderStream

    return PlainLoaderStream(data, skip, position)


def _batches_of(data: DataLoader, skip: int, *, num_replicas: int, rank: int, seed: int) -> Iterator[Any]:
    # A generator, so that the torch loader (and its workers) starts with the first batch asked for.
    yield from data.get_data_loader(repeat=True, skip=skip, num_replicas=num_replicas, rank=rank, seed=seed)


def validation_loader(data: Any, *, num_replicas: int, rank: int, seed: int) -> Any:
    """What to iterate for validation: this rank's share of a `DataLoader`, or a plain loader as it is."""
    if isinstance(data, DataLoader):
        return data.get_data_loader(num_replicas=num_replicas, rank=rank, seed=seed)
    return data
