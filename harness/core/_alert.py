"""Determined's `core_context.alert(title=, description=, level=)`: a workload alert, sent to webhooks
there. Stratus has no webhooks: the alert becomes one line of the trial's output (so `det trial logs`
shows it, whatever logging the script configured) and a record of the `harness.alert` logger."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

log = logging.getLogger("harness.alert")

#: Determined's level names -> logging levels.
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


def alert(
    title: str | None = None,
    description: str | None = None,
    level: str | None = "info",
    *,
    out: TextIO | None = None,
) -> str:
    """Say the alert on ``out`` (stderr by default) and to the logger; the line said."""
    name = level or "info"
    if name not in LEVELS:
        raise ValueError(f"alert level {level!r} is not one of {', '.join(LEVELS)}; use one of them.")
    line = f"[alert] {name.upper()}: {title or ''}" + (f": {description}" if description else "")
    print(line, file=out or sys.stderr, flush=True)
    log.log(LEVELS[name], "%s", line)
    return line
