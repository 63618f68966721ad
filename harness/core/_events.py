"""The local twins' event log (`STRATUS_LOCAL_EVENTS`, its lines declared in `stratus.contract.local_events`):
`LocalEvents` appends one line per event, whole, with one `write` on a file opened for appending, so a
reader never sees half a line and several processes may share the file."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from stratus.contract.local_events import LocalEventType, encode, read_events

__all__ = ["LocalEventType", "LocalEvents", "read_events"]


class LocalEvents:
    """Appends events to `path`; with no path every call is a no-op."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()

    def emit(self, kind: LocalEventType | str, steps_completed: int, **fields: Any) -> None:
        if self.path is None:
            return
        data = encode(kind, steps_completed, **fields)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
