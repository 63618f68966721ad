"""The SageMaker pools' part of the template (infra/aws/compute_sagemaker.py, merged by
infra/aws/compute_resources.py): one execution role for the stack's training jobs, scoped to the stack and
its partition, the control plane's right to run, stop and pass it, the training jobs' state changes
routed to the events queue, and pools SageMaker could not run refused by name. Pure: templates are
rendered and read, nothing is deployed."""

from __future__ import annotations

import pytest

from infra.aws.compute_resources import compute_resources
from infra.aws.compute_sagemaker import (
    EXECUTION_ROLE,
    ROLE_VARIABLE,
    SAGEMAKER_STATE_RULE,
    SageMakerTemplateError,
    sagemaker_resources,
)
from infra.aws.template import template
from infra.aws.template_app import COMPUTE_POLICY
from stratus.contract.pools import PoolSpec, Provider

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3-gpu-py311"
SPOT = PoolSpec(
    name="sm-gpu",
    slots_per_agent=1,
    max_agents=4,
    backend="sagemaker",
    provider=Provider(instance_types=("ml.g5.xlarge",), max_instances=4, spot=True, gpus=1, image=IMAGE),
)
ON_DEMAND = PoolSpec(
    name="sm-big",
    backend="sagemaker",
    provider=Provider(instance_types=("ml.p4d.24xlarge",), max_instances=1, gpus=8, image=IMAGE),
)
EC2 = PoolSpec(name="ec2", backend="ec2", provider=Provider(instance_types=("g5.xlarge",)))
BATCH = PoolSpec(
    name="batch",
    backend="batch",
    provider=Provider(
        instance_types=("g5.xlarge",), image="123456789012.dkr.ecr.us-east-1.amazonaws.com/s:1"
    ),
)
POOLS = (PoolSpec(name="default"), SPOT, ON_DEMAND)
ROLE_ARN = {"Fn::GetAtt": [EXECUTION_ROLE, "Arn"]}


def _statements(policy: dict) -> list[dict]:
    return policy["Properties"]["PolicyDocument"]["Statement"]


def _as_list(value: object) -> list:
    return value if isinstance(value, list) else [value]


def _by_sid(policy: dict) -> dict[str, dict]:
    return {s["Sid"]: s for s in _statements(policy)}


def test_sagemaker_pools_share_one_role_and_rule_and_have_no_resource_of_their_own():
    rendered = template(POOLS)
    resources = rendered["Resources"]
    made = {k: r["Type"] for k, r in resources.items() if "SageMaker" in k}
    assert made == {
        "SageMakerExecutionRole": "AWS::IAM::Role",
        "SageMakerExecutionPolicy": "AWS::IAM::Policy",
        "SageMakerStateRule": "AWS::Events::Rule",
    }
    # SageMaker has no queue: nothing is named after a pool.
    assert not [k for k in resources if k.startswith(("SmGpu", "SmBig"))]
    assert rendered["Outputs"]["SageMakerExecutionRoleArn"]["Value"] == ROLE_ARN
    assert sagemaker_resources([]) == ({}, {})
    assert not [k for k in template([PoolSpec(name="default"), EC2, BATCH])["Resources"] if "SageMaker" in k]


def test_the_execution_role_is_trusted_by_sagemaker_only():
    role = template(POOLS)["Resources"][EXECUTION_ROLE]
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust == {
        "Effect": "Allow",
        "Principal": {"Service": "sagemaker.amazonaws.com"},
        "Action": "sts:AssumeRole",
    }
    assert "Policies" not in role["Properties"] and "ManagedPolicyArns" not in role["Properties"]


