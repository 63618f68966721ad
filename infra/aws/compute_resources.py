"""The cloud pools' part of the stack (`infra/aws/template.py` merges it): each backend's part
(`infra.aws.backends.TEMPLATE_PARTS`: the EC2 pools' groups, the Batch pools' queues, the SageMaker pools'
execution role) and what they share: the agents' security group (with pools whose instances run in the
agents' network, the `networked` trait), instance profile and policy, the control plane's compute policy
(each part's statements), and the spot interruption warnings and each part's state rule routed to the
events queue.

    parameters, conditions, resources, outputs = compute_resources(pools, vcpus, tags)

Nothing for a stack without cloud pools. Each parameter only where a pool uses it (CloudFormation refuses
a template with a parameter no resource uses): a part's own (the EC2 pools' AMI), the agents' network
(subnets, VPC, SSH key and CIDR) with networked pools; SageMaker runs its jobs in a network of its own.
A networked pool marked `provider.own_subnets` has its own subnets' parameter (`subnet_parameters`),
which `det deploy aws up` fills with those of the agents' subnets in zones that offer the pool's types.
With an EFA pool (`provider.efa`) the agents' security group also allows all traffic out to itself,
which EFA requires besides the rule in (`infra.aws.compute_agents.agent_network`).

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

from collections.abc import Mapping, Sequence
from typing import Any

from infra.aws.backends import parts_of
from infra.aws.compute_agents import (
    ComputeTemplateError,
    PoolInputs,
    agent_identity,
    agent_network,
    logical_ids,
)
from infra.aws.compute_ec2 import SUBNETS, subnet_parameter
from infra.aws.template_app import COMPUTE_POLICY, QUEUE_IDS
from infra.aws.template_iam import events_queue_policy
from stratus.contract.pools import PoolSpec, traits

Template = dict[str, Any]

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
#: The events queue's message of any AWS event (contract `ComputeEvent`): EventBridge fills in the event.
COMPUTE_EVENT = '{"type": "compute_event", "event": <aws.events.event.json>}'
EVENTS_QUEUE = QUEUE_IDS["events"]

#: The parameters every part may use: the agents' network (with networked pools) and the compute package.
PARAMETERS: Template = {
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
#: The parameters of the agents' network, with networked pools (their instances run in it).
NETWORK_PARAMETERS = ("AgentSubnetIds", "AgentVpcId", "InboundCidr", "KeyName")


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def compute_resources(
    pools: Sequence[PoolSpec],
    vcpus: Mapping[str, int] | None = None,
    tags: Mapping[str, str] | None = None,
    memory: Mapping[str, int] | None = None,
) -> tuple[Template, Template, Template, Template]:
    """The cloud pools' (parameters, conditions, resources, outputs): all empty without them. `vcpus` and
    `memory` (MiB): each Batch pool's instance types' (`infra.aws.compute_batch.batch_resources`); `tags`: the
    user's (checked already, `stratus.contract.tags.user_tags`), after Stratus's own on each pool resource."""
    cloud = [pool for pool in pools if traits(pool.backend).cloud]
    if not cloud:
        return {}, {}, {}, {}
    names = [pool.name for pool in cloud]
    if len(set(names)) < len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise ComputeTemplateError(f"pool {twice[0]!r} is given twice; name each pool once")
    inputs = PoolInputs(tags=tags or {}, vcpus=vcpus, memory=memory)
    parts = [(part, part.pool_resources(of, inputs)) for part, of in parts_of(cloud)]
    rules = ["SpotWarningRule", *(part.STATE_RULE for part, _ in parts if part.STATE_RULE)]
    networked = any(traits(pool.backend).networked for pool in cloud)  # instances in the agents' network
    efa = any(pool.provider is not None and pool.provider.efa for pool in cloud)
    resources: Template = {
        **(agent_network() if networked else {}),
        **(_self_egress() if networked and efa else {}),
        **agent_identity(),
        **_spot_warnings(rules),
    }
    outputs: Template = {}
    for _, (part_resources, part_outputs) in parts:
        resources.update(part_resources)
        outputs.update(part_outputs)
    resources[COMPUTE_POLICY] = _control_policy([s for part, _ in parts for s in part.control_statements()])
    own = {name: value for part, _ in parts for name, value in part.PARAMETERS.items()}
    shared = {k: v for k, v in PARAMETERS.items() if networked or k not in NETWORK_PARAMETERS}
    subnets = {parameter: subnet_parameter(name) for name, parameter in subnet_parameters(cloud).items()}
    return {**own, **shared, **subnets}, dict(CONDITIONS) if networked else {}, resources, outputs


def subnet_parameters(pools: Sequence[PoolSpec]) -> dict[str, str]:
    """The parameter of each networked pool with subnets of its own (`provider.own_subnets`), by pool
    name, as its part names it (`<Logical>SubnetIds`, each part's logical ids its own pools'):
    `det deploy aws up` fills it."""
    found: dict[str, str] = {}
    for _, of in parts_of(pools):
        ids = logical_ids(of)
        for pool in of:
            if traits(pool.backend).networked and pool.provider is not None and pool.provider.own_subnets:
                found[pool.name] = ids[pool.name] + SUBNETS
    return found


def _self_egress() -> Template:
    """EFA's traffic must be allowed out to the security group itself as well as in from it; the default
    rule out (anywhere) stays."""
    group_id = {"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}
    return {
        "AgentSelfEgress": {
            "Type": "AWS::EC2::SecurityGroupEgress",
            "Properties": {
                "Description": "EFA: the nodes of a trial, all traffic to each other",
                "GroupId": group_id,
                "IpProtocol": "-1",
                "DestinationSecurityGroupId": group_id,
            },
        }
    }


def _control_policy(statements: list[Template]) -> Template:
    """What the control plane's functions (all of them run as `ApiRole`) need to drive the cloud pools:
    each backend's statements (scaling the EC2 groups, running Batch and SageMaker jobs)."""
    return {
        "Type": "AWS::IAM::Policy",
        "Properties": {
            "PolicyName": "ec2-pools",
            "Roles": [{"Ref": "ApiRole"}],
            "PolicyDocument": {"Version": "2012-10-17", "Statement": statements},
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
        "EventsQueuePolicy": events_queue_policy(EVENTS_QUEUE, arns[0] if len(arns) == 1 else arns),
    }
