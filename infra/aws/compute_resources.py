"""The EC2 pools' part of the stack (`infra/aws/template.py` merges it): an Auto Scaling group and a launch
template per pool, the agents' security group, instance profile and policy, the control plane's scaling
permissions, and the spot interruption warnings routed to the events queue. The Batch pools' part
(`infra/aws/compute_batch.py`) joins it and shares the agents' network; the SageMaker pools' part
(`infra/aws/compute_sagemaker.py`, no per-pool resource) joins it too.

    parameters, conditions, resources, outputs = compute_resources(pools, vcpus, tags)

Nothing for a stack without EC2, Batch or SageMaker pools. Each parameter only where a pool uses it
(CloudFormation refuses a template with a parameter no resource uses): the AMI and the compute package
with EC2 pools, the agents' network (subnets, VPC, SSH key and CIDR) and its security group with EC2 or
Batch pools, whose instances run in it; SageMaker runs its jobs in a network of its own. A group has no
desired capacity: the control plane alone sets it (upward with `SetDesiredCapacity`, downward only by
terminating the instances it chose idle, so every instance is protected from AWS's own scale-in), and a
stack update never resets a scaled group.

The pools' resources wait for the control plane (`HasCode`): their agents need its API (the user data's
`--api`, the agent policy's credential route), and nothing else scales the groups. `det deploy aws up`
fills the parameters: the Deep Learning AMI (`AgentAmiId`, resolved from AWS's public SSM parameter),
the subnets and their VPC, the compute package's key (`ComputeKey`, uploaded next to the Lambda package);
and the vCPUs of the Batch pools' instance types (`vcpus`, from `ec2:DescribeInstanceTypes`). The user's
tags (`tags`, `--add-tag`, checked by `stratus.contract.tags`) follow Stratus's own on every pool resource that
tags what it starts: the launch templates' instances and volumes, the groups (propagated at launch), and
the Batch pools' environments, their instances, queues, policies and job definitions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from infra.aws.compute_agents import agent_identity, agent_network
from infra.aws.compute_batch import BATCH_STATE_RULE, batch_resources, control_statements
from infra.aws.compute_sagemaker import SAGEMAKER_STATE_RULE, sagemaker_resources
from infra.aws.compute_sagemaker import control_statements as sagemaker_statements
from infra.aws.template_app import COMPUTE_POLICY, QUEUE_IDS, group_name
from infra.boot import user_data
from stratus.contract.pools import POOL_NAME, PoolSpec, Provider

Template = dict[str, Any]

#: What a pool name may be to stand unquoted in its agents' unit and name its group and launch template.
ROOT_VOLUME_GB = 200  # as Determined's agents
#: The Deep Learning AMI's root device on Amazon Linux 2023 (an Ubuntu DLAMI's is /dev/sda1).
ROOT_DEVICE = "/dev/xvda"
SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
#: The events queue's message of any AWS event (contract `ComputeEvent`): EventBridge fills in the event.
COMPUTE_EVENT = '{"type": "compute_event", "event": <aws.events.event.json>}'
EVENTS_QUEUE = QUEUE_IDS["events"]

PARAMETERS: Template = {
    "AgentAmiId": {
        "Type": "AWS::EC2::Image::Id",
        "Description": "The agents' AMI: a Deep Learning AMI with PyTorch (det deploy aws up resolves it)",
    },
    "AgentSubnetIds": {
        "Type": "CommaDelimitedList",
        "Description": "The subnets of the agents' instances (det deploy aws up: --agent-subnet-id, else the default VPC's)",
    },
    "AgentVpcId": {"Type": "AWS::EC2::VPC::Id", "Description": "The VPC of AgentSubnetIds"},
    "InboundCidr": {
        "Type": "String",
        "Default": "0.0.0.0/0",
        "AllowedPattern": r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$",
        "Description": "Where SSH to the agents may come from (only with a KeyName)",
    },
    "KeyName": {
        "Type": "String",
        "Default": "",
        "Description": "An EC2 key pair for SSH to the agents; empty: no SSH",
    },
    "ComputeKey": {
        "Type": "String",
        "Default": "",
        "AllowedPattern": r"^(compute/([0-9a-f]{64}/)?[A-Za-z0-9._+-]+)?$",
        "Description": "The agents' package in the bucket (compute/...), uploaded by det deploy aws up; "
        "empty: the instances and container jobs cannot install the agent",
    },
}
CONDITIONS: Template = {"HasKeyName": {"Fn::Not": [{"Fn::Equals": [{"Ref": "KeyName"}, ""]}]}}
#: The parameters of EC2 pools only: Batch's instances boot the ECS AMI and run their jobs' image.
EC2_PARAMETERS = ("AgentAmiId",)
#: The parameters of the agents' network, with EC2 or Batch pools (their instances run in it).
NETWORK_PARAMETERS = ("AgentSubnetIds", "AgentVpcId", "InboundCidr", "KeyName")


class ComputeTemplateError(ValueError):
    """An EC2 pool the template cannot render (the message names the pool and the fix)."""


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


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


def _provider(pool: PoolSpec) -> Provider:
    if not POOL_NAME.match(pool.name):
        raise ComputeTemplateError(
            f"pool name {pool.name!r} cannot name an EC2 Auto Scaling group; use letters, digits, '-' or '_' "
            "(at most 63, starting with a letter or digit)"
        )
    if pool.provider is None or not pool.provider.instance_types:
        raise ComputeTemplateError(
            f"EC2 pool {pool.name!r} has no instance type; give its provider an instance_type (e.g. g5.xlarge)"
        )
    return pool.provider


def compute_resources(
    pools: Sequence[PoolSpec],
    vcpus: Mapping[str, int] | None = None,
    tags: Mapping[str, str] | None = None,
    memory: Mapping[str, int] | None = None,
) -> tuple[Template, Template, Template, Template]:
    """The cloud pools' (parameters, conditions, resources, outputs): all empty without them. `vcpus` and
    `memory` (MiB): each Batch pool's instance types' (`infra.aws.compute_batch.batch_resources`); `tags`: the
    user's (checked already, `stratus.contract.tags.user_tags`), after Stratus's own on each pool resource."""
    ec2 = [pool for pool in pools if pool.backend == "ec2"]
    batch = [pool for pool in pools if pool.backend == "batch"]
    sagemaker = [pool for pool in pools if pool.backend == "sagemaker"]
    if not ec2 and not batch and not sagemaker:
        return {}, {}, {}, {}
    providers = {pool.name: _provider(pool) for pool in ec2}
    names = [pool.name for pool in ec2 + batch + sagemaker]
    if len(set(names)) < len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise ComputeTemplateError(f"pool {twice[0]!r} is given twice; name each pool once")
    ids = logical_ids(ec2)
    batched, outputs = batch_resources(batch, logical_ids(batch), vcpus, tags, memory)
    trained, trained_outputs = sagemaker_resources(sagemaker)
    outputs.update(trained_outputs)
    rules = [
        "SpotWarningRule",
        *([BATCH_STATE_RULE] if batch else []),
        *([SAGEMAKER_STATE_RULE] if sagemaker else []),
    ]
    networked = bool(ec2 or batch)  # pools whose instances run in the agents' network
    shared = {**(agent_network() if networked else {}), **agent_identity(), **_spot_warnings(rules)}
    resources: Template = {**shared, **batched, **trained}
    jobs = [*(control_statements() if batch else []), *(sagemaker_statements() if sagemaker else [])]
    resources[COMPUTE_POLICY] = _control_policy(bool(ec2), jobs)
    for pool in ec2:
        logical = ids[pool.name]
        pool_tags = _tags(pool.name, tags or {})
        resources[logical + "LaunchTemplate"] = _launch_template(pool, pool_tags)
        resources[logical + "Group"] = _group(
            pool, providers[pool.name], logical + "LaunchTemplate", pool_tags
        )
        outputs[logical + "GroupName"] = {
            "Condition": "HasCode",
            "Description": f"The Auto Scaling group of pool {pool.name}",
            "Value": {"Ref": logical + "Group"},
        }
    unused = (*(() if ec2 else EC2_PARAMETERS), *(() if networked else NETWORK_PARAMETERS))
    parameters = {k: v for k, v in PARAMETERS.items() if k not in unused}
    return parameters, dict(CONDITIONS) if networked else {}, resources, outputs


def _tags(pool: str, user: Mapping[str, str]) -> list[dict[str, Any]]:
    """A pool's instances' tags: Stratus's, then the user's by key."""
    return [
        {"Key": "stratus:cluster-id", "Value": {"Ref": "AWS::StackName"}},
        {"Key": "stratus:pool", "Value": pool},
        {"Key": "Name", "Value": _sub(group_name(pool))},
        *({"Key": key, "Value": value} for key, value in sorted(user.items())),
    ]


def _launch_template(pool: PoolSpec, tags: list[dict[str, Any]]) -> Template:
    return {
        "Type": "AWS::EC2::LaunchTemplate",
        "Condition": "HasCode",
        "Properties": {
            "LaunchTemplateName": _sub(group_name(pool.name)),
            "LaunchTemplateData": {
                "ImageId": {"Ref": "AgentAmiId"},
                "IamInstanceProfile": {"Arn": {"Fn::GetAtt": ["AgentInstanceProfile", "Arn"]}},
                "SecurityGroupIds": [{"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}],
                # IMDSv2 only; two hops so that a trial in a container still reaches it (as Determined).
                "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 2},
                "BlockDeviceMappings": [
                    {
                        "DeviceName": ROOT_DEVICE,
                        "Ebs": {
                            "VolumeSize": ROOT_VOLUME_GB,
                            "VolumeType": "gp3",
                            "DeleteOnTermination": True,
                            "Encrypted": True,
                        },
                    }
                ],
                # An instance that shuts itself down is gone, not a stopped instance still paid for its disk.
                "InstanceInitiatedShutdownBehavior": "terminate",
                "KeyName": {"Fn::If": ["HasKeyName", {"Ref": "KeyName"}, {"Ref": "AWS::NoValue"}]},
                "UserData": user_data(pool.name, pool.slots_per_agent or 1),
                "TagSpecifications": [
                    {"ResourceType": kind, "Tags": [dict(tag) for tag in tags]}
                    for kind in ("instance", "volume")
                ],
            },
        },
    }


def _group(pool: PoolSpec, provider: Provider, launch_template: str, tags: list[dict[str, Any]]) -> Template:
    distribution: Template = {
        "OnDemandBaseCapacity": 0,
        "OnDemandPercentageAboveBaseCapacity": 0 if provider.spot else 100,
        "OnDemandAllocationStrategy": "prioritized",  # the instance types in the pool's order
        "SpotAllocationStrategy": "price-capacity-optimized",
    }
    if provider.spot_max_price:
        distribution["SpotMaxPrice"] = provider.spot_max_price
    return {
        "Type": "AWS::AutoScaling::AutoScalingGroup",
        "Condition": "HasCode",
        # The instances fetch the compute package as they boot: their role may do so first.
        "DependsOn": ["AgentPolicy"],
        "Properties": {
            "AutoScalingGroupName": _sub(group_name(pool.name)),
            "MinSize": str(provider.min_instances),
            "MaxSize": str(provider.max_instances),
            # No DesiredCapacity: the control plane owns it, and a stack update must not reset it.
            "VPCZoneIdentifier": {"Ref": "AgentSubnetIds"},
            # AWS never picks the instance to stop: the control plane terminates idle ones by id.
            "NewInstancesProtectedFromScaleIn": True,
            # A rebalance would stop a busy instance without draining it; spot warnings drain instead.
            "CapacityRebalance": False,
            "MixedInstancesPolicy": {
                "LaunchTemplate": {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateId": {"Ref": launch_template},
                        "Version": {"Fn::GetAtt": [launch_template, "LatestVersionNumber"]},
                    },
                    "Overrides": [{"InstanceType": kind} for kind in provider.instance_types],
                },
                "InstancesDistribution": distribution,
            },
            "Tags": [{**tag, "PropagateAtLaunch": True} for tag in tags],
        },
    }


def _control_policy(ec2: bool, jobs: list[Template]) -> Template:
    """What the control plane's functions (all of them run as `ApiRole`) need to scale the groups (with
    EC2 pools) and run the jobs of the other backends (`jobs`: their statements)."""
    scaling: list[Template] = [
        {
            "Sid": "ScaleTheStacksGroups",
            "Effect": "Allow",
            "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
            "Resource": _sub(
                "arn:${AWS::Partition}:autoscaling:${AWS::Region}:${AWS::AccountId}:autoScalingGroup:*"
                ":autoScalingGroupName/${AWS::StackName}-*"
            ),
        },
        {
            # These describe actions have no resource type: only "*" allows them. The quota and the
            # instance types' vCPUs cap a group's growth (`chalicelib/compute/ec2.py`).
            "Sid": "DescribeGroupsAndInstances",
            "Effect": "Allow",
            "Action": [
                "autoscaling:DescribeAutoScalingGroups",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceTypes",
                "servicequotas:GetServiceQuota",
            ],
            "Resource": "*",
        },
    ]
    return {
        "Type": "AWS::IAM::Policy",
        "Properties": {
            "PolicyName": "ec2-pools",
            "Roles": [{"Ref": "ApiRole"}],
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [*(scaling if ec2 else []), *jobs]},
        },
    }


def _spot_warnings(rules: list[str]) -> Template:
    """EC2's two-minute spot interruption warnings, as `compute_event` messages on the events queue
    (the agents' IMDS watchers see the same notice: whichever comes first drains the instance); the
    queue's policy lets these `rules` send to it."""
    arns = [{"Fn::GetAtt": [rule, "Arn"]} for rule in rules]
    return {
        "SpotWarningRule": {
            "Type": "AWS::Events::Rule",
            "Properties": {
                "Description": "Spot interruption warnings: the control plane drains the instance",
                "State": "ENABLED",
                "EventPattern": {"source": ["aws.ec2"], "detail-type": [SPOT_WARNING]},
                "Targets": [
                    {
                        "Id": "spot-warning",
                        "Arn": {"Fn::GetAtt": [EVENTS_QUEUE, "Arn"]},
                        "InputTransformer": {"InputPathsMap": {}, "InputTemplate": COMPUTE_EVENT},
                    }
                ],
            },
        },
        "EventsQueuePolicy": {
            "Type": "AWS::SQS::QueuePolicy",
            "Properties": {
                "Queues": [{"Ref": EVENTS_QUEUE}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "events.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": {"Fn::GetAtt": [EVENTS_QUEUE, "Arn"]},
                            "Condition": {
                                "ArnEquals": {"aws:SourceArn": arns[0] if len(arns) == 1 else arns}
                            },
                        }
                    ],
                },
            },
        },
    }
