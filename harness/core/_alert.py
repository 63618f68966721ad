"""Determined's `core_context.alert(title=, description=, level=)`: a workload alert, sent to webhooks
there. Stratus has no webhooks: the alert becomes one line of the trial's output, so `det trial logs`
shows it whatever logging the script configured (a logger record as well would show it twice wherever
the script logs at that level)."""

from __future__ import annotations

import sys
from typing import TextIO

#: Determined's level names.
LEVELS = ("debug", "info", "warn", "error")


def alert(
    title: str | None = None,
    description: str | None = None,
    level: str | None = "info",
    *,
    out: TextIO | None = None,
) -> str:
    """Say the alert on ``out`` (stderr by default); the line said."""
    name = level or "info"
    if name not in LEVELS:
        raise ValueError(f"alert level {level!r} is not one of {', '.join(LEVELS)}; use one of them.")
    line = f"[alert] {name.upper()}: {title or ''}" + (f": {description}" if description else "")
    print(line, file=out or sys.stderr, flush=True)
    return line
