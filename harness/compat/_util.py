"""What `determined.common.util` gives trial code: the metric group names and small pure helpers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

from stratus.contract.metric_groups import TRAINING, VALIDATION

#: Determined's names of the two built-in metric groups, and of the inference group.
_LEGACY_TRAINING = TRAINING
_LEGACY_VALIDATION = VALIDATION
_INFERENCE = "inference"

T = TypeVar("T")


def chunks(items: Sequence[T], chunk_size: int) -> Iterator[Sequence[T]]:
    """``items`` cut into pieces of ``chunk_size`` (the last may be shorter)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size {chunk_size} must be >= 1.")
    for start in range(0, len(items), chunk_size):
        yield items[start : start + chunk_size]


def sizeof_fmt(val: float) -> str:
    """A byte count for people: ``1.5KB``, ``3.0MB``, ..."""
    value = float(val)
    for unit in ("", "K", "M", "G", "T", "P", "E", "Z"):
        if abs(value) < 1024.0:
            return f"{value:3.1f}{unit}B"
        value /= 1024.0
    return f"{value:.1f}YB"


def strtobool(val: str) -> bool:
    """``y/yes/t/true/on/1`` -> True, ``n/no/f/false/off/0`` -> False (any case); anything else is refused."""
    text = val.lower()
    if text in ("y", "yes", "t", "true", "on", "1"):
        return True
    if text in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(f"{val!r} is not a truth value; use yes/no, true/false, on/off or 1/0.")
