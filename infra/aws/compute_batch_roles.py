"""The roles a stack's Batch pools share (`infra.aws.compute_batch`): Batch's service role, its instances' role
and instance profile, and the jobs' role with its least-privilege policy."""

from __future__ import annotations

from typing import Any

from infra.aws.template_iam import COMPUTE_PACKAGES, JOB_CREDENTIALS, assume
from infra.boot import STAGE

Template = dict[str, Any]


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def _managed_policy(name: str) -> dict[str, str]:
    return _sub("arn:${AWS::Partition}:iam::aws:policy/service-role/" + name)


def allow(sid: str, action: str | list[str], resource: Any) -> Template:
    return {"Sid": sid, "Effect": "Allow", "Action": action, "Resource": resource}


def shared_roles() -> Template:
    route = _sub(
        "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${RestApi}/"
        + STAGE
        + "/POST/agents/*/iam-credential"
    )
    return {
        # Explicit (AWS would take its service-linked role instead; moto requires a role).
        "BatchServiceRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": assume("batch.amazonaws.com"),
                "ManagedPolicyArns": [_managed_policy("AWSBatchServiceRole")],
                "Description": "AWS Batch manages the Stratus Batch pools' compute environments",
            },
        },
        "BatchInstanceRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": assume("ec2.amazonaws.com"),
                # The ECS agent: register the instance, pull the image, send the container's logs.
                "ManagedPolicyArns": [_managed_policy("AmazonEC2ContainerServiceforEC2Role")],
                "Description": "The instances of the Stratus Batch pools (ECS container instances)",
            },
        },
        "BatchInstanceProfile": {
            "Type": "AWS::IAM::InstanceProfile",
            "Properties": {"Roles": [{"Ref": "BatchInstanceRole"}]},
        },
        "BatchJobRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": assume("ecs-tasks.amazonaws.com"),
                "Description": "The Stratus Batch pools' jobs: their BatchJobPolicy",
            },
        },
        # Trials move bytes through presigned URLs: the job's agent only reads its agent credential, once
        # (`credentials/<job>/<lane>`, written by the control plane: the job's session names no job, so
        # the IAM credential route cannot tell which lanes are its own).
        "BatchJobPolicy": {
            "Type": "AWS::IAM::Policy",
            "Condition": "HasCode",
            "Properties": {
                "PolicyName": "batch-job",
                "Roles": [{"Ref": "BatchJobRole"}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        allow("AgentCredential", "execute-api:Invoke", route),
                        allow("ReadOnceJobCredentials", ["s3:GetObject", "s3:DeleteObject"], JOB_CREDENTIALS),
                        # The job's container installs the stack's compute package (`stratus.contract.container_boot`).
                        allow("ReadTheComputePackage", "s3:GetObject", COMPUTE_PACKAGES),
                    ],
                },
            },
        },
    }
