"""`det trial describe`'s section for an elastic trial (an experiment with an `elastic` section, such as an
NNI `adl` config): its replica range, its runs' replicas over time with the reason for each size, a rescale
under way, and the latest AdaptDL hints the API holds (`trial.elastic`: how old they are, the replicas
AdaptDL profiled, its batch sizes and the speedup table `stratus.launchers.adaptdl` adds).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from det._render import csv_table, format_time, format_value, table

Json = dict[str, Any]

NO_HINTS = "Latest hints: none yet (AdaptDL's rank 0 sends them after 30 s of training at one size)"


def elastic_config(config: Json) -> Json | None:
    """The experiment config's `elastic` section; None for a fixed-size experiment."""
    elastic = config.get("elastic")
    return elastic if isinstance(elastic, dict) else None


def elastic_section(trial: Json, elastic: Json, *, now: float, as_csv: bool = False) -> str:
    """The replica range, the latest hints' summary line and, where the hints have one, the speedup table."""
    lines = [_range(elastic)]
    stored = trial.get("elastic") or {}
    runs: Json = stored.get("runs") or {}
    if runs:
        rows = [
            [run_id, format_time(entry.get("at")), entry.get("replicas"), entry.get("reason")]
            for run_id, entry in sorted(runs.items(), key=lambda item: _attempt(item[0]))
        ]
        headers = ["Run", "Granted", "Replicas", "Reason"]
        lines.append("Replicas over time:")
        lines.append(csv_table(headers, rows) if as_csv else table(headers, rows))
    if rescaling(trial):
        rescale = stored["rescale"]
        lines.append(
            f"Rescaling: run {rescale.get('run')} stopped to restart at {rescale.get('target')} "
            f"replicas ({rescale.get('reason')})"
        )
    hints: Json = stored.get("hints") or {}
    if not hints:
        return "\n".join([*lines, NO_HINTS])
    lines.append(f"Latest hints: {_age(stored.get('hints_at'), now)}; {_summary(hints)}")
    speedup = hints.get("speedup")
    if isinstance(speedup, dict) and speedup:
        rows = sorted(
            ([int(r), factor] for r, factor in speedup.items() if str(r).isdigit()), key=lambda row: row[0]
        )
        headers = ["Replicas", "Speedup"]
        lines.append("Speedup (adaptdl.goodput, over 1 replica):")
        lines.append(csv_table(headers, rows) if as_csv else table(headers, rows))
    return "\n".join(lines)


def rescaling(trial: Mapping[str, Any]) -> bool:
    """Whether the trial's latest run was stopped for a rescale whose next run has not got its slots yet
    (NNI shows such a trial RUNNING: AdaptDL restarts it)."""
    stored = trial.get("elastic") or {}
    rescale = stored.get("rescale") or {}
    runs = stored.get("runs") or {}
    if not rescale or not runs:
        return False
    latest = max(runs, key=_attempt)
    return bool(rescale.get("run") == latest and str(trial.get("state")) in ("QUEUED", "PULLING", "RUNNING"))


def _attempt(run_id: str) -> int:
    tail = str(run_id).rpartition(".")[2]
    return int(tail) if tail.isdigit() else 0


def _range(elastic: Json) -> str:
    low, high = elastic.get("min_replicas", 1), elastic.get("max_replicas")
    per = elastic.get("slots_per_replica", 1)
    span = f"{low} to {high} replicas" if high is not None else f"{low} to as many replicas as the pool holds"
    return f"Elastic (AdaptDL): {span}, {per} slot{'s' if per != 1 else ''} each"


def _summary(hints: Json) -> str:
    parts = []
    profiled = hints.get("maxProfiledReplicas")
    if profiled is not None:
        parts.append(f"profiled up to {profiled} replica{'s' if profiled != 1 else ''}")
    batch = hints.get("initBatchSize")
    if batch is not None:
        local = hints.get("localBszBounds") or [None, None]
        bounds = "-".join(format_value(b) or "?" for b in local)
        maximum = hints.get("maxBatchSize")
        extra = [f"local {bounds}"] if any(b is not None for b in local) else []
        extra += [f"max {maximum}"] if maximum is not None else []
        parts.append(f"batch size {batch}" + (f" ({', '.join(extra)})" if extra else ""))
    if hints.get("perfParams") is None:
        parts.append("no goodput model yet")
    return "; ".join(parts) or "no values yet"


def _age(at: str | None, now: float) -> str:
    """`3 min ago (2024-05-01 12:00:00)`; the time alone where it cannot be read."""
    if not at:
        return "at an unknown time"
    try:
        moment = datetime.fromisoformat(at)
    except ValueError:
        return str(at)
    if moment.tzinfo is None:  # naive means UTC, as everywhere in the API
        moment = moment.replace(tzinfo=UTC)
    seconds = max(now - moment.timestamp(), 0.0)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size:.0f} {unit} ago ({format_time(at)})"
    return f"{seconds:.0f} s ago ({format_time(at)})"
