"""CloudWatch metrics and dashboards in memory: every data point as it was put, and each dashboard's body."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chalicelib.domain.telemetry import Datum


class MemoryTelemetry:
    def __init__(self) -> None:
        #: (data point, epoch s) in the order put.
        self.data: list[tuple[Datum, float]] = []
        self.dashboards: dict[str, dict[str, Any]] = {}

    def put(self, data: Sequence[Datum], at: float) -> None:
        self.data.extend((datum, at) for datum in data)

    def put_dashboard(self, name: str, body: Mapping[str, Any]) -> None:
        self.dashboards[name] = dict(body)

    def delete_dashboard(self, name: str) -> None:
        self.dashboards.pop(name, None)

    def values(self, name: str, **dimensions: str) -> list[float]:
        """The values put of the metric `name` with exactly these dimensions, in order."""
        wanted = set(dimensions.items())
        return [d.value for d, _ in self.data if d.name == name and set(d.dimensions) == wanted]
