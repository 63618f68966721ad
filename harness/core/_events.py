"""The local twins' event log (`STRATUS_LOCAL_EVENTS`): one JSON line per event, appended.

`det experiment create --local --test-mode` reads it back to check what the trial did. Every line is
`{"type": ..., "steps_completed": int, ...}` with these types and extra keys:

- `training` / `validation`: `metrics` (the reported metrics, as JSON values);
- `checkpoint`: `uuid`, `path` (the local folder), `metadata`;
- `searcher_completed`: `length`, `unit`, `metric` (`steps_completed` is the operation's length);
- `invalid_hp`: `message` (`steps_completed` is 0).

Lines are written whole with one `write` on a file opened for appending, then flushed, so a reader
never sees half a line and several processes may share the file.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

EVENT_TYPES = ("training", "validation", "checkpoint", "searcher_completed", "invalid_hp")


class LocalEvents:
    """Appends events to `path`; with no path every call is a no-op."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()

    def emit(self, kind: str, steps_completed: int, **fields: Any) -> None:
        if self.path is None:
            return
        if kind not in EVENT_TYPES:
            raise ValueError(f"unknown local event type {kind!r}; use one of {', '.join(EVENT_TYPES)}.")
        line = json.dumps({"type": kind, "steps_completed": steps_completed, **fields}, sort_keys=True)
        data = (line + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events written so far (a helper for tests and the CLI's test mode)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
