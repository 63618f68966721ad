"""Determined's `single` searcher: one trial with hyperparameters sampled once, run to max_length."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chalicelib.domain import hparams as hp
from chalicelib.domain.searchers.base import (
    CreateTrial,
    Event,
    Operation,
    SearcherBase,
    SearchSpec,
    Shutdown,
    TrialCreated,
    TrialExited,
)


@dataclass
class SingleSearcher(SearcherBase):
    spec: SearchSpec = field(default_factory=lambda: SearchSpec({}, {"name": "single"}, None, 0))
    name: str = "single"

    def initial_operations(self) -> list[Operation]:
        if self.trials:
            return []
        rng = random.Random(self.spec.seed)
        return [CreateTrial("single-0", hp.sample(self.spec.space, rng), self.spec.max_length)]

    def on_event(self, event: Event) -> list[Operation]:
        if not self._first_time(event.event_id):
            return []
        if isinstance(event, TrialCreated):
            self.trials[event.request_id] = event.trial_id
        elif isinstance(event, TrialExited):
            self.exited[event.trial_id] = event.failed
            if not self.shut_down:
                self.shut_down = True
                return [Shutdown(failure=event.failed)]
        return []

    def progress(self, trained: Mapping[int, float] | None = None) -> float | None:
        """Its trial's share of `max_length` trained (or of the progress it reports), as Determined's."""
        if self.shut_down:
            return 1.0
        trial_id = next(iter(self.trials.values()), None)
        share = (trained or {}).get(trial_id) if trial_id is not None else None
        if share is not None:
            return min(max(share, 0.0), 1.0)
        return 0.0 if self.spec.max_length else None

    def snapshot(self) -> dict[str, Any]:
        return self._snapshot_bookkeeping()

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any], spec: SearchSpec) -> SingleSearcher:
        return cls(
            spec=spec,
            **cls._restore_bookkeeping(snapshot),
        )
