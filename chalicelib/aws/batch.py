"""AWS Batch jobs of the `batch` pools over boto3 (`chalicelib.compute.cloud.BatchApi`)."""

from __future__ import annotations

from typing import Any

from chalicelib.aws import clients
from chalicelib.compute.cloud import JobRequest


class AwsBatch:
    def submit(self, job: JobRequest) -> str:
        request: dict[str, Any] = {
            "jobName": job.name,
            "jobQueue": job.queue,
            "jobDefinition": job.definition,
            "parameters": job.parameters,
            "propagateTags": True,
        }
        if job.share:
            request["shareIdentifier"] = job.share
            request["schedulingPriorityOverride"] = job.priority
        if job.nodes > 1:
            request["nodeOverrides"] = {"numNodes": job.nodes}
        return str(clients.client("batch").submit_job(**request)["jobId"])

    def terminate(self, job_id: str, reason: str) -> None:
        clients.client("batch").terminate_job(jobId=job_id, reason=reason[:256])
