"""The port to CloudWatch (metrics out, and the dashboards that draw them): `chalicelib.aws.metrics`
writes embedded metric format in AWS and calls `PutMetricData` on the local stack;
`chalicelib.memory` keeps what it is given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from chalicelib.domain.telemetry import Datum


class MetricsSink(Protocol):
    def put(self, data: Sequence[Datum], at: float) -> None:
        """Record the data points at `at` (epoch s), in the stack's namespace. Best effort: a metric
        that cannot be written is logged, never the caller's failure."""
        ...

    def put_dashboard(self, name: str, body: Mapping[str, Any]) -> None:
        """Create or replace the dashboard `name` (the stack's prefix) with the body."""
        ...

    def delete_dashboard(self, name: str) -> None:
        """Delete the dashboard `name` (the stack's prefix); none of that name is no error."""
        ...
