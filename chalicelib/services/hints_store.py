"""The port an elastic trial's records are stored through (`chalicelib.services.elastic`,
`chalicelib.services.elastic_scheduling`); `TrialStore` includes it, and both stores inherit its updates
from `chalicelib.domain.updates.TrialUpdates`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class HintsStore(Protocol):
    def record_hints(self, trial_id: int, hints: Mapping[str, Any], at: str) -> None:
        """Set the trial's `elastic_hints` to `hints` and its `hints_at` to `at` (ISO-8601); nothing when
        the trial is gone."""
        ...

    def record_rescale(self, trial_id: int, target: int, rescale: Mapping[str, Any]) -> None:
        """Set the trial's `elastic_target` (the replicas of its next run) and `elastic_rescale`."""
        ...

    def record_replicas(self, trial_id: int, runs: Mapping[str, Mapping[str, Any]]) -> None:
        """Set the trial's `elastic_runs` (each run's replicas as it was granted its slots), whole."""
        ...
