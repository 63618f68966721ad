"""The searcher's local twin: off the platform, ONE operation, and reports printed.

The operation is of the `length` of `STRATUS_LOCAL_CONFIG` if given, else of the config's
`searcher.max_length` (from the same file), else of 100 batches (`DEFAULT_LOCAL_LENGTH`).
`Trainer.fit(max_length=...)` replaces that last default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from stratus.contract.actions import SearcherAction
from stratus.harness.core._distributed import DistributedContext
from stratus.harness.core._events import LocalEvents
from stratus.harness.core._searcher import BATCHES, SearcherAnswer, SearcherContext

DEFAULT_LOCAL_LENGTH = 100


class LocalSearcherContext(SearcherContext):
    """Off the platform: one operation (see the module docstring); reports are printed and, with
    `STRATUS_LOCAL_EVENTS`, appended to the events file."""

    def __init__(
        self,
        distributed: DistributedContext,
        *,
        length: int | None = DEFAULT_LOCAL_LENGTH,
        unit: str = BATCHES,
        configured: bool = False,
        events: LocalEvents | None = None,
        report_progress: Callable[[float], None] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(distributed, report_progress=report_progress, config=config)
        self.length = length
        self.unit = unit
        self.configured = configured  # False: the 100-batch default, which Trainer.fit(max_length) replaces
        self._events = events or LocalEvents(None)
        self.completed: list[dict[str, Any]] = []
        self.invalid_hp: str | None = None

    @classmethod
    def from_config(
        cls,
        distributed: DistributedContext,
        *,
        config: Mapping[str, Any],
        hparams: Mapping[str, Any],
        length: int | None,
        events: LocalEvents | None = None,
        report_progress: Callable[[float], None] | None = None,
    ) -> LocalSearcherContext:
        """The twin for the local test mode: `length` if given, else the config's `searcher.max_length`."""
        unit, value = BATCHES, length
        if value is None:
            found = local_max_length(config, hparams)
            if found is not None:
                value, unit = found
        configured = value is not None
        return cls(
            distributed,
            length=value if configured else DEFAULT_LOCAL_LENGTH,
            unit=unit,
            configured=configured,
            events=events,
            report_progress=report_progress,
            config=config,
        )

    def use_length(self, length: int, unit: str = BATCHES) -> None:
        """Replace the 100-batch default (only when nothing was configured)."""
        if not self.configured:
            self.length, self.unit, self.configured = length, unit, True

    def _ask(self) -> SearcherAnswer:
        if self._ops_completed:
            return SearcherAnswer(SearcherAction.STOP)
        return SearcherAnswer(SearcherAction.TRAIN, self.length, self.unit)

    def _send_completed(self, length: int, unit: str, metric: Any) -> None:
        self.completed.append({"length": length, "unit": unit, "metric": metric})
        print(f"[searcher] operation completed: length={length} {unit} metric={metric}", flush=True)
        self._events.emit("searcher_completed", length, length=length, unit=unit, metric=metric)

    def _send_invalid_hp(self, message: str) -> None:
        self.invalid_hp = message
        print(f"[searcher] invalid hyperparameters: {message}", flush=True)
        self._events.emit("invalid_hp", 0, message=message)


def local_max_length(config: Mapping[str, Any], hparams: Mapping[str, Any]) -> tuple[int, str] | None:
    """The config's `searcher.max_length` as (value, unit): in batches when it can be converted
    (records with the `global_batch_size` hyperparameter, epochs with `records_per_epoch` too), else in
    its own unit (`epochs`, `records`) for the trainer to convert."""
    max_length = (config.get("searcher") or {}).get("max_length")
    if isinstance(max_length, int) and not isinstance(max_length, bool):
        return max_length, BATCHES
    if not (isinstance(max_length, Mapping) and len(max_length) == 1):
        return None
    unit, value = next(iter(max_length.items()))
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    batch = hparams.get("global_batch_size")
    per_epoch = config.get("records_per_epoch") or 0
    if unit == "batches":
        return value, BATCHES
    if unit == "records" and isinstance(batch, int) and batch > 0:
        return value // batch, BATCHES
    if unit == "epochs" and isinstance(batch, int) and batch > 0 and per_epoch > 0:
        return value * per_epoch // batch, BATCHES
    if unit in ("records", "epochs"):
        return value, str(unit)
    return None
