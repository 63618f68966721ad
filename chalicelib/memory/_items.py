"""What every in-memory table shares: values stored the way DynamoDB gives them back, and the
conditional transition of `chalicelib.aws.dynamo.transition_update` (state in the allowed sources, version
bumped, fields set and removed, or nothing changed and None)."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Hashable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

from chalicelib.domain.states import allowed_sources

Record = dict[str, Any]
K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=StrEnum)


def stored(value: Any) -> Any:
    """A value as DynamoDB returns it: integral numbers as ints, tuples as lists, map keys as strings."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value == int(value) else value
    if isinstance(value, Mapping):
        return {str(k): stored(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [stored(v) for v in value]
    return copy.deepcopy(value)


def as_json(value: Any) -> Any:
    """A value the adapters keep as a JSON string: it comes back as a fresh copy of the JSON value."""
    return json.loads(json.dumps(value, sort_keys=True))


def read(item: Record | None) -> Record | None:
    """A copy for the caller, so nothing it does changes the table (a read from DynamoDB is a copy too)."""
    return copy.deepcopy(item) if item is not None else None


def transition(
    items: dict[K, Record],
    key: K,
    table: dict[S, frozenset[S]],
    target: S,
    sets: Mapping[str, Any] | None = None,
    removes: tuple[str, ...] = (),
    also: Callable[[Record], bool] | None = None,
) -> Record | None:
    """Move `items[key]` to `target` if its state may enter it (and `also` holds); bump its version."""
    item = items.get(key)
    sources = {str(s) for s in allowed_sources(table, target)}
    if item is None or item.get("state") not in sources or (also is not None and not also(item)):
        return None
    item.update({field: stored(value) for field, value in (sets or {}).items()})
    item["state"] = str(target)
    item["version"] = int(item.get("version", 0)) + 1
    for field in removes:
        item.pop(field, None)
    return read(item)


def update_fields(items: dict[K, Record], key: K, sets: Mapping[str, Any]) -> Record | None:
    """Set fields on an existing record; None (nothing changed) when there is no such record."""
    item = items.get(key)
    if item is None:
        return None
    item.update({field: stored(value) for field, value in sets.items()})
    return read(item)
