"""The EC2 pools' part of the stack (`infra.aws.backends` registers it; `infra/aws/compute_resources.py`
merges it): per pool a launch template and an Auto Scaling group `<stack>-<pool>` (and a cluster
placement group for an EFA pool), and the control plane's permission to scale the stack's groups.

    resources, outputs = pool_resources(pools, inputs)   # inputs: compute_agents.PoolInputs
    statements = control_statements()                    # for the control plane's compute policy

A group has no desired capacity: the control plane alone sets it (upward with `SetDesiredCapacity`,
downward only by terminating the instances it chose idle, so every instance is protected from AWS's own
scale-in), and a stack update never resets a scaled group. The instances boot the Deep Learning AMI
(`AgentAmiId`, resolved by `det deploy aws up` from AWS's public SSM parameter), run in the agents'
network as the agents' role (`infra.aws.compute_agents`), and start their agent from the user data
(`infra.boot`). The user's tags follow Stratus's own on the launch templates' instances and volumes and
on the groups (propagated at launch).

A networked pool (its group here, its compute environments in `infra.aws.compute_batch`) runs in the
agents' subnets (`AgentSubnetIds`), or, marked `provider.own_subnets`, in those of its own parameter
`<Logical>SubnetIds` (`pool_subnets`), which `det deploy aws up` fills with the agents' subnets in zones
that offer the pool's instance types. A pool marked `provider.efa` (EFA-capable types, and a trial may
take more than one instance) gets an EFA network interface and a cluster placement group, which holds
one zone's instances: `det deploy aws up` gives it its own subnets, of one zone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from infra.aws.compute_agents import ComputeTemplateError, PoolInputs, logical_ids
from infra.boot import user_data
from infra.shape import group_name
from stratus.contract.pools import POOL_NAME, PoolSpec, Provider

Template = dict[str, Any]

ROOT_VOLUME_GB = 200  # as Determined's agents
#: The Deep Learning AMI's root device on Amazon Linux 2023 (an Ubuntu DLAMI's is /dev/sda1).
ROOT_DEVICE = "/dev/xvda"
#: The template parameters of EC2 pools only: Batch's instances boot the ECS AMI and run their jobs' image.
PARAMETERS: Template = {
    "AgentAmiId": {
        "Type": "AWS::EC2::Image::Id",
        "Description": "The agents' AMI: a Deep Learning AMI with PyTorch (det deploy aws up resolves it)",
    },
}
#: EC2 reports no job's state: the spot warnings (`infra.aws.compute_resources`) are all it sends.
STATE_RULE: str | None = None
#: The control plane finds each group by its pool's `provider.group`: no variable of its own.
CONTROL_ENVIRONMENT: Template = {}
#: The parameter of a networked pool's own subnets (`provider.own_subnets`): `<Logical>SubnetIds`.
SUBNETS = "SubnetIds"


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def pool_subnets(provider: Provider, logical: str) -> Template:
    """The subnets of a networked pool (logical id prefix `logical`): its own parameter's, or the
    agents'."""
    return {"Ref": logical + SUBNETS if provider.own_subnets else "AgentSubnetIds"}


def subnet_parameter(pool: str) -> Template:
    """The parameter of pool `pool`'s own subnets."""
    return {
        "Type": "List<AWS::EC2::Subnet::Id>",
        "Description": f"The subnets of pool {pool}'s instances, of AgentVpcId (det deploy aws up: those of "
        "AgentSubnetIds in zones that offer its instance types; one zone's for a placement group)",
    }


def pool_resources(pools: Sequence[PoolSpec], inputs: PoolInputs) -> tuple[Template, Template]:
    """The EC2 pools' (resources, outputs): a launch template and a group per pool, each group's name
    an output."""
    providers = {pool.name: _provider(pool) for pool in pools}
    ids = logical_ids(pools)
    resources: Template = {}
    outputs: Template = {}
    for pool in pools:
        logical = ids[pool.name]
        pool_tags = _tags(pool.name, inputs.tags)
        resources[logical + "LaunchTemplate"] = _launch_template(pool, pool_tags)
        group = _group(pool, providers[pool.name], logical, pool_tags)
        if providers[pool.name].efa:
            resources[logical + "PlacementGroup"] = _placement_group(pool_tags)
            group["Properties"]["PlacementGroup"] = {"Ref": logical + "PlacementGroup"}
        resources[logical + "Group"] = group
        outputs[logical + "GroupName"] = {
            "Condition": "HasCode",
            "Description": f"The Auto Scaling group of pool {pool.name}",
            "Value": {"Ref": logical + "Group"},
        }
    return resources, outputs


def control_statements() -> list[Template]:
    """What the control plane's functions (all of them run as `ApiRole`) need to scale the stack's groups."""
    return [
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


def _tags(pool: str, user: Mapping[str, str]) -> list[dict[str, Any]]:
    """A pool's instances' tags: Stratus's, then the user's by key."""
    return [
        {"Key": "stratus:cluster-id", "Value": {"Ref": "AWS::StackName"}},
        {"Key": "stratus:pool", "Value": pool},
        {"Key": "Name", "Value": _sub(group_name(pool))},
        *({"Key": key, "Value": value} for key, value in sorted(user.items())),
    ]


def _network(provider: Provider | None) -> Template:
    """The instances' security group; with EFA, on the EFA interface that replaces the default one (a
    launch template names the groups there when it declares interfaces). Its subnet is the group's."""
    groups = [{"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}]
    if provider is None or not provider.efa:
        return {"SecurityGroupIds": groups}
    # One EFA interface, on the first network card: a type with several cards (p5: 32) reaches its full
    # bandwidth with one per card, which a launch template shared by the pool's types cannot know.
    efa = {"DeviceIndex": 0, "InterfaceType": "efa", "Groups": groups, "DeleteOnTermination": True}
    return {"NetworkInterfaces": [efa]}


def _placement_group(tags: list[dict[str, Any]]) -> Template:
    """Packs the pool's instances close together in one zone, for the low latency EFA is for."""
    return {
        "Type": "AWS::EC2::PlacementGroup",
        "Condition": "HasCode",
        "Properties": {"Strategy": "cluster", "Tags": [dict(tag) for tag in tags]},
    }


def _launch_template(pool: PoolSpec, tags: list[dict[str, Any]]) -> Template:
    return {
        "Type": "AWS::EC2::LaunchTemplate",
        "Condition": "HasCode",
        "Properties": {
            "LaunchTemplateName": _sub(group_name(pool.name)),
            "LaunchTemplateData": {
                "ImageId": {"Ref": "AgentAmiId"},
                "IamInstanceProfile": {"Arn": {"Fn::GetAtt": ["AgentInstanceProfile", "Arn"]}},
                **_network(pool.provider),
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


def _group(pool: PoolSpec, provider: Provider, logical: str, tags: list[dict[str, Any]]) -> Template:
    launch_template = logical + "LaunchTemplate"
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
            "VPCZoneIdentifier": pool_subnets(provider, logical),
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
