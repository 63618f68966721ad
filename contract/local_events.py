"""The local test mode's event log (`stratus.contract.env.LOCAL_EVENTS`): what the harness's local twins write and
`det experiment create --local --test-mode` reads back to check what the trial did.

One JSON object a line, appended: ``{"type": ..., "steps_completed": int, ...}`` with these types and
extra keys:

- ``training`` / ``validation``: ``metrics`` (the reported metrics, as JSON values);
- ``metrics``: ``group`` (a custom metric group, `stratus.contract.metric_groups`), ``metrics``;
- ``checkpoint``: ``uuid``, ``path`` (the local folder), ``metadata``;
- ``searcher_completed``: ``length``, ``unit``, ``metric`` (``steps_completed`` is the operation's length);
- ``invalid_hp``: ``message`` (``steps_completed`` is 0).

A writer appends each line whole, with one write, so that a reader never sees half a line and several
processes may share the file; `EventsReader` reads the lines as they come.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any


class LocalEventType(StrEnum):
    TRAINING = "training"
    VALIDATION = "validation"
    METRICS = "metrics"
    CHECKPOINT = "checkpoint"
    SEARCHER_COMPLETED = "searcher_completed"
    INVALID_HP = "invalid_hp"


def encode(kind: LocalEventType | str, steps_completed: int, **fields: Any) -> bytes:
    """One event's line, newline included; ValueError for a type that is not one of `LocalEventType`."""
    try:
        kind = LocalEventType(kind)
    except ValueError:
        known = ", ".join(t.value for t in LocalEventType)
        raise ValueError(f"unknown local event type {kind!r}; use one of {known}.") from None
    line = json.dumps({"type": kind.value, "steps_completed": steps_completed, **fields}, sort_keys=True)
    return (line + "\n").encode()


class EventsReader:
    """The events appended to ``path`` since the last `read`: whole lines only, until ``final`` (the
    writer is gone), when a last line without its newline counts too. A line that is not a JSON object
    (torn, or foreign) is skipped; a file not there yet has no events."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._partial = b""

    def read(self, *, final: bool = False) -> list[dict[str, Any]]:
        try:
            with self._path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = b"" if final else lines.pop()
        events: list[dict[str, Any]] = []
        for raw in lines:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
        return events


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every event written to ``path`` so far."""
    return EventsReader(path).read(final=True)
