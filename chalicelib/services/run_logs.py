"""A run's log lines, shipped by its agent: stored once per batch, only from the agent the run is
assigned to, and kept within what CloudWatch Logs accepts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from chalicelib.domain.records import LogLine
from chalicelib.errors import ForbiddenError, NotFoundError
from chalicelib.services.ports import Ports


def store_logs(
    ports: Ports,
    trial_id: int,
    run_id: str,
    seq: int | None,
    lines: Sequence[LogLine],
    *,
    agent_id: str | None = None,
) -> bool:
    """Store a batch of a run's log lines once; False when `seq` shows it is a retried batch. With
    `agent_id`, only from the agent the run (or node) is assigned to."""
    held = ports.runs.held(run_id)
    if held is None or held.trial_id != trial_id:
        raise NotFoundError(f"run {run_id} of trial {trial_id} not found")
    if agent_id is not None and held.agent_id != agent_id:
        raise ForbiddenError(f"run {run_id} is not assigned to agent {agent_id}; it cannot ship its logs")
    if seq is not None and held.log_seq >= seq:
        return False
    ports.logs.put(trial_id, in_log_window(lines, int(ports.clock.now() * 1000)))
    if seq is not None:
        ports.runs.record_log_batch(run_id, seq)
    return True


#: CloudWatch Logs takes events at most 14 days old and 2 hours ahead; it drops the others silently.
LOG_PAST_MS = 14 * 24 * 3600 * 1000 - 3600 * 1000  # an hour's margin for the batch's journey
LOG_FUTURE_MS = 2 * 3600 * 1000 - 5 * 60 * 1000


def in_log_window(lines: Sequence[LogLine], now_ms: int) -> list[LogLine]:
    """The lines, each stamped within what CloudWatch keeps: a line whose clock is off (a machine that
    lost its time, a replayed file) is kept at the time it arrived, with its own time in front of its
    text, instead of being lost."""
    kept: list[LogLine] = []
    for line in lines:
        if now_ms - LOG_PAST_MS <= line.timestamp <= now_ms + LOG_FUTURE_MS:
            kept.append(line)
            continue
        stamped = _iso_ms(line.timestamp)
        kept.append(replace(line, timestamp=now_ms, message=f"[its clock said {stamped}] {line.message}"))
    return kept


def _iso_ms(timestamp_ms: int) -> str:
    try:
        return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return f"{timestamp_ms} ms after 1970"
