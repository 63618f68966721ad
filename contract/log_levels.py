"""The level of a trial's log line, as Determined reads it, for ``det trial logs --level LEVEL``.

A line's level is the one it starts with (after a launcher's ``[rank=N] `` prefix): ``LEVEL:`` as
Determined's ``det.LOG_FORMAT`` and Python's default logging format write it (``INFO: [42] root: ...``,
``WARNING:root:...``), or ``<date> <time> LEVEL`` as a format that starts with ``%(asctime)s`` does
(``2024-05-01 12:00:00,123 ERROR [42] harness: ...``). A line with no level (a ``print``) is INFO, as
Determined records it. ``WARN`` reads as WARNING and ``FATAL`` as CRITICAL.

`LEVELS` is Determined's order; `at_or_above(level)` keeps a line of that level or a higher one.
"""

from __future__ import annotations

import re

LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_LEVEL = "INFO"
_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}

_NAMES = "TRACE|DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"
_LEVEL = re.compile(
    r"(?:\[rank=\d+\] ?)?"
    rf"(?:(?P<prefixed>{_NAMES}):"
    rf"|\d{{4}}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z? +(?P<stamped>{_NAMES})\b)"
)


def line_level(message: str) -> str:
    """The level of one log line (see the module docstring); INFO when it names none."""
    match = _LEVEL.match(message.lstrip())
    if match is None:
        return DEFAULT_LEVEL
    name = match.group("prefixed") or match.group("stamped")
    return _ALIASES.get(name, name)


def at_or_above(message: str, minimum: str) -> bool:
    """Whether the line's level is `minimum` (one of `LEVELS`) or higher."""
    return LEVELS.index(line_level(message)) >= LEVELS.index(minimum)
