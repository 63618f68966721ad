"""EC2 instance types' vCPUs and the account's EC2 quotas over boto3 (`chalicelib.compute.pool_compute.QuotaApi`),
cached in the function's container for `TTL_S` (a quota changes when AWS grants an increase)."""

from __future__ import annotations

import logging
import time

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.aws import clients

log = logging.getLogger(__name__)

TTL_S = 600.0


class AwsQuotas:
    def __init__(self) -> None:
        self._vcpus: dict[str, int | None] = {}
        self._quotas: dict[str, tuple[float, float | None]] = {}

    def vcpus(self, instance_type: str) -> int | None:
        if instance_type not in self._vcpus:
            try:
                found = clients.client("ec2").describe_instance_types(InstanceTypes=[instance_type])[
                    "InstanceTypes"
                ]
                self._vcpus[instance_type] = int(found[0]["VCpuInfo"]["DefaultVCpus"]) if found else None
            except (BotoCoreError, ClientError) as e:
                log.warning("could not read the vCPUs of %s: %s", instance_type, e)
                return None
        return self._vcpus[instance_type]

    def quota(self, code: str) -> float | None:
        now = time.monotonic()
        cached = self._quotas.get(code)
        if cached is not None and now - cached[0] < TTL_S:
            return cached[1]
        try:
            answer = clients.client("service-quotas").get_service_quota(ServiceCode="ec2", QuotaCode=code)
            value: float | None = float(answer["Quota"]["Value"])
        except (BotoCoreError, ClientError) as e:
            log.warning("could not read the EC2 quota %s: %s", code, e)
            value = None
        self._quotas[code] = (now, value)
        return value
