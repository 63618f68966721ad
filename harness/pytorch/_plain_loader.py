"""Resuming a plain `torch.utils.data.DataLoader` (or any iterable of batches) where it stopped.

Such a loader draws its order when an epoch's iterator starts: a shuffling sampler takes its seed from
torch's global RNG (or from the loader's own generator), a sampler of the user's may draw from `random` or
numpy, and the dataset may draw augmentation from any of them as it reads a batch. So the batches of an
epoch depend on the RNG states at the epoch's start, which the trial's own draws (dropout, noise) have
moved since.

`PlainLoaderStream` therefore notes, when it starts an epoch's iterator, the batch number and the RNG
states (the global ones and the loader's generators); a checkpoint keeps that note (`position()`), with
the generators' states at the checkpoint. Resumed from it, the stream puts the epoch's RNG states back,
starts the epoch's iterator, reads the batches already trained in that epoch, then gives the global
RNGs back the states the trial was restored with and the loader's generators their states at the
checkpoint: the batches that follow, and every draw after them, are the uninterrupted run's. It reads
at most one epoch again (none when the checkpoint is at the end of an epoch of a loader with a length);
`stratus.harness.pytorch.DataLoader` skips without reading. Workers (`num_workers`) are seeded at the epoch's
start and read the same batches in the same order, so they draw the same; `persistent_workers=True`
keeps worker RNGs across epochs, which a resume cannot replay.

Without a note (a checkpoint written before it existed), the stream reads every batch from the first
epoch on, which is exact only for loaders whose order does not depend on the RNGs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from stratus.harness.errors import TrialDefinitionError
from stratus.harness.pytorch._rng import (
    generator_states,
    loader_generators,
    rng_state,
    set_generator_states,
    set_rng_state,
)


class PlainLoaderStream:
    """Training batches of `data` from batch number `skip` on, epoch after epoch; `position` is what
    `position()` returned when the checkpoint at batch `skip` was written (None: none noted)."""

    def __init__(self, data: Any, skip: int, position: Mapping[str, Any] | None = None) -> None:
        self.data = data
        self.skip = skip
        self.produced = skip
        self.generators = loader_generators(data)
        self.pending = dict(position) if position and skip > 0 else None
        self.epoch_start = 0
        self.epoch_rng: dict[str, Any] | None = None
        self.iterator: Iterator[Any] | None = None

    def __iter__(self) -> PlainLoaderStream:
        return self

    def __next__(self) -> Any:
        if self.iterator is None:
            self._start()
        assert self.iterator is not None
        while True:
            try:
                batch = next(self.iterator)
            except StopIteration:
                if self.produced == self.epoch_start:
                    raise TrialDefinitionError(
                        "the training data loader gave no batch; check build_training_data_loader()."
                    ) from None
                self._start_epoch()
                continue
            self.produced += 1
            return batch

    def position(self) -> dict[str, Any] | None:
        """Where the stream stands, for the checkpoint: the batch number at which the current epoch's
        iterator started, the RNG states then, and the loader's generators' states now."""
        if self.epoch_rng is None:
            return self.pending
        return {
            "epoch_start": self.epoch_start,
            "epoch_rng": self.epoch_rng,
            "generators": generator_states(self.generators),
        }

    # ---- starting --------------------------------------------------------------------------------

    def _start_epoch(self) -> None:
        self.epoch_start = self.produced
        self.epoch_rng = {"rng": rng_state(cuda=False), "generators": generator_states(self.generators)}
        self.iterator = iter(self.data)

    def _start(self) -> None:
        position, self.pending = self.pending, None
        if self.skip == 0:
            self._start_epoch()
        elif position is None:
            self.produced = 0
            self._start_epoch()
            while self.produced < self.skip:
                next(self)
        else:
            self._resume(position)

    def _resume(self, position: Mapping[str, Any]) -> None:
        start, epoch_rng = int(position["epoch_start"]), dict(position["epoch_rng"])
        length = _length(self.data)
        self.epoch_start, self.epoch_rng = start, epoch_rng
        if length is not None and self.skip - start >= length:
            # The checkpoint ends an epoch: the next batch starts a new one, under the current states.
            self.iterator = iter(())
        else:
            now = rng_state()
            set_rng_state(epoch_rng["rng"])
            set_generator_states(self.generators, [s.cpu() for s in epoch_rng["generators"]])
            self.iterator, self.produced = iter(self.data), start
            while self.produced < self.skip:
                next(self)
            set_rng_state(now)
        set_generator_states(self.generators, [s.cpu() for s in position["generators"]])


def _length(data: Any) -> int | None:
    """Batches in an epoch of `data`, or None when it has no reliable length (an iterable dataset)."""
    from torch.utils.data import IterableDataset

    if isinstance(getattr(data, "dataset", None), IterableDataset):
        return None
    try:
        return len(data)
    except TypeError:
        return None
