"""The searcher interface: a pure state machine, events in and operations out.

A searcher never touches AWS. The service feeds it one event at a time, persists `snapshot()` with a
conditional write, and carries out the operations it returned. Every event carries an id, and a
searcher remembers the ids it has seen, so a duplicate delivery (SQS delivers at least once) returns
no operations and changes nothing.

Lengths are in searcher units: batches, or the values of `time_metric` for adaptive_asha's
`time_metric`/`max_time` form. A trial trains until its target length, reports a validation there
(`ValidationReported` with the searcher metric), and then follows the searcher's next operation for it:

- `ContinueTrial(trial, length)`: train on to a longer target (resuming it first if it was paused);
- `PauseTrial(trial)`: checkpoint and exit; it may be continued later (ASHA's promotions);
- `StopTrial(trial)`: checkpoint and exit for good (early stopping, or the target was the last one);
- nothing: the trial's target stands (it has not reached it yet).

A `CreateTrial` may name a `warm_start_trial_id`: the new trial starts from that trial's latest
checkpoint (its weights; it counts its own batches from 0, as Determined's warm start does). A searcher
that is a `PauseObserver` is also told when a trial has finished pausing (`on_trial_paused`: its
checkpoint is stored); the others never see that event.

A trial that reaches its last target and gets no operation is treated as stopped by the service.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, runtime_checkable

from chalicelib.errors import BadRequestError


class TrialRecord:
    """JSON for a searcher's per-trial dataclass in its snapshot; keys a dataclass no longer has (an older
    snapshot) are ignored on the way back."""

    #: The searcher's id of the create request the record is for (each dataclass declares the field).
    request_id: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def by_request(cls, snapshot: Mapping[str, Any]) -> dict[str, Self]:
        """The records of a snapshot's ``requests`` list, by request id: how the searchers that look
        their trials up by request (ASHA, Hyperband, PBT) hold them."""
        records = (cls.from_json(data) for data in snapshot.get("requests", []))
        return {record.request_id: record for record in records}


DEFAULT_MAX_CONCURRENT_TRIALS = 16


class SearcherSettingsError(BadRequestError, ValueError):
    """The searcher settings are valid config but the searcher cannot run with them; the message says
    the fix (the API answers it as a config problem)."""


def settings_int(settings: Mapping[str, Any], key: str, default: int) -> int:
    """The whole-number searcher setting `key`, or `default` when it is absent (or null)."""
    value = settings.get(key)
    return default if value is None else int(value)


@dataclass(frozen=True)
class SearchSpec:
    """What a searcher is built from: plain data taken from the experiment config."""

    space: Mapping[str, Any]  # the `hyperparameters` section in its JSON form
    settings: Mapping[str, Any]  # the `searcher` section in its JSON form (name, metric, max_trials, ...)
    max_length: int | None  # the searcher's max length in searcher units (None: the trial decides)
    seed: int

    @property
    def metric(self) -> str:
        return str(self.settings.get("metric", ""))

    @property
    def smaller_is_better(self) -> bool:
        return bool(self.settings.get("smaller_is_better", True))


# ---- operations -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateTrial:
    request_id: str  # stable id chosen by the searcher, so creating twice is detectable
    hparams: dict[str, Any]
    length: int | None = None  # the first target; None lets the trial decide (single without max_length)
    warm_start_trial_id: int | None = None  # start from this trial's latest checkpoint (PBT)


@dataclass(frozen=True)
class ContinueTrial:
    trial_id: int
    length: int


@dataclass(frozen=True)
class PauseTrial:
    trial_id: int


@dataclass(frozen=True)
class StopTrial:
    trial_id: int


@dataclass(frozen=True)
class Shutdown:
    failure: bool = False  # True when the searcher gives up (every trial failed)


Operation = CreateTrial | ContinueTrial | PauseTrial | StopTrial | Shutdown


# ---- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrialCreated:
    event_id: str
    request_id: str
    trial_id: int


@dataclass(frozen=True)
class ValidationReported:
    event_id: str
    trial_id: int
    length: int  # where the trial stands, in searcher units
    metric: float  # the searcher metric (already finite)


@dataclass(frozen=True)
class TrialExited:
    """A trial ended for good (completed, errored past its restarts, or canceled)."""

    event_id: str
    trial_id: int
    failed: bool
    invalid_hp: bool = False  # the trial raised InvalidHP: Determined replaces it with a new one


@dataclass(frozen=True)
class TrialPaused:
    """A trial the searcher paused has checkpointed and exited (only for searchers that observe pauses)."""

    event_id: str
    trial_id: int


Event = TrialCreated | ValidationReported | TrialExited


class TrialOutcome(Protocol):
    """A searcher's per-trial record, as far as its trial's id and how it ended."""

    trial_id: int | None
    failed: bool
    invalid_hp: bool


@dataclass
class SearcherBase:
    """Bookkeeping shared by all searchers (seen events, trial ids and their outcome) and the first steps
    of `on_event`; a searcher says how it finds a request's record and what a trial's event does."""

    seen_events: list[str] = field(default_factory=list)
    trials: dict[str, int] = field(default_factory=dict)  # request_id -> trial_id
    exited: dict[int, bool] = field(default_factory=dict)  # trial_id -> failed
    shut_down: bool = False
    name: str = "searcher"

    def on_event(self, event: Event) -> list[Operation]:
        """What every searcher does first with an event: a duplicate changes nothing, and a creation is
        noted on its request's record (`_record_of`); a trial's validation or exit goes on to
        `_on_trial_event`."""
        if not self._first_time(event.event_id):
            return []
        if isinstance(event, TrialCreated):
            self._record_created(self._record_of(event.request_id), event)
            return []
        return self._on_trial_event(event)

    def _record_of(self, request_id: str) -> TrialOutcome | None:
        """The searcher's record of the create request `request_id`, or None when it has none."""
        raise NotImplementedError

    def _on_trial_event(self, event: ValidationReported | TrialExited) -> list[Operation]:
        """The operations that a trial's (first seen) validation or exit calls for."""
        raise NotImplementedError

    def _events_kept(self) -> int | None:
        """How many of the latest event ids to remember for duplicates (a bounded snapshot); None: all."""
        return None

    def _first_time(self, event_id: str) -> bool:
        if event_id in self.seen_events:
            return False
        self.seen_events.append(event_id)
        kept = self._events_kept()
        if kept is not None:
            del self.seen_events[:-kept]
        return True

    def _record_created(self, record: TrialOutcome | None, event: TrialCreated) -> None:
        """Note the trial created for `record` (an unknown request or a repeated creation changes nothing)."""
        if record is not None and record.trial_id is None:
            record.trial_id = event.trial_id
            self.trials[event.request_id] = event.trial_id

    def _record_exit(self, record: TrialOutcome, event: TrialExited) -> None:
        """Note on `record` and in `exited` how its trial ended: an `invalid_hp` exit is not a failure."""
        record.failed = event.failed and not event.invalid_hp
        record.invalid_hp = event.invalid_hp
        self.exited[event.trial_id] = record.failed

    def _snapshot_bookkeeping(self) -> dict[str, Any]:
        """The part of `snapshot()` every searcher shares: its name and this bookkeeping."""
        return {
            "name": self.name,
            "seen_events": list(self.seen_events),
            "trials": dict(self.trials),
            "exited": {str(k): v for k, v in self.exited.items()},
            "shut_down": self.shut_down,
        }

    @staticmethod
    def _restore_bookkeeping(snapshot: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor arguments of that bookkeeping, read back from a snapshot."""
        return {
            "seen_events": list(snapshot.get("seen_events", [])),
            "trials": {str(k): int(v) for k, v in snapshot.get("trials", {}).items()},
            "exited": {int(k): bool(v) for k, v in snapshot.get("exited", {}).items()},
            "shut_down": bool(snapshot.get("shut_down", False)),
        }


class Searcher(Protocol):
    name: str

    def initial_operations(self) -> list[Operation]: ...

    def on_event(self, event: Event) -> list[Operation]: ...

    def progress(self, trained: Mapping[int, float] | None = None) -> float | None:
        """The share of the search done, 0 to 1: the units trained over the searcher's total where it has
        one (`trained`: trials' own shares of their lengths trained so far, beyond what their validations
        told the searcher), else its own measure (ASHA's, Hyperband's, PBT's); None when no end is
        known (a search until stopped, a single trial without a length that reports no progress)."""
        ...

    def snapshot(self) -> dict[str, Any]: ...


@runtime_checkable
class PauseObserver(Protocol):
    """A searcher that acts once a paused trial's checkpoint is stored (PBT: a round ends then)."""

    def on_trial_paused(self, event: TrialPaused) -> list[Operation]: ...