def test_the_execution_policy_calls_the_credential_route_pulls_images_and_writes_the_stacks_logs():
    resources = template(POOLS)["Resources"]
    policy = resources["SageMakerExecutionPolicy"]
    # It names the REST API, which exists only with the control plane's code.
    assert policy["Condition"] == "HasCode" and policy["Properties"]["Roles"] == [{"Ref": EXECUTION_ROLE}]
    statements = _by_sid(policy)
    assert set(statements) == {
        "AgentCredential",
        "ReadOnceJobCredentials",
        "EcrToken",
        "PullTheTrainingImage",
        "TrainingJobsLogGroup",
        "TrainingJobsLogs",
        "ReadTheComputePackage",
        "ListTheComputePackage",
    }
    # SageMaker copies the `compute` channel (the compute package's folder) in as this role: only there.
    assert statements["ReadTheComputePackage"]["Action"] == "s3:GetObject"
    assert statements["ReadTheComputePackage"]["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/compute/*"
    }
    assert statements["ListTheComputePackage"]["Condition"] == {"StringLike": {"s3:prefix": "compute/*"}}
    # The job's agent calls the same route as an EC2 agent, and nothing else of the API.
    agent_route = _by_sid(resources["AgentPolicy"])["AgentCredential"]
    assert statements["AgentCredential"]["Action"] == "execute-api:Invoke"
    assert statements["AgentCredential"]["Resource"] == agent_route["Resource"]
    # Its agent reads and deletes its credential object (`--credential-from`), and no other object.
    assert statements["ReadOnceJobCredentials"] == {
        "Sid": "ReadOnceJobCredentials",
        "Effect": "Allow",
        "Action": ["s3:GetObject", "s3:DeleteObject"],
        "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/credentials/*"},
    }
    assert statements["EcrToken"] == {
        "Sid": "EcrToken",
        "Effect": "Allow",
        "Action": "ecr:GetAuthorizationToken",
        "Resource": "*",
    }
    assert sorted(statements["PullTheTrainingImage"]["Action"]) == [
        "ecr:BatchCheckLayerAvailability",
        "ecr:BatchGetImage",
        "ecr:GetDownloadUrlForLayer",
    ]
    assert statements["TrainingJobsLogs"]["Action"] == ["logs:CreateLogStream", "logs:PutLogEvents"]
    assert statements["TrainingJobsLogs"]["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:"
        "log-group:/aws/sagemaker/TrainingJobs:log-stream:${AWS::StackName}-*"
    }
    # Only ECR's actions reach "*"; every other ARN names the stack's partition, region and account.
    for sid, statement in statements.items():
        assert statement["Effect"] == "Allow"
        for resource in _as_list(statement["Resource"]):
            if resource == "*":
                assert sid in ("EcrToken", "PullTheTrainingImage")
                continue
            if sid in ("ReadOnceJobCredentials", "ReadTheComputePackage", "ListTheComputePackage"):
                # S3's ARNs name no region or account
                continue
            text = resource["Fn::Sub"]
            assert text.startswith("arn:${AWS::Partition}:") and ":${AWS::Region}:${AWS::AccountId}:" in text
            assert "arn:aws:" not in text


def test_the_control_plane_may_run_stop_and_pass_the_role_to_the_stacks_training_jobs_only():
    statements = _by_sid(template(POOLS)["Resources"][COMPUTE_POLICY])
    jobs = statements["RunTheStacksTrainingJobs"]
    assert sorted(jobs["Action"]) == [
        "sagemaker:AddTags",
        "sagemaker:CreateTrainingJob",
        "sagemaker:DescribeTrainingJob",
        "sagemaker:StopTrainingJob",
    ]
    assert jobs["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:sagemaker:${AWS::Region}:${AWS::AccountId}:"
        "training-job/${AWS::StackName}-*"
    }
    assert statements["PassTheExecutionRole"] == {
        "Sid": "PassTheExecutionRole",
        "Effect": "Allow",
        "Action": "iam:PassRole",
        "Resource": ROLE_ARN,
        "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
    }
    # Without EC2 pools, no right to scale groups; without Batch pools, none to submit jobs.
    assert "ScaleTheStacksGroups" not in statements and "SubmitToTheStacksQueues" not in statements
    mixed = _by_sid(template([*POOLS, EC2, BATCH])["Resources"][COMPUTE_POLICY])
    assert {"ScaleTheStacksGroups", "SubmitToTheStacksQueues", "RunTheStacksTrainingJobs"} <= set(mixed)
    assert "RunTheStacksTrainingJobs" not in _by_sid(template([EC2])["Resources"][COMPUTE_POLICY])


