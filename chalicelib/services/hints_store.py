"""The port an elastic trial's hints are stored through (`chalicelib.services.elastic`); `TrialStore`
includes it, and both stores inherit its one update from `chalicelib.domain.updates.TrialUpdates`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class HintsStore(Protocol):
    def record_hints(self, trial_id: int, hints: Mapping[str, Any], at: str) -> None:
        """Set the trial's `elastic_hints` to `hints` and its `hints_at` to `at` (ISO-8601); nothing when
        the trial is gone."""
        ...
