"""Searchers: pure state machines turning one experiment config into trials."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.domain.searchers.base import (
    CreateTrial,
    Event,
    Operation,
    Searcher,
    Shutdown,
    StopTrial,
    TrialCreated,
    TrialExited,
    ValidationReported,
)
from chalicelib.domain.searchers.single import SingleSearcher

__all__ = [
    "CreateTrial",
    "Event",
    "Operation",
    "Searcher",
    "SearcherNotSupportedError",
    "Shutdown",
    "SingleSearcher",
    "StopTrial",
    "TrialCreated",
    "TrialExited",
    "ValidationReported",
    "new_searcher",
    "restore_searcher",
]

RUNNABLE = ("single",)


class SearcherNotSupportedError(ValueError):
    pass


def new_searcher(name: str, space: Mapping[str, Any], seed: int) -> Searcher:
    if name == "single":
        return SingleSearcher(space=space, seed=seed)
    raise SearcherNotSupportedError(
        f"searcher {name!r} is accepted in configs but cannot run yet; use searcher.name: single"
    )


def restore_searcher(snapshot: Mapping[str, Any], space: Mapping[str, Any]) -> Searcher:
    if snapshot.get("name") == "single":
        return SingleSearcher.restore(snapshot, space)
    raise SearcherNotSupportedError(f"cannot restore searcher {snapshot.get('name')!r}")
