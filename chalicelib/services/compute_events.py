"""AWS events about the stack's compute, from the events queue (`stratus.contract.messages.ComputeEvent`):
a spot interruption warning drains the instance's agent (`draining`). Every event may come more than
once and late; each handler does only what is still to do."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from chalicelib.domain import compute_events
from chalicelib.domain.states import RunState
from chalicelib.services import draining, runs
from chalicelib.services.clock import iso_utc
from chalicelib.services.ports import Ports

log = logging.getLogger(__name__)


def handle(ports: Ports, event: Mapping[str, Any]) -> None:
    parsed = compute_events.parse(event)
    if parsed is None:
        log.info("compute event ignored: %s / %s", event.get("source"), event.get("detail-type"))
        return
    if isinstance(parsed, compute_events.JobEnded):
        _job_ended(ports, parsed)
        return
    when = iso_utc(parsed.time) if parsed.time is not None else "now"
    reason = f"EC2 reclaims spot instance {parsed.instance_id} ({parsed.action}, warned at {when})"
    # On EC2 an agent's id is its instance id.
    draining.drain_agent(ports, parsed.instance_id, reason)


def _job_ended(ports: Ports, job: compute_events.JobEnded) -> None:
    """A run whose job ended before its agent reported the run's exit: ended now (requeued when the job
    ended for its machine's reasons). Its agent's report, when it came first, already ended it."""
    if not job.runs:
        return
    run_id = job.runs[0].split("-node", 1)[0]  # a multi-node job names the run's nodes
    run = ports.runs.get(run_id)
    if run is None or run.state == RunState.EXITED or run.compute_ref != job.job_id:
        return
    code = job.exit_code if job.exit_code is not None else runs.AGENT_LOST_EXIT_CODE
    reason = f"its job {job.job_id} {job.status.lower()}: {job.reason or 'no reason given'}"
    if runs.end_run(ports, run, code, reason, requeue=job.infrastructure):
        log.warning("run %s: %s", run_id, reason)
