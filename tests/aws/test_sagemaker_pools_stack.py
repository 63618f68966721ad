"""A stack with a spot SageMaker pool in moto's CloudFormation (real boto3 calls through
AWS_ENDPOINT_URL): it creates; the execution role is trusted by SageMaker and may call the credential
route, pull images and write the stack's jobs' logs; the functions know the role's ARN; the control plane
may run and stop the stack's training jobs and pass the role to SageMaker only; and only the stack's
training jobs' state changes reach the events queue as `compute_event` messages.

What moto 5.2.5 does not do with this template (observed with it):
- It skips `AWS::SQS::QueuePolicy` and `AWS::SecretsManager::Secret` with a warning "Tried to parse ...
  but it's not supported" (as for the EC2 and Batch pools' stacks), so the events queue's policy that
  lists `SageMakerStateRule` is not made there (the unit tests read it from the template).
- It checks no IAM: neither the trust policy nor the `iam:PassedToService` condition is evaluated, and
  its SageMaker lower-cases nothing (AWS's training job ARNs are lower case: the policy's
  `training-job/<stack>-*` matches only a lower-case stack name; this stack's name is lower case).
- Its EventBridge sends to a rule's targets within `PutEvents`, and no AWS service sends its own events;
  the events queue's functions cannot run there (no Docker), so the rule is observed through a probe
  queue added as a second target.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from infra.aws.compute_sagemaker import ROLE_VARIABLE
from stratus.contract.pools import PoolSpec, Provider

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS")

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3-gpu-py311"
ACCOUNT = "arn:aws:{service}:us-east-1:123456789012:"
COMPUTE_KEY = "compute/" + "c" * 64 + "/stratus_compute-0.1.0-py3-none-any.whl"
GPU = PoolSpec(
    name="sm-gpu",
    slots_per_agent=1,
    max_agents=4,
    backend="sagemaker",
    provider=Provider(instance_types=("ml.g5.xlarge",), max_instances=4, spot=True, gpus=1, image=IMAGE),
)


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Any]:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    return lambda service: boto3.client(service, region_name="us-east-1")


@pytest.fixture
def stack(deployed_pools_stack) -> Iterator[Any]:  # noqa: ANN001
    """The stack with the default pool and GPU, its control plane included."""
    with deployed_pools_stack(
        "sagemaker-" + uuid.uuid4().hex[:8], [PoolSpec(name="default"), GPU], ComputeKey=COMPUTE_KEY
    ) as deployed:
        yield deployed


def _statements(document: dict) -> dict[str, dict]:
    return {s["Sid"]: s for s in document["Statement"]}


def test_the_execution_role_is_sagemakers_and_the_functions_know_it(aws, stack) -> None:
    iam, name = aws("iam"), stack.name
    role = iam.get_role(RoleName=stack.resources["SageMakerExecutionRole"])["Role"]
    assert stack.outputs["SageMakerExecutionRoleArn"] == role["Arn"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "sagemaker.amazonaws.com"}

    policy = iam.get_role_policy(RoleName=role["RoleName"], PolicyName="sagemaker-job")["PolicyDocument"]
    statements = _statements(policy)
    api_id = stack.outputs["ApiUrl"].split("//")[1].split(".")[0]
    assert statements["AgentCredential"]["Resource"] == (
        ACCOUNT.format(service="execute-api") + f"{api_id}/api/POST/agents/*/iam-credential"
    )
    assert statements["TrainingJobsLogs"]["Resource"] == (
        ACCOUNT.format(service="logs") + f"log-group:/aws/sagemaker/TrainingJobs:log-stream:{name}-*"
    )
    assert statements["EcrToken"]["Resource"] == "*"

    for function in (f"{name}-api", f"{name}-on-scheduler-message", f"{name}-on-launch-message"):
        variables = aws("lambda").get_function(FunctionName=function)["Configuration"]["Environment"][
            "Variables"
        ]
        assert variables[ROLE_VARIABLE] == role["Arn"]
        # ...and the compute package its training jobs install (their `compute` channel).
        assert variables["STRATUS_COMPUTE_KEY"] == COMPUTE_KEY
    assert statements["ReadTheComputePackage"]["Resource"] == f"arn:aws:s3:::{name}-bucket/compute/*"


def test_the_control_plane_may_run_the_stacks_training_jobs_and_pass_the_role_to_sagemaker(
    aws, stack
) -> None:
    iam = aws("iam")
    role_arn = stack.outputs["SageMakerExecutionRoleArn"]
    policy = iam.get_role_policy(RoleName=stack.resources["ApiRole"], PolicyName="ec2-pools")
    statements = _statements(policy["PolicyDocument"])
    jobs = statements["RunTheStacksTrainingJobs"]
    assert jobs["Resource"] == ACCOUNT.format(service="sagemaker") + f"training-job/{stack.name}-*"
    assert "sagemaker:CreateTrainingJob" in jobs["Action"] and "sagemaker:StopTrainingJob" in jobs["Action"]
    assert statements["PassTheExecutionRole"]["Resource"] == role_arn
    assert statements["PassTheExecutionRole"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}
    }
    # No scaling and no Batch rights: the stack has neither EC2 nor Batch pools.
    assert set(statements) == {"RunTheStacksTrainingJobs", "PassTheExecutionRole"}


def test_only_the_stacks_training_jobs_state_changes_reach_the_events_queue(aws, stack) -> None:
    events, sqs = aws("events"), aws("sqs")
    rule = stack.resources["SageMakerStateRule"]
    (target,) = events.list_targets_by_rule(Rule=rule)["Targets"]
    assert target["Arn"].endswith(f":{stack.name}-trial-events")
    # A probe queue gets what the rule's own target gets.
    probe = sqs.create_queue(QueueName=f"{stack.name}-probe")["QueueUrl"]
    probe_arn = sqs.get_queue_attributes(QueueUrl=probe, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_targets(Rule=rule, Targets=[{**target, "Id": "probe", "Arn": probe_arn}])
    for job, status in [
        (f"{stack.name}-sm-gpu-7-1", "InProgress"),
        (f"{stack.name}-sm-gpu-7-1", "Stopped"),
        (f"{stack.name}x-sm-gpu-8-1", "Failed"),  # another stack whose name starts with this one's
        ("other-sm-gpu-9-1", "Completed"),
    ]:
        detail = {"TrainingJobName": job, "TrainingJobStatus": status, "SecondaryStatus": status}
        entry = {
            "Source": "aws.sagemaker",
            "DetailType": "SageMaker Training Job State Change",
            "Detail": json.dumps(detail),
        }
        assert events.put_events(Entries=[entry])["FailedEntryCount"] == 0
    received = sqs.receive_message(QueueUrl=probe, MaxNumberOfMessages=10)["Messages"]
    bodies = [json.loads(m["Body"]) for m in received]
    assert {b["type"] for b in bodies} == {"compute_event"}
    assert sorted(b["event"]["detail"]["TrainingJobStatus"] for b in bodies) == ["InProgress", "Stopped"]
    assert all(b["event"]["source"] == "aws.sagemaker" for b in bodies)
