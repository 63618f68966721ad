"""AWS Batch jobs of the `batch` pools over boto3 (`chalicelib.compute.cloud.BatchApi`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.aws import clients
from chalicelib.compute.cloud import JobRequest
from chalicelib.settings import get_settings


class AwsBatch:
    def submit(self, job: JobRequest) -> str:
        request = submit_request(job, get_settings().job_tags())
        return str(clients.client("batch").submit_job(**request)["jobId"])

    def terminate(self, job_id: str, reason: str) -> None:
        clients.client("batch").terminate_job(jobId=job_id, reason=reason[:256])


def submit_request(job: JobRequest, tags: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`SubmitJob`'s request for a run's job. `tags`: the job's (`Settings.job_tags`: the user's and the
    cluster's; submitting with them needs `batch:TagResource` on the job). `propagateTags` hands the job's
    and its job definition's tags (the pool's, `infra/compute_batch.py`) to its ECS tasks."""
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
