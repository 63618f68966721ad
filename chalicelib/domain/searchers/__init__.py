"""Searchers: pure state machines turning one experiment config into trials.

`SEARCHERS` maps a config's `searcher.name` to the class; each class has a constructor taking
`spec=SearchSpec(...)` and a `restore(snapshot, spec)` class method.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.domain.searchers.asha import AdaptiveASHASearcher
from chalicelib.domain.searchers.base import (
    ContinueTrial,
    CreateTrial,
    Event,
    Operation,
    PauseObserver,
    PauseTrial,
    Searcher,
    SearcherSettingsError,
    SearchSpec,
    Shutdown,
    StopTrial,
    TrialCreated,
    TrialExited,
    TrialPaused,
    ValidationReported,
)
from chalicelib.domain.searchers.grid import GridSearcher
from chalicelib.domain.searchers.pbt import PBTSearcher
from chalicelib.domain.searchers.random import RandomSearcher
from chalicelib.domain.searchers.single import SingleSearcher
from chalicelib.domain.searchers.tpe import TPESearcher
from chalicelib.errors import BadRequestError

__all__ = [
    "AdaptiveASHASearcher",
    "ContinueTrial",
    "CreateTrial",
    "Event",
    "GridSearcher",
    "Operation",
    "PBTSearcher",
    "PauseObserver",
    "PauseTrial",
    "RandomSearcher",
    "SEARCHERS",
    "SearchSpec",
    "Searcher",
    "SearcherNotSupportedError",
    "SearcherSettingsError",
    "Shutdown",
    "SingleSearcher",
    "StopTrial",
    "TPESearcher",
    "TrialCreated",
    "TrialExited",
    "TrialPaused",
    "ValidationReported",
    "new_searcher",
    "restore_searcher",
]

SEARCHERS: dict[str, Any] = {
    "single": SingleSearcher,
    "grid": GridSearcher,
    "random": RandomSearcher,
    "adaptive_asha": AdaptiveASHASearcher,
    "tpe": TPESearcher,
    "pbt": PBTSearcher,
}


class SearcherNotSupportedError(BadRequestError):
    code = "SearcherNotSupported"


def new_searcher(spec: SearchSpec) -> Searcher:
    name = str(spec.settings.get("name"))
    if name not in SEARCHERS:
        raise SearcherNotSupportedError(
            f"searcher {name!r} is accepted in configs but cannot run yet; use one of {', '.join(sorted(SEARCHERS))}"
        )
    try:
        searcher: Searcher = SEARCHERS[name](spec=spec)
    except SearcherSettingsError as error:  # settings it cannot run with (pbt without a round length)
        raise SearcherNotSupportedError(str(error)) from error
    return searcher


def restore_searcher(snapshot: Mapping[str, Any], spec: SearchSpec) -> Searcher:
    name = str(snapshot.get("name"))
    if name not in SEARCHERS:
        raise SearcherNotSupportedError(f"cannot restore searcher {name!r}")
    searcher: Searcher = SEARCHERS[name].restore(snapshot, spec)
    return searcher
