"""SageMaker training jobs of the `sagemaker` pools over boto3 (`chalicelib.compute.cloud.TrainingApi`)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import clients
from chalicelib.compute.cloud import TrainingJobRequest
from chalicelib.settings import get_settings


class AwsSageMaker:
    def create(self, job: TrainingJobRequest) -> None:
        stopping: dict[str, int] = {"MaxRuntimeInSeconds": job.max_runtime_s}
        if job.spot:
            stopping["MaxWaitTimeInSeconds"] = job.max_runtime_s  # at least the run time (SageMaker's rule)
        request: dict[str, Any] = {
            "TrainingJobName": job.name,
            "RoleArn": get_settings().sagemaker_role_arn,
            "AlgorithmSpecification": {
                "TrainingImage": job.image,
                "TrainingInputMode": "File",
                "ContainerEntrypoint": ["python", "-m", "harness.agent"],
                "ContainerArguments": list(job.arguments),
            },
            "ResourceConfig": {
                "InstanceType": job.instance_type,
                "InstanceCount": job.instances,
                "VolumeSizeInGB": 50,
            },
            "OutputDataConfig": {"S3OutputPath": f"s3://{get_settings().bucket}/sagemaker/"},
            "StoppingCondition": stopping,
            "EnableManagedSpotTraining": job.spot,
            "Environment": job.environment,
            # Stratus requeues an interrupted trial itself: no retry by SageMaker.
            "RetryStrategy": {"MaximumRetryAttempts": 1},
        }
        clients.client("sagemaker").create_training_job(**request)

    def stop(self, name: str) -> None:
        try:
            clients.client("sagemaker").stop_training_job(TrainingJobName=name)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ValidationException":  # ended already
                raise
