"""The body of `POST /trials/{id}/reports`: a trial's metrics and progress reports, batched by the
harness's report sender (`stratus.harness.core._reports`), each shaped as its own route takes it plus a `kind`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from chalicelib.api.models import MetricReport, ProgressReport, _Body


class MetricsItem(MetricReport):
    kind: Literal["metrics"]


class ProgressItem(ProgressReport):
    kind: Literal["progress"]


#: Reports in one `POST /trials/{id}/reports` (the harness's sender sends at most 500).
MAX_REPORTS = 1_000


class ReportBatch(_Body):
    """Metrics and progress reports in the order the trial made them."""

    reports: list[Annotated[MetricsItem | ProgressItem, Field(discriminator="kind")]] = Field(
        min_length=1, max_length=MAX_REPORTS
    )
