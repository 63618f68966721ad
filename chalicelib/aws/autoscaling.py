"""Auto Scaling groups of the `ec2` pools over boto3 (`chalicelib.compute.cloud.AutoScalingApi`)."""

from __future__ import annotations

from typing import Any

from chalicelib.aws import clients
from chalicelib.compute.cloud import Group, GroupInstance


class AwsAutoScaling:
    def group(self, name: str) -> Group | None:
        answer = clients.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[name])
        found = answer.get("AutoScalingGroups") or []
        if not found:
            return None
        raw = found[0]
        members = raw.get("Instances") or []
        launched = _launch_times([m["InstanceId"] for m in members])
        instances = tuple(
            GroupInstance(
                m["InstanceId"], str(m.get("LifecycleState", "")), launched.get(m["InstanceId"], 0.0)
            )
            for m in members
        )
        return Group(
            name=name,
            desired=int(raw["DesiredCapacity"]),
            min_size=int(raw["MinSize"]),
            max_size=int(raw["MaxSize"]),
            instances=instances,
        )

    def set_desired(self, name: str, desired: int) -> None:
        # HonorCooldown off: the control plane decides when, and only ever raises it here.
        clients.client("autoscaling").set_desired_capacity(
            AutoScalingGroupName=name, DesiredCapacity=desired, HonorCooldown=False
        )

    def terminate(self, instance_id: str, *, decrement: bool = True) -> None:
        clients.client("autoscaling").terminate_instance_in_auto_scaling_group(
            InstanceId=instance_id, ShouldDecrementDesiredCapacity=decrement
        )


def _launch_times(instance_ids: list[str]) -> dict[str, float]:
    """When EC2 launched each instance (the group's listing does not say)."""
    if not instance_ids:
        return {}
    out: dict[str, float] = {}
    pages = clients.client("ec2").get_paginator("describe_instances").paginate(InstanceIds=instance_ids)
    for page in pages:
        for reservation in page.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                out[instance["InstanceId"]] = _epoch(instance.get("LaunchTime"))
    return out


def _epoch(value: Any) -> float:
    return float(value.timestamp()) if hasattr(value, "timestamp") else 0.0
