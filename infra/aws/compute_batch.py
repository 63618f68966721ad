"""The Batch pools' part of the stack (`infra.aws.backends` registers it; `infra/aws/compute_resources.py`
merges it; they share the agents' network).

    resources, outputs = pool_resources(pools, inputs)             # inputs: compute_agents.PoolInputs
    resources, outputs = batch_resources(pools, ids, vcpus, tags)  # ids: compute_agents.logical_ids(pools)
    statements = control_statements()                              # for the control plane's compute policy

Per pool: an on-demand compute environment (and a spot one for a spot pool), a fair-share policy, the
job queue `<stack>-<pool>` ([spot, on-demand] or [on-demand]), the multi-node queue `<stack>-<pool>-mnp`
(on-demand only: AWS Batch runs no multi-node parallel job on spot capacity) and job definitions of the
same two names. The control plane submits by these names (`provider.group` plus the suffix of
`chalicelib.compute.batch`) with the parameters `runs`, `agents` and `credentials`, which the container's
agent reads as `Ref::runs`, `Ref::agents` and `Ref::credentials`. Stratus' scheduler decides what runs; the fair share only orders jobs
waiting for capacity. Shared: the environments' service role, their instances' ECS role and profile, the
jobs' role (only the agent credential route, and reading and deleting its `credentials/` objects) and `BatchStateRule`: ended jobs to the events queue.

Tags: every pool resource has `stratus:cluster-id`, `stratus:pool` and `Name`, then the user's `tags`. An
environment's own tags stay on it: its `ComputeResources.Tags` are what its instances get. A job definition's
reach its jobs' ECS tasks, as the control plane submits with `propagateTags` (and tags the job itself:
`batch:TagResource`). Changing the tags replaces the environments (their tags cannot be updated in place).

Sizes: `maxvCpus` is `max_instances` times the vCPUs of the pool's largest type. A job takes a whole
instance of its smallest type: all its vCPUs, `MEMORY_PER_VCPU_MIB` per vCPU (7/8 of the 4 GiB per vCPU
the usual GPU types, g4dn to g6 and p3 to p5, have at least; ECS and the OS keep the rest), or 7/8 of the
type's own memory where `det` read it (`memory`) and it has less (a c type), and the pool's GPUs. The types' vCPUs are
`vcpus`: `det deploy aws up` reads them from `ec2:DescribeInstanceTypes` (`ComputePlan.vcpus`), so any
type EC2 offers renders. Rendered without them (`infra` used directly: tests, a template made by hand),
the types of `DEFAULT_VCPUS` render and any other is refused, naming it and the fix. `spot_max_price`
(USD an instance-hour) becomes the spot environment's `BidPercentage`, since Batch bids a percentage of
each type's on-demand price: the highest percentage that keeps every type of the pool at or under the
cap, from the committed on-demand prices (`stratus.contract.prices`); a cap on a type without a committed price
is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from chalicelib.domain.cloud_names import MULTI_NODE_SUFFIX
from chalicelib.domain.compute_events import BATCH_STATE_CHANGE
from infra.aws.compute_agents import ComputeTemplateError, PoolInputs, logical_ids
from infra.aws.compute_batch_roles import allow, shared_roles
from infra.aws.compute_ec2 import pool_subnets
from infra.aws.template_app import QUEUE_IDS
from infra.boot import API_URL, batch_command
from infra.shape import group_name
from stratus.contract.container_boot import COMPUTE_URI_ENV
from stratus.contract.pools import POOL_NAME, PoolSpec, Provider
from stratus.contract.prices import price_of

Template = dict[str, Any]

#: vCPUs of common GPU instance types: only for a template rendered without the types' vCPUs from EC2
#: (`det deploy aws up` passes them, for any type).
# fmt: off
DEFAULT_VCPUS: Mapping[str, int] = MappingProxyType({
    "g5.xlarge": 4, "g5.2xlarge": 8, "g5.12xlarge": 48, "g6.xlarge": 4,
    "p3.2xlarge": 8, "p4d.24xlarge": 96, "p5.48xlarge": 192,
})
# fmt: on
#: A job's memory per vCPU it takes (MiB).
MEMORY_PER_VCPU_MIB = 3584
#: The container's /dev/shm (PyTorch's data loader workers pass batches through it): half its memory.
SHARED_MEMORY_FRACTION = 0.5
BATCH_STATE_RULE = "BatchStateRule"
#: The part's names (`infra.aws.backends.TemplatePart`): its ended jobs go to the events queue; no
#: parameter but the agents' network's, no variable (the control plane submits by `provider.group`).
STATE_RULE: str | None = BATCH_STATE_RULE
PARAMETERS: Template = {}
CONTROL_ENVIRONMENT: Template = {}
#: The events queue's message of any AWS event (as `compute_resources.COMPUTE_EVENT`).
COMPUTE_EVENT = '{"type": "compute_event", "event": <aws.events.event.json>}'
#: Only ended jobs matter to the control plane (`chalicelib.domain.compute_events.BatchJobEnded`).
ENDED = ["SUCCEEDED", "FAILED"]
_ARN = "arn:${AWS::Partition}:batch:${AWS::Region}:${AWS::AccountId}:"


class BatchTemplateError(ComputeTemplateError):
    """A Batch pool the template cannot render (the message names the pool or type and the fix)."""


def _sub(text: str) -> dict[str, str]:
    return {"Fn::Sub": text}


def queue_names(pool: str) -> tuple[str, str]:
    """A pool's job queue and multi-node queue names (`Fn::Sub` strings); its job definitions' too."""
    return group_name(pool), group_name(pool) + MULTI_NODE_SUFFIX


def pool_resources(pools: Sequence[PoolSpec], inputs: PoolInputs) -> tuple[Template, Template]:
    """The Batch pools' (resources, outputs), their logical ids their own (`logical_ids`)."""
    return batch_resources(pools, logical_ids(pools), inputs.vcpus, inputs.tags, inputs.memory)


