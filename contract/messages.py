"""The queue messages: their types, their fields, and one parser.

Three queues, each read by one event handler (`chalicelib/handlers/events.py`):

- scheduler (FIFO, grouped by pool): `RequestSlots` (a run's task token asking for slots, sent by the
  state machine), `ReleaseSlots` (a run ended; the state machine), `CapacityChanged` (an agent appeared
  or changed; the heartbeat) and `Sweep` (a timer: EventBridge in AWS, the local stack's ticker);
- launch: `Launch` (the state machine hands a granted run to its agent, with its task token);
- events (the searcher's): `TrialExited` and `TrialPaused` (the state machine, or the control plane when
  it closes a paused trial) and `ValidationReported` (a trial reported its searcher metric), and
  `DeleteExperiment` (`det experiment delete` going on with what its request could not finish), and
  `SearcherWork` (an experiment's searcher has work left that a request could not finish: carry it on).

A body is a JSON object with ``"type"`` and the fields of its class; extra keys are ignored. `parse`
(and the per-queue `parse_scheduler`, `parse_launch`, `parse_event`) raise `InvalidMessageError` for an
unknown type, a missing field or a field of the wrong kind: such a message can never succeed, so the
handlers log it and drop it rather than let it be retried into the dead-letter queue.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from stratus.contract.errors import InvalidMessageError


class MessageType(StrEnum):
    REQUEST = "request"
    RELEASE = "release"
    CAPACITY = "capacity"
    SWEEP = "sweep"
    LAUNCH = "launch"
    TRIAL_EXITED = "trial_exited"
    TRIAL_PAUSED = "trial_paused"
    VALIDATION = "validation"
    DELETE_EXPERIMENT = "delete_experiment"
    COMPUTE_EVENT = "compute_event"
    SEARCHER_WORK = "searcher_work"


@dataclass(frozen=True)
class _Message:
    TYPE: ClassVar[MessageType]

    def to_body(self) -> dict[str, Any]:
        """The JSON object sent on the queue (optional fields only when set)."""
        body: dict[str, Any] = {"type": self.TYPE.value}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                body[f.name] = value
        return body


# --- scheduler queue ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestSlots(_Message):
    TYPE: ClassVar[MessageType] = MessageType.REQUEST
    #: The state machine's task token, answered when the slots are granted.
    token: str
    run_id: str
    trial_id: int
    experiment_id: int
    pool: str
    slots: int
    priority: int


@dataclass(frozen=True)
class ReleaseSlots(_Message):
    TYPE: ClassVar[MessageType] = MessageType.RELEASE
    run_id: str
    pool: str


@dataclass(frozen=True)
class CapacityChanged(_Message):
    TYPE: ClassVar[MessageType] = MessageType.CAPACITY
    pool: str


@dataclass(frozen=True)
class Sweep(_Message):
    """The scheduler's timer: look at `pool`'s queue, or at every pool and the stack's sweeps (`EVERY_POOL`)."""

    TYPE: ClassVar[MessageType] = MessageType.SWEEP
    pool: str
    #: When the timer fired (EventBridge's); informative only.
    at: str | None = None


#: A `Sweep` of every pool, and of the stack's own checks (lost agents, watched experiments).
EVERY_POOL = "*"


# --- launch queue ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch(_Message):
    TYPE: ClassVar[MessageType] = MessageType.LAUNCH
    #: The state machine's task token, answered when the run exits.
    token: str
    run_id: str
    trial_id: int
    experiment_id: int
    agent_id: str


# --- events queue ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrialExited(_Message):
    TYPE: ClassVar[MessageType] = MessageType.TRIAL_EXITED
    #: Unique per event: the searcher ignores one it has seen (a redelivery).
    event_id: str
    trial_id: int
    experiment_id: int
    #: The trial's state after the exit (COMPLETED, ERROR, ...).
    state: str


@dataclass(frozen=True)
class TrialPaused(_Message):
    TYPE: ClassVar[MessageType] = MessageType.TRIAL_PAUSED
    event_id: str
    trial_id: int
    experiment_id: int
    state: str


@dataclass(frozen=True)
class ValidationReported(_Message):
    TYPE: ClassVar[MessageType] = MessageType.VALIDATION
    event_id: str
    experiment_id: int
    trial_id: int
    #: Where the trial stands, in the searcher's unit.
    length: int
    metric: float


@dataclass(frozen=True)
class DeleteExperiment(_Message):
    """`det experiment delete` goes on with an experiment in DELETING that one request could not finish."""

    TYPE: ClassVar[MessageType] = MessageType.DELETE_EXPERIMENT
    experiment_id: int


@dataclass(frozen=True)
class SearcherWork(_Message):
    """An experiment's searcher has work left (its outbox, or its first operations) that the request or
    consumer that started it could not finish (it lost races too often, or failed): carry it on."""

    TYPE: ClassVar[MessageType] = MessageType.SEARCHER_WORK
    experiment_id: int


@dataclass(frozen=True)
class ComputeEvent(_Message):
    """An AWS event about the stack's compute (an EC2 spot interruption warning, a Batch or SageMaker job's
    state change), as the stack's EventBridge rules put it on the events queue: their input transformer
    wraps the whole event, `{"type": "compute_event", "event": <aws.events.event.json>}`."""

    TYPE: ClassVar[MessageType] = MessageType.COMPUTE_EVENT
    event: dict[str, Any]


