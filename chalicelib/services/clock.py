"""Time as the control plane records it: ISO-8601 UTC with milliseconds, read from the system clock.

The services read time only through `Ports.clock`; this is the clock `aws_ports()` gives them (the
in-memory twin's clock is set by hand: `chalicelib.memory.MemoryClock`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def iso_utc(epoch: float) -> str:
    """Seconds since the epoch as the control plane writes times: `2026-01-01T00:00:00.000Z`."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch_of(iso: str) -> float:
    """The seconds since the epoch of a time the control plane wrote (`iso_utc`'s inverse)."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class SystemClock:
    def now(self) -> float:
        return time.time()

    def now_iso(self) -> str:
        return iso_utc(self.now())
