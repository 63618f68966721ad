"""The SageMaker pools' part of the stack (`infra.aws.backends` registers it; `infra/aws/compute_resources.py`
merges it): the role their training jobs run as, the rule that routes the stack's training jobs' state
changes to the events queue, what the control plane's role needs to run and stop those jobs, and the
variables its functions need for them (`CONTROL_ENVIRONMENT`).

    resources, outputs = pool_resources(pools, inputs)   # or sagemaker_resources(pools): both empty without pools
    statements = control_statements()                    # for the control plane's compute policy

SageMaker has no queue or environment to declare: the control plane (`chalicelib/compute/sagemaker.py`)
creates one training job per run, named `<stack>-<pool>-<run>`, running as `SageMakerExecutionRole`
(the functions' `STRATUS_SAGEMAKER_ROLE_ARN`) with the pool's image and its one-run agent as the entry
point. So no pool has resources of its own; a pool is only checked (its image, its `ml.` types).

The job's agent reads its agent credential once from the bucket, as a Batch job's does (the objects
`credentials/<job>/<lane>` the control plane writes before it creates the job), so the role may read and
delete those objects, call the IAM credential route (with `HasCode`, as the API exists only then), pull the
image from ECR and write the job's logs. Trials move their bytes through presigned URLs: the role reads
nothing else of the bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chalicelib.domain.compute_events import SAGEMAKER_STATE_CHANGE
from infra.aws.compute_agents import ComputeTemplateError, PoolInputs
from infra.aws.template_app import QUEUE_IDS
from infra.aws.template_iam import COMPUTE_PACKAGES, JOB_CREDENTIALS, assume
from infra.boot import STAGE
from stratus.contract.pools import PoolSpec

Template = dict[str, Any]

EXECUTION_ROLE = "SageMakerExecutionRole"
EXECUTION_POLICY = "SageMakerExecutionPolicy"
SAGEMAKER_STATE_RULE = "SageMakerStateRule"
#: The functions' environment variable of the execution role's ARN (`infra/aws/template_app.py`).
ROLE_VARIABLE = "STRATUS_SAGEMAKER_ROLE_ARN"
#: The part's names (`infra.aws.backends.TemplatePart`): the jobs' state changes go to the events queue;
#: SageMaker runs its jobs in a network of its own (no parameter); the control plane's functions create
#: each job with the execution role and the compute package as its `compute` channel
#: (`stratus.contract.container_boot`).
STATE_RULE: str | None = SAGEMAKER_STATE_RULE
PARAMETERS: Template = {}
CONTROL_ENVIRONMENT: Template = {
    ROLE_VARIABLE: {"Fn::GetAtt": [EXECUTION_ROLE, "Arn"]},
    "STRATUS_COMPUTE_KEY": {"Ref": "ComputeKey"},
}
SERVICE = "sagemaker.amazonaws.com"
#: SageMaker's instance types are EC2's with this prefix (`ml.g5.xlarge`).
TYPE_PREFIX = "ml."
#: Where SageMaker writes every training job's logs, one stream per instance named after the job.
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
#: The events queue's message of any AWS event (as `compute_resources.COMPUTE_EVENT`).
COMPUTE_EVENT = '{"type": "compute_event", "event": <aws.events.event.json>}'


class SageMakerTemplateError(ComputeTemplateError):
    """A SageMaker pool the template cannot render (the message names the pool and the fix)."""


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def _arn(service: str, resource: str) -> dict[str, str]:
    """An ARN of `service` in the stack's partition, region and account."""
    return _sub(f"arn:${{AWS::Partition}}:{service}:${{AWS::Region}}:${{AWS::AccountId}}:{resource}")


def pool_resources(pools: Sequence[PoolSpec], inputs: PoolInputs) -> tuple[Template, Template]:
    """The SageMaker pools' (resources, outputs): the same for any pools (`inputs` size and tag nothing)."""
    return sagemaker_resources(pools)


def sagemaker_resources(pools: Sequence[PoolSpec]) -> tuple[Template, Template]:
    """The SageMaker pools' (resources, outputs): shared by all of them, both empty without any."""
    if not pools:
        return {}, {}
    for pool in pools:
        check_pool(pool)
    resources: Template = {
        EXECUTION_ROLE: {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": assume(SERVICE),
                "Description": "The Stratus SageMaker pools' training jobs: their SageMakerExecutionPolicy",
            },
        },
        EXECUTION_POLICY: _execution_policy(),
        SAGEMAKER_STATE_RULE: _state_rule(),
    }
    outputs: Template = {
        "SageMakerExecutionRoleArn": {
            "Description": "The role the SageMaker pools' training jobs run as",
            "Value": {"Fn::GetAtt": [EXECUTION_ROLE, "Arn"]},
        }
    }
    return resources, outputs


