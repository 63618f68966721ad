"""What the cloud pools' parts of the stack share (`infra.aws.compute_resources` merges the parts of
`infra.aws.backends`): the inputs every part renders with and its error, the pools' logical ids, and, for
the pools whose instances run in the agents' network (EC2 and Batch), the agents' security group (the
trial's nodes reach each other; SSH only with a key pair, from `InboundCidr`) and the agents' role,
instance profile and policy (the credential route, the compute package)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.boot import STAGE
from stratus.contract.pools import PoolSpec

Template = dict[str, Any]


class ComputeTemplateError(ValueError):
    """A cloud pool the template cannot render (the message names the pool and the fix)."""


@dataclass(frozen=True)
class PoolInputs:
    """What a backend's part renders its pools with besides the pools: the user's tags (checked already,
    `stratus.contract.tags.user_tags`), put after Stratus's own on each pool resource, and each instance
    type's vCPUs and memory (MiB) where `det deploy aws up` read them from EC2 (None: not known)."""

    tags: Mapping[str, str] = field(default_factory=dict)
    vcpus: Mapping[str, int] | None = None
    memory: Mapping[str, int] | None = None


def logical_ids(pools: Sequence[PoolSpec]) -> dict[str, str]:
    """Each pool's logical id prefix (`gpu-a` -> `GpuAPool`): its name's letters and digits, each part
    capitalised; where two names give the same one, each ends with a hash of its name instead."""
    bases = {
        pool.name: "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", pool.name))
        for pool in pools
    }
    taken = list(bases.values())
    return {
        name: (
            base if base and taken.count(base) == 1 else base + hashlib.sha1(name.encode()).hexdigest()[:8]
        )
        + "Pool"
        for name, base in bases.items()
    }


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def agent_network() -> Template:
    group_id = {"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}
    return {
        "AgentSecurityGroup": {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {
                # Agents poll the API: nothing comes in but a trial's other nodes (and SSH with a key).
                "GroupDescription": "Stratus agents: the nodes of a trial reach each other",
                "VpcId": {"Ref": "AgentVpcId"},
                "Tags": [
                    {"Key": "stratus:cluster-id", "Value": {"Ref": "AWS::StackName"}},
                    {"Key": "Name", "Value": _sub("${AWS::StackName}-agents")},
                ],
            },
        },
        "AgentSelfIngress": {
            "Type": "AWS::EC2::SecurityGroupIngress",
            "Properties": {
                "Description": "The nodes of a trial: NCCL, gloo and the rendezvous on any port",
                "GroupId": group_id,
                "IpProtocol": "-1",
                "SourceSecurityGroupId": group_id,
            },
        },
        "AgentSshIngress": {
            "Type": "AWS::EC2::SecurityGroupIngress",
            "Condition": "HasKeyName",
            "Properties": {
                "Description": "SSH with the key pair of the stack",
                "GroupId": group_id,
                "IpProtocol": "tcp",
                "FromPort": 22,
                "ToPort": 22,
                "CidrIp": {"Ref": "InboundCidr"},
            },
        },
    }


def agent_identity() -> Template:
    """The instance profile of the template's agent role, and the role's policy: read the compute
    package, and call the one route that turns the instance's identity into its agent credential."""
    return {
        "AgentInstanceProfile": {
            "Type": "AWS::IAM::InstanceProfile",
            "Properties": {"Roles": [{"Ref": "AgentRole"}]},
        },
        "AgentPolicy": {
            "Type": "AWS::IAM::Policy",
            "Condition": "HasCode",
            "Properties": {
                "PolicyName": "agent",
                "Roles": [{"Ref": "AgentRole"}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "ComputePackage",
                            "Effect": "Allow",
                            "Action": "s3:GetObject",
                            "Resource": _sub("arn:${AWS::Partition}:s3:::${BucketName}/compute/*"),
                        },
                        {
                            "Sid": "AgentCredential",
                            "Effect": "Allow",
                            "Action": "execute-api:Invoke",
                            "Resource": _sub(
                                "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${RestApi}/"
                                + STAGE
                                + "/POST/agents/*/iam-credential"
                            ),
                        },
                    ],
                },
            },
        },
    }
