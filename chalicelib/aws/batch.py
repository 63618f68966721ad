"""AWS Batch jobs of the `batch` pools over boto3 (`chalicelib.compute.cloud.BatchApi`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from chalicelib.aws import clients
from chalicelib.compute.cloud import JobRequest
from chalicelib.settings import get_settings


class AwsBatch:
    def submit(self, job: JobRequest) -> str:
        if job.image:
            job = replace(job, definition=image_definition(job.definition, job.image))
        request = submit_request(job, get_settings().job_tags())
        return str(clients.client("batch").submit_job(**request)["jobId"])

    def terminate(self, job_id: str, reason: str) -> None:
        clients.client("batch").terminate_job(jobId=job_id, reason=reason[:256])


def submit_request(job: JobRequest, tags: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`SubmitJob`'s request for a run's job. `tags`: the job's (`Settings.job_tags`: the user's and the
    cluster's; submitting with them needs `batch:TagResource` on the job). `propagateTags` hands the job's
    and its job definition's tags (the pool's, `infra/aws/compute_batch.py`) to its ECS tasks."""
    request: dict[str, Any] = {
        "jobName": job.name,
        "jobQueue": job.queue,
        "jobDefinition": job.definition,
        "parameters": job.parameters,
        "propagateTags": True,
    }
    if tags:
        request["tags"] = dict(sorted(tags.items()))
    if job.share:
        request["shareIdentifier"] = job.share
        request["schedulingPriorityOverride"] = job.priority
    if job.nodes > 1:
        request["nodeOverrides"] = {"numNodes": job.nodes}
    return request


def image_definition(base: str, image: str) -> str:
    """The name of a job definition like `base` (the pool's: its command, role, resources, nodes) whose
    container runs `image`, registered the first time an experiment asks for that image
    (`<base>-image-<hash>`; Batch's SubmitJob cannot override a job's image). Its boot installs the compute
    package into that image as into the pool's (`stratus.contract.container_boot`)."""
    batch = clients.client("batch")
    name = f"{base}-image-{hashlib.sha256(image.encode()).hexdigest()[:12]}"[:128]
    if batch.describe_job_definitions(jobDefinitionName=name, status="ACTIVE")["jobDefinitions"]:
        return name
    found = batch.describe_job_definitions(jobDefinitionName=base, status="ACTIVE")["jobDefinitions"]
    if not found:
        raise LookupError(f"job definition {base!r} is not in Batch; deploy the stack (det deploy aws up)")
    current = max(found, key=lambda d: int(d.get("revision", 0)))
    batch.register_job_definition(**with_image(current, name, image))
    return name


#: What RegisterJobDefinition takes of a described job definition (the rest is Batch's own).
_REGISTERED = (
    "type",
    "parameters",
    "retryStrategy",
    "timeout",
    "platformCapabilities",
    "propagateTags",
    "tags",
)


def with_image(described: Mapping[str, Any], name: str, image: str) -> dict[str, Any]:
    """RegisterJobDefinition's request: `described` (DescribeJobDefinitions' form) named `name`, every
    container of it running `image`."""
    request: dict[str, Any] = {"jobDefinitionName": name}
    request.update({key: described[key] for key in _REGISTERED if described.get(key) not in (None, {}, [])})
    if "containerProperties" in described:
        request["containerProperties"] = {**described["containerProperties"], "image": image}
    if "nodeProperties" in described:
        nodes = dict(described["nodeProperties"])
        nodes["nodeRangeProperties"] = [
            {**node, "container": {**node["container"], "image": image}} if "container" in node else node
            for node in nodes.get("nodeRangeProperties", [])
        ]
        request["nodeProperties"] = nodes
    return request
