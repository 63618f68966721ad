"""Metrics and dashboards in CloudWatch (the `MetricsSink` port).

**In Lambda: embedded metric format (EMF).** Each batch of data points is written to stdout as JSON
documents that CloudWatch Logs turns into metrics: no API call, no latency or failure in the request
path, no IAM. It costs the log bytes: $0.50 a GB ingested. A trial's report batch (every 30 s) charts
about 10 values in one ~700-byte document: 120 × 700 B ≈ 84 KB per trial-hour ≈ $0.00004. The same
batch through `PutMetricData` is one request at $0.01 per 1,000: $0.0012 per trial-hour, 30 times
more, and a scheduling pass (several a minute per pool) would add a request each. The metrics
themselves cost the same either way ($0.30 a metric-month, `chalicelib.domain.telemetry`).

**On the local stack: `PutMetricData`** to moto, in requests of at most 1,000 values (moto extracts no
metrics from logs), so the metrics exist there for `det experiment dashboard` and for tests.

EMF's limits (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html):
at most 100 metrics per document, 30 dimensions per dimension set, 100 values per metric.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.aws import clients
from chalicelib.domain.telemetry import Datum, namespace
from chalicelib.settings import Settings

log = logging.getLogger(__name__)

EMF_MAX_METRICS = 100
EMF_MAX_VALUES = 100
EMF_MAX_DIMENSIONS = 30
#: Values in one `PutMetricData` request.
PUT_MAX_VALUES = 1000


def emf_documents(space: str, data: Sequence[Datum], at: float) -> list[dict[str, Any]]:
    """The EMF documents of the data points: one per set of dimension values (EMF carries the values
    as the document's members), each with at most `EMF_MAX_METRICS` metrics of at most
    `EMF_MAX_VALUES` values each."""
    by_dimensions: dict[tuple[tuple[str, str], ...], dict[str, tuple[str, list[float]]]] = {}
    for datum in data:
        if len(datum.dimensions) > EMF_MAX_DIMENSIONS:
            raise ValueError(f"metric {datum.name} has {len(datum.dimensions)} dimensions; EMF allows 30")
        metrics = by_dimensions.setdefault(datum.dimensions, {})
        metrics.setdefault(datum.name, (datum.unit, []))[1].append(datum.value)
    documents: list[dict[str, Any]] = []
    for dimensions, metrics in by_dimensions.items():
        # Each (name, values) slice is one metric of a document; a name with more values than EMF allows
        # goes on in the next document.
        pieces = [
            (name, unit, values[i : i + EMF_MAX_VALUES])
            for name, (unit, values) in metrics.items()
            for i in range(0, len(values), EMF_MAX_VALUES)
        ]
        while pieces:
            document, pieces = _document(space, dimensions, pieces, at)
            documents.append(document)
    return documents


def _document(
    space: str,
    dimensions: tuple[tuple[str, str], ...],
    pieces: list[tuple[str, str, list[float]]],
    at: float,
) -> tuple[dict[str, Any], list[tuple[str, str, list[float]]]]:
    taken: dict[str, tuple[str, list[float]]] = {}
    rest = []
    for name, unit, values in pieces:
        if name in taken or len(taken) >= EMF_MAX_METRICS:
            rest.append((name, unit, values))  # a name appears once per document
        else:
            taken[name] = (unit, values)
    document: dict[str, Any] = {
        "_aws": {
            "Timestamp": int(at * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": space,
                    "Dimensions": [[key for key, _ in dimensions]],
                    "Metrics": [{"Name": name, "Unit": unit} for name, (unit, _) in taken.items()],
                }
            ],
        },
        **dict(dimensions),
    }
    for name, (_, values) in taken.items():
        document[name] = values[0] if len(values) == 1 else values
    return document, rest


def put_requests(space: str, data: Sequence[Datum], at: float) -> list[dict[str, Any]]:
    """The `PutMetricData` requests of the data points, at most `PUT_MAX_VALUES` each."""
    timestamp = datetime.fromtimestamp(at, UTC)
    items = [
        {
            "MetricName": d.name,
            "Dimensions": [{"Name": k, "Value": v} for k, v in d.dimensions],
            "Value": d.value,
            "Unit": d.unit,
            "Timestamp": timestamp,
        }
        for d in data
    ]
    return [
        {"Namespace": space, "MetricData": items[i : i + PUT_MAX_VALUES]}
        for i in range(0, len(items), PUT_MAX_VALUES)
    ]


class _Dashboards:
    def put_dashboard(self, name: str, body: Mapping[str, Any]) -> None:
        answer = clients.client("cloudwatch").put_dashboard(
            DashboardName=name, DashboardBody=json.dumps(body)
        )
        for problem in answer.get("DashboardValidationMessages") or []:
            log.warning("dashboard %s: %s", name, problem.get("Message"))

    def delete_dashboard(self, name: str) -> None:
        try:
            clients.client("cloudwatch").delete_dashboards(DashboardNames=[name])
        except ClientError as error:
            # DeleteDashboards refuses the whole request when a dashboard it names does not exist.
            if error.response.get("Error", {}).get("Code") != "ResourceNotFound":
                raise


class EmfMetrics(_Dashboards):
    """Metrics as embedded metric format documents on stdout (Lambda sends stdout to CloudWatch Logs)."""

    def __init__(self, stack: str, write: Callable[[str], object] | None = None) -> None:
        self._namespace = namespace(stack)
        self._write = write or _stdout

    def put(self, data: Sequence[Datum], at: float) -> None:
        for document in emf_documents(self._namespace, data, at):
            self._write(json.dumps(document, separators=(",", ":")))


class CloudWatchMetrics(_Dashboards):
    """Metrics through `PutMetricData` (the local stack: moto extracts nothing from logs)."""

    def __init__(self, stack: str) -> None:
        self._namespace = namespace(stack)

    def put(self, data: Sequence[Datum], at: float) -> None:
        try:
            for request in put_requests(self._namespace, data, at):
                clients.client("cloudwatch").put_metric_data(**request)
        except (BotoCoreError, ClientError) as error:
            log.warning("metrics not written to CloudWatch: %s", error)


def metrics_sink(settings: Settings) -> EmfMetrics | CloudWatchMetrics:
    """EMF in AWS; `PutMetricData` where an endpoint (the local stack's moto) stands in for AWS."""
    return CloudWatchMetrics(settings.stack) if settings.endpoint_url else EmfMetrics(settings.stack)


def _stdout(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
