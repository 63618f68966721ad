"""What DynamoDB can store as a number, checked before a write instead of failing inside it.

DynamoDB numbers hold up to 38 significant digits with a magnitude between 1E-130 and 9.99E+125; boto3
refuses anything else with `decimal.Inexact`, `Overflow` or `Underflow`, which surfaced as a 500. The API
answers a 400 naming the field and the limit instead (`first_unstorable`), for ids, counts and every
number nested in a metrics map, a checkpoint's metadata or a config.

Integers sent by clients are also kept to 64 bits (`INT64_MAX`), what every client and language holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

INT64_MAX = 2**63 - 1
MAX_DIGITS = 38
MAX_MAGNITUDE = Decimal("9.9999999999999999999999999999999999999E+125")
MIN_MAGNITUDE = Decimal("1E-130")
LIMITS = "DynamoDB stores numbers of at most 38 digits, between 1E-130 and 9.99E+125 in magnitude"


def unstorable(value: float | int) -> str | None:
    """Why DynamoDB cannot store `value` (None: it can; NaN and infinities are the callers' to map)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if len(str(abs(value))) > MAX_DIGITS:
            return f"{_short(value)} has more than {MAX_DIGITS} digits; {LIMITS}"
        return None
    if not math.isfinite(value) or value == 0:
        return None
    magnitude = abs(Decimal(repr(value)))
    if magnitude > MAX_MAGNITUDE or magnitude < MIN_MAGNITUDE:
        return f"{value!r} is out of range; {LIMITS}"
    return None


def first_unstorable(value: Any, path: str = "") -> str | None:
    """The first number in `value` (nested mappings and lists) DynamoDB cannot store, as
    "path: why"; None when every number fits."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, int | float):
            why = unstorable(item)
            if why is not None:
                return f"{where or '(value)'}: {why}"
        elif isinstance(item, Mapping):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return None


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}…{text[-6:]} ({len(text.lstrip('-'))} digits)"
