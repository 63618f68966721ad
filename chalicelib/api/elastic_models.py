"""The body of `PUT /trials/{id}/adaptdl/hints`: AdaptDL's scheduling hints as its rank 0 sends them
(`adaptdl.sched_hints.SCHED_HINTS`, camelCase as on the wire), plus the speedup table `stratus.launchers.adaptdl`
adds. The model documents the shape; `stratus.contract.adaptdl.validate_hints` is the one check of it."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from chalicelib.api.models import _Body

BatchSize = Annotated[int, Field(ge=1)]
#: Entries of a speedup table: one per replica count up to `elastic.max_replicas` (unbounded in the config).
MAX_SPEEDUP_ENTRIES = 1024


class AdaptdlHints(_Body):
    """Every key may be null or missing (AdaptDL sends null before it knows a value); no other key."""

    model_config = ConfigDict(extra="forbid", strict=True)

    initBatchSize: BatchSize | None = None
    localBszBounds: list[BatchSize | None] | None = Field(default=None, min_length=2, max_length=2)
    globalBatchSize: BatchSize | None = None
    maxBatchSize: BatchSize | None = None
    maxProfiledReplicas: Annotated[int, Field(ge=0)] | None = None
    gradientAccumulation: bool | None = None
    gradParams: dict[str, float] | None = Field(
        default=None, description="`norm` and `var` (adaptdl.goodput.GradParams); {} before AdaptDL has them"
    )
    perfParams: dict[str, float] | None = Field(
        default=None, description="the 7 fields of adaptdl.goodput.PerfParams (alpha_c ... gamma)"
    )
    speedup: dict[str, float] | None = Field(
        default=None,
        max_length=MAX_SPEEDUP_ENTRIES,
        description="{replicas: estimated speedup over 1 replica}, from adaptdl.goodput (stratus.launchers.adaptdl)",
    )
