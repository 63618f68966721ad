"""The cost tables of `det experiment describe` and `det trial describe`: each trial's compute time by
instance type and lifecycle, what it cost at the stack's prices, and its waste (time on an instance not
spent training: startup, work lost after a preemption or a lost agent, idle after the last checkpoint),
with a total. Times are instance time (a run's share of its instance: its slots over the instance's)
as H:MM:SS; cost in USD, "unknown" for an instance type without a price."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from det._render import csv_table, table

Json = Mapping[str, Any]

HEADERS = (
    "Trial ID",
    "Instance Type",
    "Lifecycle",
    "GPUs",
    "Runs",
    "Compute",
    "Training",
    "Startup",
    "Lost",
    "Idle",
    "Waste",
    "Cost (USD)",
)


def duration(seconds: float | None) -> str | None:
    """Seconds as H:MM:SS (`det`'s durations), rounded to the second."""
    if seconds is None:
        return None
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def usd(line: Json) -> float | str:
    return round(float(line["usd"]), 4) if line.get("priced", True) else "unknown"


def _row(trial_id: Any, line: Json) -> list[Any]:
    waste = line.get("waste") or {}
    startup, lost, idle = (float(waste.get(k) or 0.0) for k in ("startup_s", "lost_s", "idle_s"))
    return [
        trial_id,
        line["instance_type"],
        line.get("lifecycle"),
        line.get("gpus"),
        line.get("runs"),
        duration(line.get("instance_s")),
        duration(line.get("training_s")),
        duration(startup),
        duration(lost),
        duration(idle),
        duration(startup + lost + idle),
        usd(line),
    ]


def cost_rows(trials: Sequence[Json], totals: Sequence[tuple[str, Json]]) -> list[list[Any]]:
    """A row per trial and instance type, then each total under its label (in the Trial ID column)."""
    rows = []
    for trial in trials:
        cost = trial.get("cost") or {}
        for line in cost.get("by_instance") or []:
            rows.append(_row(trial["id"], line))
    rows.extend(_row(label, {**total, "instance_type": "", "lifecycle": None}) for label, total in totals)
    return rows


def experiment_totals(answers: Sequence[Json]) -> list[tuple[str, Json]]:
    """The total of each described experiment (`GET /experiments/{id}`'s `cost`), labelled."""
    found = [(a["experiment"]["id"], (a.get("cost") or {}).get("total")) for a in answers]
    return [("total" if len(found) == 1 else f"total {i}", t) for i, t in found if t is not None]


def trial_totals(trial: Json) -> list[tuple[str, Json]]:
    total = (trial.get("cost") or {}).get("total")
    return [("total", total)] if total is not None else []


def cost_table(trials: Sequence[Json], totals: Sequence[tuple[str, Json]], *, as_csv: bool = False) -> str:
    """Each trial's usage, then the totals (an experiment's, or the one trial's)."""
    rows = cost_rows(trials, totals)
    if not rows:
        return "No compute time recorded yet: a run's usage is recorded when it ends."
    return csv_table(HEADERS, rows) if as_csv else table(HEADERS, rows)