def check_pool(pool: PoolSpec) -> None:
    """A SageMakerTemplateError for a pool whose jobs SageMaker could not run."""
    provider = pool.provider
    if provider is None or not provider.image:
        raise SageMakerTemplateError(
            f"SageMaker pool {pool.name!r} has no image; give its provider the training image of its jobs "
            "(image: an ECR image with PyTorch and Stratus' harness installed)"
        )
    if not provider.instance_types:
        raise SageMakerTemplateError(
            f"SageMaker pool {pool.name!r} has no instance type; give its provider an instance_type "
            "(e.g. ml.g5.xlarge)"
        )
    for kind in provider.instance_types:
        if not kind.startswith(TYPE_PREFIX):
            raise SageMakerTemplateError(
                f"SageMaker pool {pool.name!r} has instance type {kind!r}, which is not a SageMaker type; "
                f"use SageMaker's name for it, {TYPE_PREFIX + kind!r}"
            )


def control_statements() -> list[Template]:
    """What the control plane's role needs to run the stack's training jobs and stop them."""
    return [
        {
            "Sid": "RunTheStacksTrainingJobs",
            "Effect": "Allow",
            # AddTags: CreateTrainingJob with tags needs it.
            "Action": [
                "sagemaker:CreateTrainingJob",
                "sagemaker:StopTrainingJob",
                "sagemaker:DescribeTrainingJob",
                "sagemaker:AddTags",
            ],
            "Resource": _arn("sagemaker", "training-job/${AWS::StackName}-*"),
        },
        {
            "Sid": "PassTheExecutionRole",
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": {"Fn::GetAtt": [EXECUTION_ROLE, "Arn"]},
            "Condition": {"StringEquals": {"iam:PassedToService": SERVICE}},
        },
    ]


def _execution_policy() -> Template:
    """What a training job's agent and SageMaker itself (pulling the image, writing logs) may do as the
    execution role."""
    logs = "log-group:" + LOG_GROUP
    return {
        "Type": "AWS::IAM::Policy",
        "Condition": "HasCode",
        "Properties": {
            "PolicyName": "sagemaker-job",
            "Roles": [{"Ref": EXECUTION_ROLE}],
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "AgentCredential",
                        "Effect": "Allow",
                        "Action": "execute-api:Invoke",
                        "Resource": _arn(
                            "execute-api", "${RestApi}/" + STAGE + "/POST/agents/*/iam-credential"
                        ),
                    },
                    {
                        "Sid": "ReadOnceJobCredentials",
                        "Effect": "Allow",
                        "Action": ["s3:GetObject", "s3:DeleteObject"],
                        "Resource": JOB_CREDENTIALS,
                    },
                    {
                        # SageMaker copies the job's `compute` channel (the compute package's folder)
                        # into the container as this role (`stratus.contract.container_boot`).
                        "Sid": "ReadTheComputePackage",
                        "Effect": "Allow",
                        "Action": "s3:GetObject",
                        "Resource": COMPUTE_PACKAGES,
                    },
                    {
                        "Sid": "ListTheComputePackage",
                        "Effect": "Allow",
                        "Action": "s3:ListBucket",
                        "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}"},
                        "Condition": {"StringLike": {"s3:prefix": "compute/*"}},
                    },
                    {
                        # GetAuthorizationToken has no resource type: only "*" allows it.
                        "Sid": "EcrToken",
                        "Effect": "Allow",
                        "Action": "ecr:GetAuthorizationToken",
                        "Resource": "*",
                    },
                    {
                        # The pool's image may be in any account's registry (AWS's Deep Learning Containers).
                        "Sid": "PullTheTrainingImage",
                        "Effect": "Allow",
                        "Action": [
                            "ecr:BatchGetImage",
                            "ecr:GetDownloadUrlForLayer",
                            "ecr:BatchCheckLayerAvailability",
                        ],
                        "Resource": "*",
                    },
                    {
                        # The group is the account's, shared by every job: made by the first one that logs.
                        "Sid": "TrainingJobsLogGroup",
                        "Effect": "Allow",
                        "Action": ["logs:CreateLogGroup", "logs:DescribeLogStreams"],
                        "Resource": [_arn("logs", logs), _arn("logs", logs + ":*")],
                    },
                    {
                        # Each stream is `<job name>/algo-<n>-<time>`: this stack's jobs' only.
                        "Sid": "TrainingJobsLogs",
                        "Effect": "Allow",
                        "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                        "Resource": _arn("logs", logs + ":log-stream:${AWS::StackName}-*"),
                    },
                ],
            },
        },
    }


def _state_rule() -> Template:
    """The stack's training jobs' state changes, as `compute_event` messages on the events queue. Every
    status comes (InProgress too, and a spot job's `Interrupted` secondary status): the control plane
    picks what it needs. The rule needs no job to exist (and no `HasCode`)."""
    return {
        "Type": "AWS::Events::Rule",
        "Properties": {
            "Description": "SageMaker training jobs' state changes: the control plane ends the runs of ended jobs",
            "State": "ENABLED",
            "EventPattern": {
                "source": ["aws.sagemaker"],
                "detail-type": [SAGEMAKER_STATE_CHANGE],
                "detail": {"TrainingJobName": [{"prefix": _sub("${AWS::StackName}-")}]},
            },
            "Targets": [
                {
                    "Id": "sagemaker-state",
                    "Arn": {"Fn::GetAtt": [QUEUE_IDS["events"], "Arn"]},
                    "InputTransformer": {"InputPathsMap": {}, "InputTemplate": COMPUTE_EVENT},
                }
            ],
        },
    }
