"""moto's SageMaker training jobs made to behave like SageMaker's for the local stack's `sagemaker` pools.

moto marks a training job Completed as it creates it, drops its `Environment` and has no
`StopTrainingJob`. With `apply()`, a created job is `InProgress` (secondary status `Training`) with its
environment kept, until `finish(name, exit_code)` ends it (the local stack's runner calls it when the
job's agent exits) or `StopTrainingJob` stops it (`Stopped`), as SageMaker does.
"""

from __future__ import annotations

import functools
from typing import Any

from moto.core.responses import ActionResult
from moto.sagemaker.models import sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse

from infra.shape import MOTO_ACCOUNT

ACCOUNT = MOTO_ACCOUNT


@functools.cache
def apply() -> None:
    """Patch moto (once per process)."""
    create = SageMakerResponse.create_training_job

    def create_training_job(self: SageMakerResponse) -> ActionResult:
        result = create(self)
        job = self.sagemaker_backend.training_jobs[self._get_param("TrainingJobName")]
        job.training_job_status, job.secondary_status = "InProgress", "Training"
        job.environment = self._get_param("Environment") or {}  # type: ignore[attr-defined]  # ours, read back
        return result

    def stop_training_job(self: SageMakerResponse) -> ActionResult:
        job = self.sagemaker_backend.training_jobs.get(self._get_param("TrainingJobName"))
        if job is not None and job.training_job_status == "InProgress":
            job.training_job_status, job.secondary_status = "Stopped", "Stopped"
        return ActionResult({})

    SageMakerResponse.create_training_job = create_training_job  # type: ignore[method-assign]
    SageMakerResponse.stop_training_job = stop_training_job  # type: ignore[attr-defined]


def finish(name: str, exit_code: int, region: str = "us-east-1") -> dict[str, Any] | None:
    """End an InProgress job with its first instance's exit code; the job as DescribeTrainingJob shows it,
    or None when it is unknown or ended already."""
    job = sagemaker_backends[ACCOUNT][region].training_jobs.get(name)
    if job is None or job.training_job_status != "InProgress":
        return None
    if exit_code == 0:
        job.training_job_status, job.secondary_status = "Completed", "Completed"
    else:
        job.training_job_status, job.secondary_status = "Failed", "Failed"
        job.failure_reason = f"AlgorithmError: the agent exited with code {exit_code}"  # type: ignore[attr-defined]
    return dict(job.response_object)


def interrupt(name: str, region: str = "us-east-1") -> dict[str, Any] | None:
    """End an InProgress managed spot job as SageMaker reports a spot interruption Stratus does not let
    it retry: Stopped, secondary status `Interrupted`; the job as DescribeTrainingJob shows it, or None."""
    job = sagemaker_backends[ACCOUNT][region].training_jobs.get(name)
    if job is None or job.training_job_status != "InProgress":
        return None
    job.training_job_status, job.secondary_status = "Stopped", "Interrupted"
    return dict(job.response_object)