def batch_resources(
    pools: Sequence[PoolSpec],
    ids: Mapping[str, str],
    vcpus: Mapping[str, int] | None = None,
    tags: Mapping[str, str] | None = None,
    memory: Mapping[str, int] | None = None,
) -> tuple[Template, Template]:
    """The Batch pools' (resources, outputs), each pool's logical ids prefixed with `ids[pool.name]`:
    both empty without Batch pools. `vcpus`: each instance type's vCPUs (None: `DEFAULT_VCPUS`); `tags`:
    the user's, after Stratus's own on each resource; `memory`: each type's memory (MiB), where known."""
    if not pools:
        return {}, {}
    vcpus = DEFAULT_VCPUS if vcpus is None else vcpus
    resources: Template = {**shared_roles(), BATCH_STATE_RULE: _state_rule(pools)}
    outputs: Template = {}
    for pool in pools:
        provider = _provider(pool)
        logical = ids[pool.name]
        types = [_vcpus_of(pool.name, kind, vcpus) for kind in provider.instance_types]
        pool_tags = _tags(pool.name, tags or {})
        on_demand, spot = logical + "OnDemandEnvironment", logical + "SpotEnvironment"
        resources[on_demand] = _environment(pool_tags, provider, "EC2", max(types), logical)
        order = [on_demand]
        if provider.spot:
            resources[spot] = _environment(pool_tags, provider, "SPOT", max(types), logical)
            order = [spot, on_demand]
        resources[logical + "FairShare"] = _fair_share(pool_tags)
        queue, multi_node = queue_names(pool.name)
        resources[logical + "Queue"] = _queue(queue, order, logical + "FairShare", pool_tags)
        resources[logical + "MultiNodeQueue"] = _queue(
            multi_node, [on_demand], logical + "FairShare", pool_tags
        )
        smallest = min(provider.instance_types, key=lambda kind: vcpus[kind])
        container = _container(pool, provider, vcpus[smallest], (memory or {}).get(smallest))
        resources[logical + "JobDefinition"] = _job_definition(
            queue, pool_tags, {"ContainerProperties": container}
        )
        nodes = {
            "NumNodes": 2,
            "MainNode": 0,
            "NodeRangeProperties": [{"TargetNodes": "0:", "Container": container}],
        }
        resources[logical + "MultiNodeJobDefinition"] = _job_definition(
            multi_node, pool_tags, {"Type": "multinode", "NodeProperties": nodes}
        )
        for suffix, name in (("QueueName", queue), ("MultiNodeQueueName", multi_node)):
            outputs[logical + suffix] = {
                "Condition": "HasCode",
                "Description": f"A Batch job queue of pool {pool.name}",
                "Value": _sub(name),
            }
    return resources, outputs


