"""The stack's resources as a CloudFormation template, for a real AWS account.

    det deploy aws up --cluster-id mylab          # renders it and deploys it (det/_deploy_aws.py)
    python -m infra.template > stratus.cfn.json   # or by hand, with BucketName (and CreateBucket=false
                                                  # to adopt a bucket kept from an earlier stack)

Built from the same declarations as the local stack (`infra/resources.py`). IAM is least privilege:
the API role reaches only this stack's tables, queues, bucket prefixes, log group and state machine; the
state machine's role can only update the trials table and send to its three queues; the agent role has
no AWS permission at all (agents speak only to the API, with a token, and move bytes through presigned
URLs). Every ARN names its partition. With a `CodeKey` (the Lambda package in the bucket), the stack
also runs the control plane: `infra/template_app.py`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from chalicelib.settings import QUEUES
from chalicelib.workflow import WorkflowResources, compile_trial_workflow
from contract.messages import Sweep
from infra.resources import TABLES, table_request
from infra.template_app import CONDITIONS, PARAMETERS, QUEUE_IDS, app_resources

_TABLE_IDS = {spec.name: spec.name.capitalize() + "Table" for spec in TABLES}


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def _table(spec_name: str) -> dict[str, Any]:
    spec = next(s for s in TABLES if s.name == spec_name)
    request = table_request_for_cfn(spec)
    return {
        "Type": "AWS::DynamoDB::Table",
        # The records go with the stack (a re-created stack must be able to make its tables again); the
        # bucket, which holds the checkpoints and contexts, is kept and adopted by the next stack.
        "DeletionPolicy": "Delete",
        "UpdateReplacePolicy": "Retain",
        "Properties": request,
    }


def table_request_for_cfn(spec: Any) -> dict[str, Any]:
    from infra.resources import StackNames

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


def _table_arns() -> list[Any]:
    arns: list[Any] = []
    for spec in TABLES:
        arn = {"Fn::GetAtt": [_TABLE_IDS[spec.name], "Arn"]}
        arns.append(arn)
        if spec.indexes:
            arns.append({"Fn::Join": ["", [arn, "/index/*"]]})
    return arns


def _assume(service: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    }


def api_policy() -> dict[str, Any]:
    queue_arns = [{"Fn::GetAtt": [q, "Arn"]} for q in QUEUE_IDS.values()]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "Tables",
                "Effect": "Allow",
                "Action": [
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    # Deleting an experiment's records (one by one, and the metrics in batches).
                    "dynamodb:DeleteItem",
                    "dynamodb:BatchWriteItem",
                    "dynamodb:Query",
                    "dynamodb:Scan",
                ],
                "Resource": _table_arns(),
            },
            {
                "Sid": "ContextsAndCheckpoints",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": [
                    _sub("arn:${AWS::Partition}:s3:::${BucketName}/contexts/*"),
                    _sub("arn:${AWS::Partition}:s3:::${BucketName}/uploads/*"),
                    _sub("arn:${AWS::Partition}:s3:::${BucketName}/checkpoints/*"),
                    _sub("arn:${AWS::Partition}:s3:::${BucketName}/submissions/*"),
                ],
            },
            {
                "Sid": "HeadMissingObjects",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": _sub("arn:${AWS::Partition}:s3:::${BucketName}"),
            },
            {
                "Sid": "Queues",
                "Effect": "Allow",
                "Action": [
                    "sqs:SendMessage",
                    "sqs:ReceiveMessage",
                    "sqs:DeleteMessage",
                    "sqs:GetQueueAttributes",
                ],
                "Resource": queue_arns,
            },
            {
                # Agents' doorbells (chalicelib.aws.bells): a queue per agent, made at its first heartbeat
                # and deleted at its last; ReceiveMessage because the agents' presigned polls act as this role.
                "Sid": "AgentBells",
                "Effect": "Allow",
                "Action": [
                    "sqs:CreateQueue",
                    "sqs:GetQueueUrl",
                    "sqs:TagQueue",
                    "sqs:SendMessage",
                    "sqs:ReceiveMessage",
                    "sqs:DeleteQueue",
                ],
                "Resource": _sub(
                    "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${AWS::StackName}-agent-*"
                ),
            },
            {
                "Sid": "StartTrialRuns",
                "Effect": "Allow",
                "Action": "states:StartExecution",
                "Resource": {"Ref": "TrialRunStateMachine"},
            },
            {
                "Sid": "AnswerTaskTokens",
                "Effect": "Allow",
                "Action": ["states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"],
                # These actions have no resource type (the service authorization reference lists none):
                # a task token names its execution, so only "*" is sure to be allowed.
                "Resource": "*",
            },
            {
                # The run tokens' key and the agents' token (chalicelib.aws.secrets), read at cold start.
                "Sid": "ReadTokens",
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": [{"Ref": "TokenSecret"}, {"Ref": "AgentTokenSecret"}],
            },
            {
                "Sid": "TrialLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:GetLogEvents"],
                "Resource": _sub(
                    "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/${AWS::StackName}/trials:*"
                ),
            },
            {
                "Sid": "OwnLambdaLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": _sub(
                    "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/aws/lambda/${AWS::StackName}-*"
                ),
            },
        ],
    }


def _states_policy() -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "TrialStates",
                "Effect": "Allow",
                "Action": "dynamodb:UpdateItem",
                "Resource": {"Fn::GetAtt": ["TrialsTable", "Arn"]},
            },
            {
                "Sid": "Queues",
                "Effect": "Allow",
                "Action": "sqs:SendMessage",
                "Resource": [{"Fn::GetAtt": [q, "Arn"]} for q in QUEUE_IDS.values()],
            },
        ],
    }


def _sweep_schedule() -> dict[str, Any]:
    """A `sweep` message to the scheduler queue every minute, so a scheduling pass runs (and ends the runs
    of agents that stopped heartbeating) even when nothing else happens; EventBridge may send to that
    queue only for this rule."""
    return {
        "SweepRule": {
            "Type": "AWS::Events::Rule",
            "Properties": {
                "Description": "Scheduling pass of the default pool: ends the runs of lost agents",
                "ScheduleExpression": "rate(1 minute)",
                "State": "ENABLED",
                "Targets": [
                    {
                        "Id": "scheduler-sweep",
                        "Arn": {"Fn::GetAtt": ["SchedulerQueue", "Arn"]},
                        # The event's time makes every minute's body (its deduplication id) unique.
                        "InputTransformer": {
                            "InputPathsMap": {"time": "$.time"},
                            # EventBridge fills in <time>: the body of a contract.messages.Sweep.
                            "InputTemplate": json.dumps(Sweep("default", at="<time>").to_body()),
                        },
                        "SqsParameters": {"MessageGroupId": "default"},
                    }
                ],
            },
        },
        "SchedulerQueuePolicy": {
            "Type": "AWS::SQS::QueuePolicy",
            "Properties": {
                "Queues": [{"Ref": "SchedulerQueue"}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "events.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": {"Fn::GetAtt": ["SchedulerQueue", "Arn"]},
                            "Condition": {
                                "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["SweepRule", "Arn"]}}
                            },
                        }
                    ],
                },
            },
        },
    }


def template() -> dict[str, Any]:
    definition = compile_trial_workflow(
        WorkflowResources(
            trials_table="${TrialsTable}",
            scheduler_queue_url="${SchedulerQueue}",
            launch_queue_url="${LaunchQueue}",
            events_queue_url="${EventsQueue}",
            partition="${AWS::Partition}",
        )
    )
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
                "AssumeRolePolicyDocument": _assume("states.amazonaws.com"),
                "Policies": [{"PolicyName": "trial-run", "PolicyDocument": _states_policy()}],
            },
        },
        "ApiRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": _assume("lambda.amazonaws.com"),
                "Policies": [{"PolicyName": "control-plane", "PolicyDocument": api_policy()}],
            },
        },
        "AgentRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": _assume("ec2.amazonaws.com"),
                "Description": "Agents need no AWS permission",
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
    resources.update(_sweep_schedule())
    for spec in TABLES:
        resources[_TABLE_IDS[spec.name]] = _table(spec.name)
    for kind, logical in QUEUE_IDS.items():
        resources[logical] = _queue(kind)
        resources[logical + "Dlq"] = _dlq(kind)
    functions, function_outputs = app_resources()
    resources.update(functions)
    outputs = {
        **function_outputs,
        "BucketName": {"Value": {"Ref": "BucketName"}},
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
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "Stratus: serverless control plane for deep-learning experiments",
        "Parameters": PARAMETERS,
        "Conditions": CONDITIONS,
        "Resources": resources,
        "Outputs": outputs,
    }


if __name__ == "__main__":
    json.dump(template(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
