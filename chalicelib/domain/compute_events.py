"""AWS events about the stack's compute, read into typed values (pure: no AWS, no ports).

EventBridge delivers them in its envelope (`source`, `detail-type`, `time`, `detail`, ...); the stack's
rules wrap the whole envelope in a `ComputeEvent` message. moto's EventBridge gives `time` as an epoch
number where AWS gives an ISO string: both are read. An event of a kind not listed here is `None` (a rule
may match more than this code knows; it is logged and dropped, not retried)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
BATCH_STATE_CHANGE = "Batch Job State Change"


@dataclass(frozen=True)
class SpotInterruption:
    """EC2 reclaims a spot instance (about two minutes after `time`): `action` is terminate, stop or
    hibernate."""

    instance_id: str
    action: str
    time: float | None


@dataclass(frozen=True)
class BatchJobEnded:
    """A Batch job of a run reached SUCCEEDED or FAILED: `runs` are its job parameters' run (or node)
    ids, `exit_code` its container's (None when no container ran: never placed, its host reclaimed)."""

    job_id: str
    status: str
    reason: str
    exit_code: int | None
    runs: tuple[str, ...]

    @property
    def infrastructure(self) -> bool:
        """It ended for the machine's reasons, not the trial's (requeue, do not count a restart)."""
        return self.exit_code is None or self.reason.startswith("Host EC2")


def parse(event: Mapping[str, Any]) -> SpotInterruption | BatchJobEnded | None:
    detail = event.get("detail")
    if (
        event.get("source") == "aws.batch"
        and event.get("detail-type") == BATCH_STATE_CHANGE
        and isinstance(detail, Mapping)
        and detail.get("status") in ("SUCCEEDED", "FAILED")
    ):
        return _batch_job_ended(detail)
    if (
        event.get("source") == "aws.ec2"
        and event.get("detail-type") == SPOT_WARNING
        and isinstance(detail, Mapping)
    ):
        instance_id = detail.get("instance-id")
        if isinstance(instance_id, str) and instance_id:
            return SpotInterruption(
                instance_id, str(detail.get("instance-action", "terminate")), _time(event.get("time"))
            )
    return None


def _time(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _batch_job_ended(detail: Mapping[str, Any]) -> BatchJobEnded | None:
    parameters = detail.get("parameters")
    job_id = detail.get("jobId")
    if not isinstance(parameters, Mapping) or not isinstance(job_id, str):
        return None
    runs = tuple(r for r in str(parameters.get("runs", "")).split(",") if r)
    container = detail.get("container")
    code = container.get("exitCode") if isinstance(container, Mapping) else None
    return BatchJobEnded(
        job_id=job_id,
        status=str(detail["status"]),
        reason=str(detail.get("statusReason") or ""),
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        runs=runs,
    )