def control_statements() -> list[Template]:
    """What the control plane's role needs to run the stack's Batch jobs and stop them."""
    queues = [_sub(_ARN + "job-queue/${AWS::StackName}-*"), _sub(_ARN + "job-definition/${AWS::StackName}-*")]
    jobs = _sub(_ARN + "job/*")  # a job's ARN has its id, not its name: the region's jobs
    return [
        allow("SubmitToTheStacksQueues", "batch:SubmitJob", queues),
        # SubmitJob with `tags` (the control plane always sends `stratus:cluster-id`) is also authorized
        # as TagResource on the new job; no other Batch resource may be tagged.
        allow("TagTheJobsItSubmits", "batch:TagResource", jobs),
        allow("TerminateJobs", "batch:TerminateJob", jobs),
        # These describe actions have no resource type: only "*" allows them.
        allow("DescribeJobs", ["batch:DescribeJobs", "batch:ListJobs", "batch:DescribeJobDefinitions"], "*"),
        # An experiment's own image runs in a copy of its pool's job definition (`<stack>-<pool>-image-...`,
        # `chalicelib.aws.batch.image_definition`), which names the jobs' role.
        allow(
            "RegisterImageDefinitions",
            "batch:RegisterJobDefinition",
            _sub(_ARN + "job-definition/${AWS::StackName}-*"),
        ),
        allow("PassTheJobsRole", "iam:PassRole", {"Fn::GetAtt": ["BatchJobRole", "Arn"]}),
    ]


def _provider(pool: PoolSpec) -> Provider:
    if not POOL_NAME.match(pool.name):
        raise BatchTemplateError(
            f"pool name {pool.name!r} cannot name a Batch job queue; use letters, digits, '-' or '_' "
            "(at most 63, starting with a letter or digit)"
        )
    if pool.provider is None or not pool.provider.instance_types:
        raise BatchTemplateError(
            f"Batch pool {pool.name!r} has no instance type; give its provider an instance_type (e.g. g5.xlarge)"
        )
    if not pool.provider.image:
        raise BatchTemplateError(
            f"Batch pool {pool.name!r} has no image; give its provider the container image of its jobs "
            "(image: a registry path with PyTorch and Stratus' harness installed)"
        )
    return pool.provider


def _vcpus_of(pool: str, kind: str, vcpus: Mapping[str, int]) -> int:
    if kind not in vcpus:
        raise BatchTemplateError(
            f"Batch pool {pool!r} has instance type {kind!r}, whose vCPUs the template does not know; "
            "deploy it with `det deploy aws up`, which reads every type's vCPUs from EC2, or pass them to "
            f"the template: template(pools, vcpus={{{kind!r}: <vCPUs>}})"
        )
    return vcpus[kind]


def _tags(pool: str, user: Mapping[str, str]) -> dict[str, Any]:
    """A pool resource's tags: Stratus's, then the user's by key."""
    return {
        "stratus:cluster-id": {"Ref": "AWS::StackName"},
        "stratus:pool": pool,
        "Name": _sub(group_name(pool)),
        **dict(sorted(user.items())),
    }


def bid_percentage(provider: Provider) -> int | None:
    """The spot environment's `BidPercentage` for the pool's `spot_max_price` (None without a cap: Batch
    then pays up to the on-demand price). Every type's bid (the percentage of its on-demand price) stays
    at or under the cap, so the percentage is that of the type with the highest on-demand price."""
    if not provider.spot_max_price:
        return None
    cap = float(provider.spot_max_price)
    prices = {kind: price_of(kind, spot=False) for kind in provider.instance_types}
    unknown = sorted(kind for kind, price in prices.items() if not price.known or price.usd_per_hour <= 0)
    if unknown:
        raise BatchTemplateError(
            f"spot_max_price {provider.spot_max_price} cannot be given to Batch for {', '.join(unknown)}: Batch "
            "bids a percentage of the on-demand price, which contract/prices.py does not know for it; "
            "drop spot_max_price (Batch then pays up to the on-demand price) or use types it knows"
        )
    highest = max(price.usd_per_hour for price in prices.values())
    return max(1, min(100, math.floor(100 * cap / highest)))