def test_the_stacks_training_job_state_changes_go_to_the_events_queue_as_compute_events():
    resources = template(POOLS)["Resources"]
    rule = resources[SAGEMAKER_STATE_RULE]["Properties"]
    assert rule["State"] == "ENABLED"
    assert rule["EventPattern"] == {
        "source": ["aws.sagemaker"],
        "detail-type": ["SageMaker Training Job State Change"],
        "detail": {"TrainingJobName": [{"prefix": {"Fn::Sub": "${AWS::StackName}-"}}]},
    }
    (target,) = rule["Targets"]
    (spot,) = resources["SpotWarningRule"]["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["EventsQueue", "Arn"]} == spot["Arn"]
    assert target["InputTransformer"] == spot["InputTransformer"]
    assert target["InputTransformer"]["InputTemplate"] == (
        '{"type": "compute_event", "event": <aws.events.event.json>}'
    )


@pytest.mark.parametrize(
    ("pools", "rules"),
    [
        (POOLS, ["SpotWarningRule", "SageMakerStateRule"]),
        ((*POOLS, EC2, BATCH), ["SpotWarningRule", "BatchStateRule", "SageMakerStateRule"]),
    ],
)
def test_the_events_queue_policy_lets_the_sagemaker_rule_send(pools, rules):
    policy = template(pools)["Resources"]["EventsQueuePolicy"]
    (statement,) = _statements(policy)
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert statement["Condition"]["ArnEquals"]["aws:SourceArn"] == [
        {"Fn::GetAtt": [rule, "Arn"]} for rule in rules
    ]


def test_the_functions_know_the_execution_role_only_with_a_sagemaker_pool():
    resources = template(POOLS)["Resources"]
    functions = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    assert functions
    for function in functions:
        assert function["Properties"]["Environment"]["Variables"][ROLE_VARIABLE] == ROLE_ARN
    without = template([PoolSpec(name="default"), EC2])["Resources"]["ApiFunction"]
    assert ROLE_VARIABLE not in without["Properties"]["Environment"]["Variables"]


def _pool(**provider: object) -> PoolSpec:
    return PoolSpec(name="sm-x", backend="sagemaker", provider=Provider(**provider))


@pytest.mark.parametrize(
    ("pool", "says"),
    [
        (_pool(instance_types=("ml.g5.xlarge",)), "has no image; give its provider the training image"),
        (PoolSpec(name="sm-x", backend="sagemaker"), "has no image"),
        (_pool(image=IMAGE), "has no instance type; give its provider an instance_type (e.g. ml.g5.xlarge)"),
        (
            _pool(instance_types=("ml.g5.xlarge", "g5.2xlarge"), image=IMAGE),
            "instance type 'g5.2xlarge', which is not a SageMaker type; use SageMaker's name for it, "
            "'ml.g5.2xlarge'",
        ),
    ],
)
def test_a_pool_sagemaker_could_not_run_is_refused_by_name_with_the_fix(pool, says):
    with pytest.raises(SageMakerTemplateError, match="SageMaker pool 'sm-x'") as raised:
        compute_resources([PoolSpec(name="default"), pool])
    assert says in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_a_sagemaker_pool_named_like_another_pool_is_refused():
    twin = PoolSpec(name="ec2", backend="sagemaker", provider=SPOT.provider)
    with pytest.raises(ValueError, match="pool 'ec2' is given twice"):
        compute_resources([EC2, twin])
