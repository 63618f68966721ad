"""The searcher interface: a pure state machine, events in and operations out.

A searcher never touches AWS. The service feeds it one event at a time, persists `snapshot()` with a
conditional write, and carries out the operations it returned. Every event carries an id, and a
searcher remembers the ids it has seen, so a duplicate delivery (SQS delivers at least once) returns
no operations and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class CreateTrial:
    request_id: str  # stable id chosen by the searcher, so creating twice is detectable
    hparams: dict[str, Any]


@dataclass(frozen=True)
class StopTrial:
    trial_id: int


@dataclass(frozen=True)
class Shutdown:
    failure: bool = False  # True when the searcher gives up (every trial failed)


Operation = CreateTrial | StopTrial | Shutdown


@dataclass(frozen=True)
class TrialCreated:
    event_id: str
    request_id: str
    trial_id: int


@dataclass(frozen=True)
class ValidationReported:
    event_id: str
    trial_id: int
    steps_completed: int
    metric: float


@dataclass(frozen=True)
class TrialExited:
    event_id: str
    trial_id: int
    failed: bool


Event = TrialCreated | ValidationReported | TrialExited


@dataclass
class SearcherBase:
    """Bookkeeping shared by all searchers: seen events, trial ids and their outcome."""

    seen_events: list[str] = field(default_factory=list)
    trials: dict[str, int] = field(default_factory=dict)  # request_id -> trial_id
    exited: dict[int, bool] = field(default_factory=dict)  # trial_id -> failed
    shut_down: bool = False

    def _first_time(self, event_id: str) -> bool:
        if event_id in self.seen_events:
            return False
        self.seen_events.append(event_id)
        return True


class Searcher(Protocol):
    name: str

    def initial_operations(self) -> list[Operation]: ...

    def on_event(self, event: Event) -> list[Operation]: ...

    def progress(self) -> float: ...

    def snapshot(self) -> dict[str, Any]: ...
