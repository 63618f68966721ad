"""Determined's `LRScheduler`: when the trainer steps a wrapped learning-rate scheduler."""

from __future__ import annotations

import enum
from typing import Any


class LRScheduler:
    """A torch LR scheduler and when to step it (`context.wrap_lr_scheduler` makes these)."""

    class StepMode(enum.Enum):
        STEP_EVERY_EPOCH = 1  # after every epoch of training batches (every `frequency` epochs)
        STEP_EVERY_BATCH = 2  # after every training batch (every `frequency` batches)
        MANUAL_STEP = 3  # never by the trainer: call `scheduler.step()` yourself
        STEP_EVERY_OPTIMIZER_STEP = 4  # after every `context.step_optimizer()` (every `frequency`)

    def __init__(self, scheduler: Any, step_mode: StepMode, frequency: int = 1) -> None:
        if frequency < 1:
            raise ValueError(f"frequency={frequency!r} must be >= 1.")
        self.scheduler = scheduler
        self.step_mode = LRScheduler.StepMode(step_mode)
        self.frequency = frequency

    def step(self) -> None:
        self.scheduler.step()

    def get_last_lr(self) -> list[float]:
        return list(self.scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state)
