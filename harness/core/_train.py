"""Reporting metrics and progress (Determined's `core.TrainContext`).

Only the chief reports: on other ranks every call returns at once, so the same training script runs
unchanged on every rank (average or gather metrics on the chief first if all ranks' values matter).
"""

from __future__ import annotations

import abc
import enum
import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stratus.contract.metric_groups import TRAINING, VALIDATION, check_metric_group
from stratus.harness.core._distributed import DistributedContext
from stratus.harness.core._events import LocalEvents, LocalEventType
from stratus.harness.core._reports import ReportSender
from stratus.harness.core._tensorboard import tensorboard_path

log = logging.getLogger("stratus.harness.train")


class EarlyExitReason(enum.Enum):
    """Determined's `core.EarlyExitReason`, for `report_early_exit`."""

    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


class TrainContext(abc.ABC):
    """Reports training and validation metrics and the trial's progress."""

    def __init__(self, distributed: DistributedContext) -> None:
        self._dist = distributed
        self._on_invalid_hp: Callable[[str], None] | None = None  # set by init(): the searcher's report

    def report_training_metrics(
        self, steps_completed: int, metrics: Mapping[str, Any], batch_metrics: Any = None
    ) -> None:
        """Report training metrics after `steps_completed` batches (chief only; a no-op elsewhere).

        `batch_metrics` (Determined's per-batch list) is accepted and not sent.
        """
        self._report(TRAINING, steps_completed, metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Report validation metrics after `steps_completed` batches (chief only; a no-op elsewhere).

        The searcher reads its `metric` from these.
        """
        self._report(VALIDATION, steps_completed, metrics)

    def report_metrics(self, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Report metrics of `group` (Determined's generic call; chief only, a no-op elsewhere).

        `training` and `validation` are the built-in groups (the same as `report_training_metrics` and
        `report_validation_metrics`); any other name is a custom group, such as `inference`. A group is
        a non-empty name without `.` (Determined's rule); `stratus.contract.errors.InvalidMetricGroupError` (a
        ValueError) otherwise.
        """
        self._report(check_metric_group(group), steps_completed, metrics)

    def report_early_exit(self, reason: EarlyExitReason | str) -> None:
        """Determined's early exit: `INVALID_HP` tells the searcher (as `harness.InvalidHP` does); any
        other reason is only logged, the exit code tells the rest."""
        value = reason.value if isinstance(reason, EarlyExitReason) else str(reason)
        if value in (EarlyExitReason.INVALID_HP.value, EarlyExitReason.INVALID_HP.name):
            if self._on_invalid_hp is not None:
                self._on_invalid_hp("the trial reported an early exit: invalid hyperparameters")
            return
        log.info("early exit reported: %s", value)

    def set_status(self, status: str) -> None:
        """Determined's free-text status line: logged here."""
        log.info("status: %s", status)

    def get_tensorboard_path(self) -> Path:
        """Determined's TensorBoard folder: a local one, never uploaded (`stratus.harness.core._tensorboard`)."""
        return tensorboard_path(self._dist.rank)

    def report_progress(self, progress: float) -> None:
        """Report how far the trial is, from 0.0 to 1.0 (chief only; a no-op elsewhere)."""
        value = float(progress)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"progress {progress!r} is outside [0, 1]; report a fraction of the work done.")
        if self._dist.is_chief:
            self._send_progress(value)

    def _report(self, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        steps = check_steps(steps_completed)
        clean = clean_metrics(metrics)
        if self._dist.is_chief:
            self._send_metrics(group, steps, clean)

    @abc.abstractmethod
    def _send_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def _send_progress(self, progress: float) -> None: ...


class PlatformTrainContext(TrainContext):
    """Queues metrics and progress on the report sender (`stratus.harness.core._reports`): a report returns at
    once, and reaches `POST /trials/{id}/reports` in order, batched with its neighbours."""

    def __init__(self, sender: ReportSender, distributed: DistributedContext) -> None:
        super().__init__(distributed)
        self._sender = sender

    def _send_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        body = {"kind": "metrics", "group": group, "steps_completed": steps_completed, "metrics": metrics}
        self._sender.report(body, f"{group} metrics at {steps_completed} batches")

    def _send_progress(self, progress: float) -> None:
        self._sender.progress(progress)


class LocalTrainContext(TrainContext):
    """Off the platform: prints metrics and keeps them by group in `metrics_by_group` (the built-in
    groups also in `training_metrics` / `validation_metrics`), and appends them to the
    `STRATUS_LOCAL_EVENTS` file when one is given."""

    def __init__(self, distributed: DistributedContext, *, events: LocalEvents | None = None) -> None:
        super().__init__(distributed)
        self._events = events or LocalEvents(None)
        self.training_metrics: list[dict[str, Any]] = []
        self.validation_metrics: list[dict[str, Any]] = []
        self.metrics_by_group: dict[str, list[dict[str, Any]]] = {
            TRAINING: self.training_metrics,
            VALIDATION: self.validation_metrics,
        }
        self.progress: float | None = None

    def _send_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        kept = self.metrics_by_group.setdefault(group, [])
        kept.append({"steps_completed": steps_completed, "metrics": metrics})
        shown = " ".join(f"{k}={_show(v)}" for k, v in metrics.items())
        print(f"[{group}] steps_completed={steps_completed} {shown}", flush=True)
        if group in (TRAINING, VALIDATION):
            self._events.emit(group, steps_completed, metrics=metrics)
        else:
            self._events.emit(LocalEventType.METRICS, steps_completed, group=group, metrics=metrics)

    def _send_progress(self, progress: float) -> None:
        self.progress = progress


def check_steps(steps_completed: Any) -> int:
    if isinstance(steps_completed, bool) or not isinstance(steps_completed, int) or steps_completed < 0:
        raise ValueError(f"steps_completed={steps_completed!r} must be a whole number of batches, >= 0.")
    return steps_completed


def clean_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics as JSON values: scalars with `.item()` (numpy, torch) are unwrapped, and non-finite floats
    become the strings "NaN", "Infinity", "-Infinity" (JSON has no such numbers)."""
    if not isinstance(metrics, Mapping):
        raise ValueError(f"metrics must be a mapping of name to value, not {type(metrics).__name__}.")
    return {str(name): _clean(name, value) for name, value in metrics.items()}


def _clean(name: object, value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (ValueError, RuntimeError) as e:  # a tensor or array with more than one element
            raise ValueError(f"metric {name!r} is not a scalar ({e}); report one number per name.") from e
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_clean(name, v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _clean(name, v) for k, v in value.items()}
    raise ValueError(
        f"metric {name!r} is a {type(value).__name__}; report numbers, strings or lists of them."
    )


def _show(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)