def _environment(tags: Template, provider: Provider, kind: str, vcpus: int, logical: str) -> Template:
    """A managed compute environment of the pool's types, from nothing up to `max_instances` of them, in
    the pool's subnets (`infra.aws.compute_ec2.pool_subnets`)."""
    strategy = "SPOT_PRICE_CAPACITY_OPTIMIZED" if kind == "SPOT" else "BEST_FIT_PROGRESSIVE"
    image = "ECS_AL2023_NVIDIA" if provider.gpus > 0 else "ECS_AL2023"
    return {
        "Type": "AWS::Batch::ComputeEnvironment",
        "Condition": "HasCode",
        "Properties": {
            "Type": "MANAGED",
            "State": "ENABLED",
            "ServiceRole": {"Fn::GetAtt": ["BatchServiceRole", "Arn"]},
            "ComputeResources": {
                "Type": kind,
                "AllocationStrategy": strategy,
                "MinvCpus": 0,
                "MaxvCpus": provider.max_instances * vcpus,
                "InstanceTypes": list(provider.instance_types),
                "Subnets": pool_subnets(provider, logical),
                "SecurityGroupIds": [{"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}],
                "InstanceRole": {"Fn::GetAtt": ["BatchInstanceProfile", "Arn"]},
                "Ec2Configuration": [{"ImageType": image}],
                "Tags": dict(tags),  # its instances'
                **({"BidPercentage": bid} if kind == "SPOT" and (bid := bid_percentage(provider)) else {}),
            },
            "Tags": dict(tags),
        },
    }


def _fair_share(tags: Template) -> Template:
    # No decay, no reservation: Stratus' scheduler has granted every job it submits already.
    return {
        "Type": "AWS::Batch::SchedulingPolicy",
        "Condition": "HasCode",
        "Properties": {
            "FairsharePolicy": {"ShareDecaySeconds": 0, "ComputeReservation": 0},
            "Tags": dict(tags),
        },
    }


def _queue(name: str, environments: list[str], policy: str, tags: Template) -> Template:
    # Both queues have the policy: the control plane gives every job a share identifier, which a queue
    # without a fair-share policy refuses.
    return {
        "Type": "AWS::Batch::JobQueue",
        "Condition": "HasCode",
        "Properties": {
            "JobQueueName": _sub(name),
            "State": "ENABLED",
            "Priority": 1,
            "SchedulingPolicyArn": {"Ref": policy},
            "ComputeEnvironmentOrder": [
                {"Order": order, "ComputeEnvironment": {"Ref": environment}}
                for order, environment in enumerate(environments, start=1)
            ],
            "Tags": dict(tags),
        },
    }


def job_command(pool: str, slots: int) -> list[Any]:
    """The job container's command: the one-run agent of the job's `runs` and `agents` parameters (a
    multi-node job's node takes its own by its index), which exits once they have ended; the same
    command the local stack's Batch twin runs (`infra.boot.batch_command`)."""
    return [_sub(API_URL) if arg == API_URL else arg for arg in batch_command(API_URL, pool, slots)]


def _container(pool: PoolSpec, provider: Provider, vcpus: int, memory_mib: int | None = None) -> Template:
    memory = vcpus * MEMORY_PER_VCPU_MIB
    if memory_mib:  # the type's own memory, where known: 7/8 of it, at most (ECS and the OS keep the rest)
        memory = min(memory, memory_mib * 7 // 8)
    requirements = [{"Type": "VCPU", "Value": str(vcpus)}, {"Type": "MEMORY", "Value": str(memory)}]
    if provider.gpus > 0:
        requirements.append({"Type": "GPU", "Value": str(provider.gpus)})
    return {
        "Image": provider.image,
        "Command": job_command(pool.name, pool.slots_per_agent or 1),
        "Environment": [{"Name": COMPUTE_URI_ENV, "Value": _sub("s3://${BucketName}/${ComputeKey}")}],
        "JobRoleArn": {"Fn::GetAtt": ["BatchJobRole", "Arn"]},
        "ResourceRequirements": requirements,
        "LinuxParameters": {"SharedMemorySize": int(memory * SHARED_MEMORY_FRACTION)},
    }


def _job_definition(name: str, tags: Template, kind: Template) -> Template:
    return {
        "Type": "AWS::Batch::JobDefinition",
        "Condition": "HasCode",
        # A job may call the credential route as soon as it starts.
        "DependsOn": ["BatchJobPolicy"],
        "Properties": {
            "Type": "container",
            **kind,
            "JobDefinitionName": _sub(name),
            "PlatformCapabilities": ["EC2"],
            # One attempt: a run whose job fails is ended, and requeued, by Stratus. No timeout either:
            # the scheduler stops runs.
            "RetryStrategy": {"Attempts": 1},
            "Tags": dict(tags),
        },
    }


def _state_rule(pools: Sequence[PoolSpec]) -> Template:
    """The stack's ended Batch jobs, as `compute_event` messages on the events queue. The queues' ARNs
    are built from their names, so the rule needs no queue (and no `HasCode`)."""
    arns = [_sub(_ARN + "job-queue/" + name) for pool in pools for name in queue_names(pool.name)]
    return {
        "Type": "AWS::Events::Rule",
        "Properties": {
            "Description": "Ended Batch jobs: the control plane ends the runs whose agent did not report",
            "State": "ENABLED",
            "EventPattern": {
                "source": ["aws.batch"],
                "detail-type": [BATCH_STATE_CHANGE],
                "detail": {"jobQueue": arns, "status": ENDED},
            },
            "Targets": [
                {
                    "Id": "batch-state",
                    "Arn": {"Fn::GetAtt": [QUEUE_IDS["events"], "Arn"]},
                    "InputTransformer": {"InputPathsMap": {}, "InputTemplate": COMPUTE_EVENT},
                }
            ],
        },
    }
