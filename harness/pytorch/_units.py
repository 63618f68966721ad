"""Training lengths: Determined's `Batch(n)` / `Epoch(n)` and the config's `{batches|records|epochs: n}`,
all turned into batches the way Determined does it (rounding down):

- records: `records // global_batch_size`;
- epochs: `epochs * records_per_epoch // global_batch_size` when the config sets `records_per_epoch`,
  else `epochs * <batches in one epoch of the training data loader>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from stratus.harness.errors import TrialDefinitionError

LENGTH_UNITS = ("batches", "records", "epochs")


@dataclass(frozen=True)
class TrainUnit:
    """A length of training; use `Batch(n)` or `Epoch(n)`."""

    value: int
    unit: ClassVar[str]  # "batches", "epochs" or "records": set by each kind below

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int) or self.value < 0:
            raise ValueError(f"{type(self).__name__}({self.value!r}): the value must be a whole number >= 0.")


@dataclass(frozen=True)
class Batch(TrainUnit):
    unit: ClassVar[str] = "batches"


@dataclass(frozen=True)
class Epoch(TrainUnit):
    unit: ClassVar[str] = "epochs"


@dataclass(frozen=True)
class Records(TrainUnit):
    unit: ClassVar[str] = "records"


@dataclass(frozen=True)
class Scale:
    """What converting records and epochs into batches needs."""

    global_batch_size: int | None
    batches_per_epoch: int
    records_per_epoch: int = 0

    def to_batches(self, unit: str, value: int) -> int:
        if unit == "batches":
            return value
        if unit == "records":
            return value // self._batch_size(unit)
        if unit == "epochs":
            if self.records_per_epoch > 0:
                return value * self.records_per_epoch // self._batch_size(unit)
            if self.batches_per_epoch <= 0:
                raise TrialDefinitionError(
                    "a length in epochs needs records_per_epoch in the config (the training data has no len())."
                )
            return value * self.batches_per_epoch
        raise TrialDefinitionError(
            f"a length in {unit!r} cannot be trained by PyTorchTrial; use batches, records or epochs "
            "(for adaptive_asha, set time_metric: batches or use max_length)."
        )

    def _batch_size(self, unit: str) -> int:
        if not self.global_batch_size:
            raise TrialDefinitionError(
                f"a length in {unit} needs the global_batch_size hyperparameter; add it to the config."
            )
        return self.global_batch_size


def parse_length(value: Any, what: str) -> tuple[str, int] | None:
    """(unit, value) of a config length (`{epochs: 2}`, a bare int = batches) or a `TrainUnit`; None
    when absent."""
    if value is None:
        return None
    if isinstance(value, TrainUnit):
        return value.unit, value.value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return "batches", value
    if isinstance(value, Mapping) and len(value) == 1:
        unit, amount = next(iter(value.items()))
        if unit in LENGTH_UNITS and isinstance(amount, int) and not isinstance(amount, bool) and amount >= 0:
            return str(unit), amount
    raise TrialDefinitionError(
        f"{what} is {value!r}; write {{batches: N}}, {{records: N}} or {{epochs: N}} (or Batch(N), Epoch(N))."
    )


def length_in_batches(value: Any, what: str, scale: Scale) -> int:
    """A config length or `TrainUnit` in batches; 0 when absent (for periods: never)."""
    parsed = parse_length(value, what)
    return 0 if parsed is None else scale.to_batches(*parsed)
