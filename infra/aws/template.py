"""The stack's resources as a CloudFormation template, for a real AWS account.

    det deploy aws up --cluster-id mylab          # renders it and deploys it (det/deploy/aws.py)
    python -m infra.aws.template > stratus.cfn.json   # or by hand, with BucketName (and CreateBucket=false
                                                  # to adopt a bucket kept from an earlier stack,
                                                  # CreateTables=false to adopt its tables)

Built from the same declarations as the local stack (`infra/local/resources.py`). IAM is least privilege
(`infra/aws/template_iam.py`): the API role reaches only this stack's tables, queues, bucket prefixes, log
group and state machine; the state machine's role can only update the trials table and send to its
three queues; the agent role has no AWS permission at all (agents speak only to the API, with a token,
and move bytes through presigned URLs) unless the stack has EC2 pools, whose instances may read the
compute package and call the credential route (`infra/aws/compute_resources.py`). Every ARN names its
partition. With a `CodeKey` (the Lambda package in the bucket), the stack also runs the control plane:
`infra/aws/template_app.py`.

    template()                     # the default pool only: the stack starts no machine
    template(pools)                # plus an Auto Scaling group and a launch template per EC2 pool
    template(pools, vcpus)         # with the instance types' vCPUs, for Batch pools of any type
    template(pools, tags={"team": "vision"})  # the user's tags on the pools' resources and, through the
                                   # functions' STRATUS_TAGS, on the jobs the control plane starts
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from chalicelib.settings import QUEUES
from chalicelib.workflow import WorkflowResources, compile_trial_workflow
from infra.aws.backends import control_environment
from infra.aws.bucket_rules import cfn_lifecycle, template_bucket_policy
from infra.aws.compute_resources import compute_resources
from infra.aws.template_app import CONDITIONS, PARAMETERS, QUEUE_IDS, app_resources
from infra.aws.template_iam import TABLE_IDS, api_policy, assume, events_queue_policy, states_policy
from infra.aws.template_monitoring import add_monitoring
from infra.aws.template_submissions import OUTPUTS as SUBMISSION_OUTPUTS
from infra.aws.template_submissions import template_pieces as submission_pieces
from infra.shape import TABLES, table_request
from stratus.contract.messages import EVERY_POOL, Sweep
from stratus.contract.pools import DEFAULT_POOLS, PoolSpec
from stratus.contract.tags import user_tags
from stratus.contract.versions import VERSION


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


#: `CreateTables`: whether the stack makes its tables. `det deploy aws up` passes false: it makes or adopts
#: them itself, outside the stack (`det/deploy/aws_tables.py`), as it does the bucket, so that the
#: experiments' records outlive `down` and the next stack of the name finds them; a template deployed by
#: hand makes them (and keeps them when the stack is deleted: DeletionPolicy Retain).
TABLE_PARAMETERS: dict[str, Any] = {
    "CreateTables": {
        "Type": "String",
        "AllowedValues": ["true", "false"],
        "Default": "true",
        "Description": "false: the tables <stack>-<name> exist already (made by det deploy aws up, or kept)",
    },
}
TABLE_CONDITIONS: dict[str, Any] = {"MakeTables": {"Fn::Equals": [{"Ref": "CreateTables"}, "true"]}}


def _table(spec_name: str) -> dict[str, Any]:
    spec = next(s for s in TABLES if s.name == spec_name)
    request = table_request_for_cfn(spec)
    return {
        "Type": "AWS::DynamoDB::Table",
        "Condition": "MakeTables",
        # The records outlive the stack: a stack of the same name finds them again (with CreateTables=false);
        # `det deploy aws down --delete-data` deletes them.
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": request,
    }


def table_request_for_cfn(spec: Any) -> dict[str, Any]:
    from infra.shape import StackNames

    request = table_request(StackNames(stack="STACK"), spec)
    request["TableName"] = _sub(request["TableName"].replace("STACK", "${AWS::StackName}"))
    request["PointInTimeRecoverySpecification"] = {"PointInTimeRecoveryEnabled": True}
    request["SSESpecification"] = {"SSEEnabled": True}
    return request


def _queue(kind: str) -> dict[str, Any]:
    fifo = QUEUES[kind].endswith(".fifo")
    properties: dict[str, Any] = {
        "QueueName": _sub("${AWS::StackName}-" + QUEUES[kind]),
        "VisibilityTimeout": 180,  # six times the handlers' 30 s timeout, as AWS advises
        "MessageRetentionPeriod": 1_209_600,
        "SqsManagedSseEnabled": True,
        "RedrivePolicy": {
            "deadLetterTargetArn": {"Fn::GetAtt": [QUEUE_IDS[kind] + "Dlq", "Arn"]},
            "maxReceiveCount": 5,
        },
    }
    if fifo:
        properties["FifoQueue"] = True
        # For senders that cannot give a deduplication id (the EventBridge sweep); ours always give one.
        properties["ContentBasedDeduplication"] = True
    return {"Type": "AWS::SQS::Queue", "Properties": properties}


def _dlq(kind: str) -> dict[str, Any]:
    name = (
        QUEUES[kind].replace(".fifo", "-dlq.fifo")
        if QUEUES[kind].endswith(".fifo")
        else QUEUES[kind] + "-dlq"
    )
    properties: dict[str, Any] = {
        "QueueName": _sub("${AWS::StackName}-" + name),
        "MessageRetentionPeriod": 1_209_600,
        "SqsManagedSseEnabled": True,
    }
    if QUEUES[kind].endswith(".fifo"):
        properties["FifoQueue"] = True
    return {"Type": "AWS::SQS::Queue", "Properties": properties}


def _sweep_schedule() -> dict[str, Any]:
    """A `sweep` message to the scheduler queue every minute, so a scheduling pass runs (and ends the runs
    of agents that stopped heartbeating) even when nothing else happens; EventBridge may send to that
    queue only for this rule."""
    return {
        "SweepRule": {
            "Type": "AWS::Events::Rule",
            "Properties": {
                "Description": "A sweep of every pool: ends the runs of lost agents, lets idle instances go",
                "ScheduleExpression": "rate(1 minute)",
                "State": "ENABLED",
                "Targets": [
                    {
                        "Id": "scheduler-sweep",
                        "Arn": {"Fn::GetAtt": ["SchedulerQueue", "Arn"]},
                        # The event's time makes every minute's body (its deduplication id) unique.
                        "InputTransformer": {
                            "InputPathsMap": {"time": "$.time"},
                            # EventBridge fills in <time>: the body of a stratus.contract.messages.Sweep, for
                            # every pool (the scheduler sends one sweep per configured pool on).
                            "InputTemplate": json.dumps(Sweep(EVERY_POOL, at="<time>").to_body()),
                        },
                        "SqsParameters": {"MessageGroupId": "sweep"},
                    }
                ],
            },
        },
        "SchedulerQueuePolicy": events_queue_policy("SchedulerQueue", {"Fn::GetAtt": ["SweepRule", "Arn"]}),
    }


def template(
    pools: Sequence[PoolSpec] = DEFAULT_POOLS,
    vcpus: Mapping[str, int] | None = None,
    tags: Mapping[str, str] | None = None,
    memory: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The stack of these resource pools: its EC2 pools' groups and launch templates come from
    `infra/aws/compute_resources.py`; with local pools only, the stack starts no machine. `vcpus`: each
    instance type's vCPUs, which size the Batch pools (`det deploy aws up` reads them from EC2; None:
    the common GPU types of `infra.aws.compute_batch.DEFAULT_VCPUS` only). `tags`: the user's (`--add-tag`),
    on every pool resource that tags what it starts and in the functions' `STRATUS_TAGS`; none, and the
    template is the one without. A tag AWS would refuse, or too many, is `stratus.contract.errors.InvalidTagError`.
    `memory`: each instance type's memory (MiB), which caps a Batch job's where a type has less than 4 GiB
    a vCPU."""
    checked = user_tags(tags or {})
    definition = compile_trial_workflow(
        WorkflowResources(
            trials_table="${AWS::StackName}-trials",  # by name: see CreateTables
            scheduler_queue_url="${SchedulerQueue}",
            launch_queue_url="${LaunchQueue}",
            events_queue_url="${EventsQueue}",
            partition="${AWS::Partition}",
        )
    )
    parameters, conditions, compute, compute_outputs = compute_resources(pools, vcpus, checked, memory)
    cloud = "AgentPolicy" in compute  # cloud pools' agents sign their credential request
    resources: dict[str, Any] = {
        "Bucket": {
            "Type": "AWS::S3::Bucket",
            "Condition": "MakeBucket",
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": {
                "BucketName": {"Ref": "BucketName"},
                "PublicAccessBlockConfiguration": {
                    "BlockPublicAcls": True,
                    "BlockPublicPolicy": True,
                    "IgnorePublicAcls": True,
                    "RestrictPublicBuckets": True,
                },
                "BucketEncryption": {
                    "ServerSideEncryptionConfiguration": [
                        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
                    ]
                },
                # The credentials' expiry and any other rule of infra/aws/bucket_rules.py, which `det deploy aws
                # up` applies to the bucket it makes or adopts.
                "LifecycleConfiguration": cfn_lifecycle(),
            },
        },
        "TrialLogGroup": {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"LogGroupName": _sub("/${AWS::StackName}/trials"), "RetentionInDays": 90},
        },
        "TokenSecret": {
            "Type": "AWS::SecretsManager::Secret",
            "Properties": {
                "Name": _sub("${AWS::StackName}/run-token-key"),
                "Description": "HMAC key of the run tokens",
                "GenerateSecretString": {"PasswordLength": 48, "ExcludePunctuation": True},
            },
        },
        "AgentTokenSecret": {
            "Type": "AWS::SecretsManager::Secret",
            "Properties": {
                "Name": _sub("${AWS::StackName}/agent-token"),
                "Description": "Bearer token of the agents",
                "GenerateSecretString": {"PasswordLength": 48, "ExcludePunctuation": True},
            },
        },
        "StatesRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": assume("states.amazonaws.com"),
                "Policies": [{"PolicyName": "trial-run", "PolicyDocument": states_policy()}],
            },
        },
        "ApiRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": assume("lambda.amazonaws.com"),
                "Policies": [{"PolicyName": "control-plane", "PolicyDocument": api_policy()}],
            },
        },
        "AgentRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": assume("ec2.amazonaws.com"),
                "Description": "Cloud pools' agents: their AgentPolicy"
                if cloud
                else "Agents need no AWS permission",
            },
        },
        "TrialRunStateMachine": {
            "Type": "AWS::StepFunctions::StateMachine",
            "Properties": {
                "StateMachineName": _sub("${AWS::StackName}-trial-run"),
                "StateMachineType": "STANDARD",
                "RoleArn": {"Fn::GetAtt": ["StatesRole", "Arn"]},
                "DefinitionString": _sub(json.dumps(definition, sort_keys=True)),
            },
        },
    }
    resources["BucketPolicy"] = template_bucket_policy("Bucket", "MakeBucket")  # TLS only, with the bucket
    resources.update(_sweep_schedule())
    resources.update(submission_pieces(resources["Bucket"]))  # markers to the submissions queue
    for spec in TABLES:
        resources[TABLE_IDS[spec.name]] = _table(spec.name)
    for kind, logical in QUEUE_IDS.items():
        resources[logical] = _queue(kind)
        resources[logical + "Dlq"] = _dlq(kind)
    functions, function_outputs = app_resources(pools, checked, control_environment(pools))
    resources.update(functions)
    resources.update(compute)
    outputs = {
        **function_outputs,
        **compute_outputs,
        **SUBMISSION_OUTPUTS,
        "BucketName": {"Value": {"Ref": "BucketName"}},
        # The version that rendered this template (`det deploy aws up` deploys its own version's package;
        # `det version` shows the API's own and the agents').
        "StratusVersion": {
            "Description": "The Stratus version this stack was deployed with",
            "Value": VERSION,
        },
        "SchedulerQueueUrl": {"Value": {"Ref": "SchedulerQueue"}},
        "LaunchQueueUrl": {"Value": {"Ref": "LaunchQueue"}},
        "EventsQueueUrl": {"Value": {"Ref": "EventsQueue"}},
        "StateMachineArn": {"Value": {"Ref": "TrialRunStateMachine"}},
        "ApiRoleArn": {"Value": {"Fn::GetAtt": ["ApiRole", "Arn"]}},
        "AgentRoleArn": {"Value": {"Fn::GetAtt": ["AgentRole", "Arn"]}},
        # For the functions' STRATUS_TOKEN_SECRET_ARN and STRATUS_AGENT_TOKEN_ARN.
        "TokenSecretArn": {"Value": {"Ref": "TokenSecret"}},
        "AgentTokenSecretArn": {"Value": {"Ref": "AgentTokenSecret"}},
    }
    rendered = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "Stratus: serverless control plane for deep-learning experiments",
        "Parameters": {**PARAMETERS, **TABLE_PARAMETERS, **parameters},
        "Conditions": {**CONDITIONS, **TABLE_CONDITIONS, **conditions},
        "Resources": resources,
        "Outputs": outputs,
    }
    add_monitoring(rendered)  # alarms, dashboard, log retention: infra/aws/template_monitoring.py
    return rendered


if __name__ == "__main__":
    json.dump(template(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
