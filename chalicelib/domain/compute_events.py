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


@dataclass(frozen=True)
class SpotInterruption:
    """EC2 reclaims a spot instance (about two minutes after `time`): `action` is terminate, stop or
    hibernate."""

    instance_id: str
    action: str
    time: float | None


def parse(event: Mapping[str, Any]) -> SpotInterruption | None:
    detail = event.get("detail")
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
