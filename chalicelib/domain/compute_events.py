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
SAGEMAKER_STATE_CHANGE = "SageMaker Training Job State Change"
#: The runs (or nodes) of a SageMaker training job, in its environment (`chalicelib.compute.sagemaker`).
RUNS_ENV = "STRATUS_RUNS"


@dataclass(frozen=True)
class SpotInterruption:
    """EC2 reclaims a spot instance (about two minutes after `time`): `action` is terminate, stop or
    hibernate."""

    instance_id: str
    action: str
    time: float | None


@dataclass(frozen=True)
class JobEnded:
    """A run's Batch job (SUCCEEDED, FAILED) or SageMaker training job (Completed, Failed, Stopped)
    ended: `job_id` what the run keeps as its `compute_ref`, `runs` its run (or node) ids, `exit_code` its
    container's where known, `infrastructure` whether it ended for the machine's reasons rather than the
    trial's (never placed, its host reclaimed, a spot interruption: requeue, no restart counted)."""

    job_id: str
    status: str
    reason: str
    exit_code: int | None
    runs: tuple[str, ...]
    infrastructure: bool


def parse(event: Mapping[str, Any]) -> SpotInterruption | JobEnded | None:
    detail = event.get("detail")
    if (
        event.get("source") == "aws.batch"
        and event.get("detail-type") == BATCH_STATE_CHANGE
        and isinstance(detail, Mapping)
        and detail.get("status") in ("SUCCEEDED", "FAILED")
    ):
        return _batch_job_ended(detail)
    if (
        event.get("source") == "aws.sagemaker"
        and event.get("detail-type") == SAGEMAKER_STATE_CHANGE
        and isinstance(detail, Mapping)
        and detail.get("TrainingJobStatus") in ("Completed", "Failed", "Stopped")
    ):
        return _training_job_ended(detail)
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


def _batch_job_ended(detail: Mapping[str, Any]) -> JobEnded | None:
    parameters = detail.get("parameters")
    job_id = detail.get("jobId")
    if not isinstance(parameters, Mapping) or not isinstance(job_id, str):
        return None
    runs = tuple(r for r in str(parameters.get("runs", "")).split(",") if r)
    container = detail.get("container")
    code = container.get("exitCode") if isinstance(container, Mapping) else None
    exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    reason = str(detail.get("statusReason") or "")
    return JobEnded(
        job_id=job_id,
        status=str(detail["status"]),
        reason=reason,
        exit_code=exit_code,
        runs=runs,
        infrastructure=exit_code is None or reason.startswith("Host EC2"),
    )


def _training_job_ended(detail: Mapping[str, Any]) -> JobEnded | None:
    name = detail.get("TrainingJobName")
    environment = detail.get("Environment")
    if not isinstance(name, str) or not isinstance(environment, Mapping):
        return None
    status = str(detail["TrainingJobStatus"])
    secondary = str(detail.get("SecondaryStatus") or "")
    reason = str(detail.get("FailureReason") or secondary)
    return JobEnded(
        job_id=name,
        status=status,
        reason=reason,
        exit_code=0 if status == "Completed" else None,
        runs=tuple(r for r in str(environment.get(RUNS_ENV, "")).split(",") if r),
        # A spot interruption or a capacity failure; an AlgorithmError is the trial's own.
        infrastructure=secondary in ("Interrupted", "MaxWaitTimeExceeded")
        or (status == "Failed" and not reason.startswith("AlgorithmError")),
    )
