"""What the control plane tells CloudWatch, as values: the data points of a trial's reports and of a
scheduling pass, in the stack's namespace (`Stratus/<stack>`). The sink (`chalicelib.aws.metrics`) writes
them as embedded metric format in the Lambda's log, or with `PutMetricData` on the local stack.

**Trial metrics** (dimensions `experiment`, `trial`; named `<group>.<name>`, e.g. `validation.loss`).
CloudWatch bills a custom metric (a name with one set of dimension values) for every hour it receives a
value: $0.30 a metric a month for the first 10,000, prorated by the hour, so about $0.0004 per metric
per trial-hour. A trial may report hundreds of names; every one would be a metric per trial. So the
cardinality is bounded: only the `training` and `validation` groups are charted (custom groups stay in
the API), only finite scalars, and of each report at most the searcher's metric plus the first
`MAX_NAMES_PER_GROUP` other names in sorted order. A trial reporting the same names each time (the
usual case) is at most 2 × (1 + 4) = 10 metrics: ≤ $0.004 per trial-hour. A trial whose names change
from report to report can exceed that; the bound per report still holds. Names CloudWatch's search
syntax cannot quote (quotes, control characters) are left out.

**Pool metrics** (dimension `pool`), one value each per scheduling pass (`PoolPass`): queue depth,
pending slots, slots used and idle, instances (live hosts), preemptions and silent runs (runs ended
because their agents stopped heartbeating: a trial without a heartbeat) in the pass, and the wait of
the oldest request the pass read (the alarm on a stuck queue); those two also without a dimension, for
the stack's alarms. Runs that fail count as `Restarts` (the workflow restarts them) or `Errors` (the
trial ends ERROR), when their exit is recorded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: The groups whose metrics are charted; custom groups (Determined's `report_metrics(group=...)`) are not.
CHARTED_GROUPS = ("training", "validation")
#: Names per report charted besides the searcher's metric (see the module docstring).
MAX_NAMES_PER_GROUP = 4
_CHARTABLE_NAME = re.compile(r"^[A-Za-z0-9_.\-/:#@+ ]{1,200}$")

#: The pool metrics' names (the template's alarms and dashboards name them too).
QUEUE_DEPTH = "QueueDepth"
PENDING_SLOTS = "PendingSlots"
SLOTS_USED = "SlotsUsed"
SLOTS_IDLE = "SlotsIdle"
INSTANCES = "Instances"
PREEMPTIONS = "Preemptions"
SILENT_RUNS = "SilentRuns"
OLDEST_WAIT = "OldestWaitSeconds"
RESTARTS = "Restarts"
ERRORS = "Errors"
POOL_METRICS = (
    QUEUE_DEPTH,
    PENDING_SLOTS,
    SLOTS_USED,
    SLOTS_IDLE,
    INSTANCES,
    PREEMPTIONS,
    SILENT_RUNS,
    OLDEST_WAIT,
    RESTARTS,
    ERRORS,
)


#: Pool metrics also put without a dimension (`pool_datums`).
STACK_WIDE = (OLDEST_WAIT, SILENT_RUNS)


def namespace(stack: str) -> str:
    """The stack's CloudWatch namespace."""
    return f"Stratus/{stack}"


@dataclass(frozen=True)
class Datum:
    """One value of one metric: its name, its dimensions (name, value) in order, and its unit."""

    name: str
    value: float
    dimensions: tuple[tuple[str, str], ...]
    unit: str = "None"


def trial_dimensions(experiment_id: int, trial_id: int) -> tuple[tuple[str, str], ...]:
    return (("experiment", str(experiment_id)), ("trial", str(trial_id)))


def metric_name(group: str, name: str) -> str:
    return f"{group}.{name}"


def charted(metrics: Mapping[str, object], searcher_metric: str | None) -> list[tuple[str, float]]:
    """The (name, value) pairs of one report that are charted: the searcher's metric first, then at most
    `MAX_NAMES_PER_GROUP` other finite scalars by name."""
    scalars: dict[str, float] = {}
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(float(value)) and _CHARTABLE_NAME.match(name):
            scalars[name] = float(value)
    chosen = [(searcher_metric, scalars[searcher_metric])] if searcher_metric in scalars else []
    others = sorted(name for name in scalars if name != searcher_metric)[:MAX_NAMES_PER_GROUP]
    return chosen + [(name, scalars[name]) for name in others]


def trial_datums(
    experiment_id: int,
    trial_id: int,
    reports: Sequence[tuple[str, Mapping[str, object]]],
    searcher_metric: str | None,
) -> list[Datum]:
    """The data points of a trial's reports, (group, metrics) in order (see the module docstring)."""
    dimensions = trial_dimensions(experiment_id, trial_id)
    return [
        Datum(metric_name(group, name), value, dimensions)
        for group, metrics in reports
        if group in CHARTED_GROUPS
        for name, value in charted(metrics, searcher_metric if group == "validation" else None)
    ]


@dataclass(frozen=True)
class PoolPass:
    """What a scheduling pass saw of its pool, as it knew it anyway (no extra read)."""

    pool: str
    queued: int
    pending_slots: int
    #: Slots of the accepting hosts, and those of them held by runs.
    capacity: int
    used: int
    hosts: int
    preempted: int = 0
    silent: int = 0
    #: Seconds the oldest request the pass read has waited (0: none read).
    oldest_wait_s: float = 0.0

    @property
    def idle(self) -> bool:
        """Nothing queued, held or alive: the pass of a pool at zero, which puts no metric (a metric that
        receives data bills its hour, so a pool charted every minute while at zero would cost about
        $3 a month for nothing; its graphs show a gap, and alarms treat missing data as not breaching)."""
        return not (
            self.queued or self.pending_slots or self.used or self.hosts or self.preempted or self.silent
        )


def pool_dimensions(pool: str) -> tuple[tuple[str, str], ...]:
    return (("pool", pool),)


def pool_datums(seen: PoolPass) -> list[Datum]:
    dimensions = pool_dimensions(seen.pool)
    values: list[tuple[str, float, str]] = [
        (QUEUE_DEPTH, seen.queued, "Count"),
        (PENDING_SLOTS, seen.pending_slots, "Count"),
        (SLOTS_USED, min(seen.used, seen.capacity), "Count"),
        (SLOTS_IDLE, max(0, seen.capacity - seen.used), "Count"),
        (INSTANCES, seen.hosts, "Count"),
        (PREEMPTIONS, seen.preempted, "Count"),
        (SILENT_RUNS, seen.silent, "Count"),
        (OLDEST_WAIT, max(0.0, seen.oldest_wait_s), "Seconds"),
    ]
    data = [Datum(name, float(value), dimensions, unit) for name, value, unit in values]
    # Also without a dimension, for the stack's alarms (the worst pool: the template needs no alarm per
    # pool, and a pool added later is watched too).
    return data + [Datum(d.name, d.value, (), d.unit) for d in data if d.name in STACK_WIDE]


def run_failure_datum(pool: str, *, restarted: bool) -> Datum:
    """A run that exited non-zero: a restart (restarts left) or the trial's error."""
    return Datum(RESTARTS if restarted else ERRORS, 1.0, pool_dimensions(pool), "Count")