SchedulerMessage = RequestSlots | ReleaseSlots | CapacityChanged | Sweep
TrialEvent = TrialExited | TrialPaused | ValidationReported
EventsQueueMessage = TrialEvent | DeleteExperiment | SearcherWork | ComputeEvent
Message = SchedulerMessage | Launch | EventsQueueMessage

MESSAGE_CLASSES: dict[MessageType, type[Message]] = {
    MessageType.REQUEST: RequestSlots,
    MessageType.RELEASE: ReleaseSlots,
    MessageType.CAPACITY: CapacityChanged,
    MessageType.SWEEP: Sweep,
    MessageType.LAUNCH: Launch,
    MessageType.TRIAL_EXITED: TrialExited,
    MessageType.TRIAL_PAUSED: TrialPaused,
    MessageType.VALIDATION: ValidationReported,
    MessageType.DELETE_EXPERIMENT: DeleteExperiment,
    MessageType.SEARCHER_WORK: SearcherWork,
    MessageType.COMPUTE_EVENT: ComputeEvent,
}
SCHEDULER_TYPES = frozenset(
    {MessageType.REQUEST, MessageType.RELEASE, MessageType.CAPACITY, MessageType.SWEEP}
)
LAUNCH_TYPES = frozenset({MessageType.LAUNCH})
EVENT_TYPES = frozenset(
    {
        MessageType.TRIAL_EXITED,
        MessageType.TRIAL_PAUSED,
        MessageType.VALIDATION,
        MessageType.DELETE_EXPERIMENT,
        MessageType.SEARCHER_WORK,
        MessageType.COMPUTE_EVENT,
    }
)


def parse(body: str | bytes | Mapping[str, Any], expected: frozenset[MessageType] | None = None) -> Message:
    """The message of a queue body (its JSON text, or the decoded object). ``expected``: the types the
    reading queue carries; any other is refused."""
    data = _decode(body)
    raw_type = data.get("type")
    try:
        kind = MessageType(str(raw_type))
    except ValueError:
        known = ", ".join(sorted(t.value for t in (expected or MessageType)))
        raise InvalidMessageError(
            f"unknown message type {raw_type!r}; this queue carries {known} (docs/contracts.md)"
        ) from None
    if expected is not None and kind not in expected:
        known = ", ".join(sorted(t.value for t in expected))
        raise InvalidMessageError(
            f"a {kind.value!r} message does not belong on this queue, which carries {known}; "
            "check the sender's queue URL"
        )
    cls = MESSAGE_CLASSES[kind]
    values = {f.name: _field(kind, data, f) for f in dataclasses.fields(cls)}
    return cls(**values)


def parse_scheduler(body: str | bytes | Mapping[str, Any]) -> SchedulerMessage:
    message = parse(body, SCHEDULER_TYPES)
    assert isinstance(message, RequestSlots | ReleaseSlots | CapacityChanged | Sweep)
    return message


def parse_launch(body: str | bytes | Mapping[str, Any]) -> Launch:
    message = parse(body, LAUNCH_TYPES)
    assert isinstance(message, Launch)
    return message


def parse_event(body: str | bytes | Mapping[str, Any]) -> TrialEvent:
    """A trial event (the searcher's); a `DeleteExperiment` of the same queue is refused here."""
    others = {MessageType.DELETE_EXPERIMENT, MessageType.SEARCHER_WORK, MessageType.COMPUTE_EVENT}
    message = parse(body, EVENT_TYPES - others)
    assert isinstance(message, TrialExited | TrialPaused | ValidationReported)
    return message


def parse_events_queue(body: str | bytes | Mapping[str, Any]) -> EventsQueueMessage:
    """Any message of the events queue: a trial event, a `DeleteExperiment`, a `SearcherWork` or a
    `ComputeEvent`."""
    message = parse(body, EVENT_TYPES)
    assert isinstance(
        message,
        TrialExited | TrialPaused | ValidationReported | DeleteExperiment | SearcherWork | ComputeEvent,
    )
    return message


def _decode(body: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(body, str | bytes):
        try:
            decoded = json.loads(body)
        except ValueError as e:
            raise InvalidMessageError(f"a queue message is not JSON ({e}): {body[:200]!r}") from e
    else:
        decoded = body
    if not isinstance(decoded, Mapping):
        raise InvalidMessageError(
            f"a queue message is a JSON object with a 'type', not {type(decoded).__name__}: {str(decoded)[:200]}"
        )
    return decoded


def _field(kind: MessageType, data: Mapping[str, Any], f: dataclasses.Field[Any]) -> Any:
    value = data.get(f.name)
    optional = f.default is not dataclasses.MISSING
    if value is None:
        if optional:
            return f.default
        raise InvalidMessageError(f"a {kind.value!r} message needs {f.name!r}; got keys {sorted(data)}")
    base = str(f.type).removesuffix(" | None")
    convert, what = _CONVERTERS[base]
    try:
        return convert(value)
    except (TypeError, ValueError):
        raise InvalidMessageError(
            f"{f.name!r} of a {kind.value!r} message is {value!r}, not {what}"
        ) from None


def _to_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(value)
    return int(value)


def _to_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(value)
    return float(value)


def _to_str(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(value)
    return str(value)


def _to_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(value)
    return dict(value)


#: A field's annotation -> how to read it, and what it must be.
_CONVERTERS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "int": (_to_int, "a whole number"),
    "float": (_to_float, "a number"),
    "str": (_to_str, "a string"),
    "dict[str, Any]": (_to_object, "a JSON object"),
}
