"""moto's Batch without Docker, made to behave like AWS Batch for the local stack's `batch` pools.

moto runs a Batch job as a Docker container; without a Docker engine (here) it fails the job at once, and
its Docker-free mode (`{"batch": {"use_docker": false}}`) marks every job SUCCEEDED inside `SubmitJob`.
Neither lets a job run for as long as its work takes. With `apply()`, a job submitted in the Docker-free
mode stays RUNNING until `finish(job_id, exit_code)` ends it (the local stack's runner calls it when the
job's agent exits), and `TerminateJob` ends it FAILED with its reason, as AWS does. A job's node count is
read from its `agents` parameter by the runner (moto ignores `nodeOverrides`).
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

from moto.batch.models import Job, batch_backends
from moto.batch.utils import JobStatus
from moto.batch_simple.models import BatchSimpleBackend

from infra.shape import MOTO_ACCOUNT

ACCOUNT = MOTO_ACCOUNT


@functools.cache
def apply() -> None:
    """Patch moto (once per process)."""
    BatchSimpleBackend._mark_job_as_finished = _keep_running  # type: ignore[method-assign]
    Job.terminate = _terminate  # type: ignore[method-assign]


def _keep_running(self: BatchSimpleBackend, include_start_attempt: bool, job: Job) -> None:
    self.backend._jobs[job.job_id] = job
    job.job_started_at = datetime.datetime.now()
    job.log_stream_name = job._stream_name
    if include_start_attempt:
        job._start_attempt()
    job._transitions = []  # no progression of its own: RUNNING until finished or terminated
    job.status = JobStatus.RUNNING


def _terminate(self: Job, reason: str) -> None:
    if not self.stop:
        self.stop = True
        self.job_stopped_reason = reason
        self._mark_stopped(success=False)


def finish(job_id: str, exit_code: int, region: str = "us-east-1") -> dict[str, Any] | None:
    """End a RUNNING job with its main node's exit code; the job as DescribeJobs shows it, or None when
    it is unknown or ended already."""
    job = batch_backends[ACCOUNT][region]._jobs.get(job_id)
    if job is None or job.job_stopped:
        return None
    job.exit_code = exit_code
    if exit_code != 0:
        job.job_stopped_reason = f"Essential container in task exited with code {exit_code}"
    job._mark_stopped(success=exit_code == 0)
    return dict(job.describe())


#: The reason AWS Batch gives a job whose host went away (a reclaimed spot instance).
HOST_TERMINATED = "Host EC2 (instance i-local) terminated."


def reclaim(job_id: str, region: str = "us-east-1") -> dict[str, Any] | None:
    """End a RUNNING job as AWS Batch ends one whose instance was reclaimed: FAILED, no container exit
    code, `statusReason` "Host EC2 ... terminated."; the job as DescribeJobs shows it, or None."""
    job = batch_backends[ACCOUNT][region]._jobs.get(job_id)
    if job is None or job.job_stopped:
        return None
    job.job_stopped_reason = HOST_TERMINATED
    job._mark_stopped(success=False)
    return dict(job.describe())
