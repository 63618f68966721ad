"""SageMaker training jobs of the `sagemaker` pools over boto3 (`chalicelib.compute.cloud.TrainingApi`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import clients
from chalicelib.compute.cloud import TrainingJobRequest
from chalicelib.settings import get_settings
from stratus.contract.container_boot import COMPUTE_CHANNEL, boot_entrypoint


class AwsSageMaker:
    def create(self, job: TrainingJobRequest) -> None:
        settings = get_settings()
        request = training_request(
            job, settings.bucket, settings.sagemaker_role_arn, settings.compute_key, settings.job_tags()
        )
        clients.client("sagemaker").create_training_job(**request)

    def stop(self, name: str) -> None:
        try:
            clients.client("sagemaker").stop_training_job(TrainingJobName=name)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ValidationException":  # ended already
                raise


def training_request(
    job: TrainingJobRequest,
    bucket: str,
    role_arn: str,
    compute_key: str,
    tags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`CreateTrainingJob`'s request for a run's job: the framework image boots into the agent after
    installing the compute package from its `compute` channel (`stratus.contract.container_boot`); `tags`: the
    job's (`Settings.job_tags`: the user's and the cluster's; creating a job with them needs
    `sagemaker:AddTags`), sorted by key."""
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": job.max_runtime_s}
    if job.spot:
        stopping["MaxWaitTimeInSeconds"] = job.max_runtime_s  # at least the run time (SageMaker's rule)
    request: dict[str, Any] = {
        "TrainingJobName": job.name,
        "RoleArn": role_arn,
        "AlgorithmSpecification": {
            "TrainingImage": job.image,
            "TrainingInputMode": "File",
            # Install the stack's compute package from the `compute` channel, then run the agent.
            "ContainerEntrypoint": boot_entrypoint(),
            "ContainerArguments": list(job.arguments),
        },
        "ResourceConfig": {
            "InstanceType": job.instance_type,
            "InstanceCount": job.instances,
            "VolumeSizeInGB": 50,
        },
        "OutputDataConfig": {"S3OutputPath": f"s3://{bucket}/sagemaker/"},
        "StoppingCondition": stopping,
        "EnableManagedSpotTraining": job.spot,
        "Environment": job.environment,
        # Stratus requeues an interrupted trial itself: no retry by SageMaker.
        "RetryStrategy": {"MaximumRetryAttempts": 1},
    }
    if channel := compute_channel(bucket, compute_key):
        request["InputDataConfig"] = channel
    if tags:
        request["Tags"] = [{"Key": key, "Value": value} for key, value in sorted(tags.items())]
    return request


def compute_channel(bucket: str, compute_key: str) -> list[dict[str, Any]]:
    """The `compute` input channel: the folder of the stack's compute package (`compute/<sha256>/`), which
    SageMaker copies into the container before it starts (none without a package: the boot says so)."""
    if not compute_key:
        return []
    folder = compute_key.rsplit("/", 1)[0] + "/"
    source = {
        "S3DataType": "S3Prefix",
        "S3Uri": f"s3://{bucket}/{folder}",
        "S3DataDistributionType": "FullyReplicated",
    }
    return [{"ChannelName": COMPUTE_CHANNEL, "DataSource": {"S3DataSource": source}, "InputMode": "File"}]
