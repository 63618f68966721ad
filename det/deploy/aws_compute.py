"""The compute of `det deploy aws up` and `down`: the pools (one ec2 pool `default` from Determined's
flags, the pools of `--pools-file`, or none with `--no-compute`), each cloud pool's slots per agent
from its instance type, the quota preflight (`det/deploy/quotas.py`), the agents' AMI and network, the
stack parameters that carry them; and, before `down` deletes the stack, its groups scaled to zero.
The capacity checks (`det/deploy/aws_checks.py`) give each EC2 and Batch pool the subnets in zones that
offer its types (its own stack parameter where that is not all of them) and mark the EC2 pools that take
EFA and a cluster placement group.

The AMI is the Deep Learning AMI (NVIDIA driver, PyTorch, Amazon Linux 2023) of the region, read from
its public SSM parameter (`DLAMI_PARAMETER`); where that name is gone, the newest PyTorch version under
`DLAMI_PATH`; `--agent-ami` skips the lookup. Slots per agent are the type's GPUs (`InstanceShape.slots`:
a CPU-only type gives agents of one slot, which run CPU trials); the types' vCPUs (`ComputePlan.vcpus`)
size the Batch pools' compute environments and jobs (`infra.aws.template.template(pools, vcpus)`). The
agents' network (subnets, VPC, key pair, inbound CIDR) is looked up only for EC2 and Batch pools: a
SageMaker job runs in SageMaker's own network, and the template declares those parameters only for them.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from det._render import table
from det._runtime import Runtime
from det.deploy.aws_checks import PlacementCalls, place_pools
from det.deploy.pools_file import read_pools_file
from det.deploy.quotas import InstanceShape, QuotaCalls, check_quotas
from det.deploy.training_images import pytorch_training_image
from det.errors import UsageError
from stratus.contract.errors import InvalidPoolError
from stratus.contract.pools import DEFAULT_POOL, PoolSpec, traits
from stratus.contract.resource_pools import Keys, cloud_pool

DEFAULT_INSTANCE_TYPE = "g5.xlarge"  # one GPU: Determined's g4dn.metal has 8
DEFAULT_INBOUND_CIDR = "0.0.0.0/0"
DLAMI_PATH = "/aws/service/deeplearning/ami/x86_64/"
DLAMI_PARAMETER = DLAMI_PATH + "oss-nvidia-driver-gpu-pytorch-2.7-amazon-linux-2023/latest/ami-id"
_DLAMI_NAME = re.compile(
    re.escape(DLAMI_PATH) + r"oss-nvidia-driver-gpu-pytorch-(\d+(?:\.\d+)*)-amazon-linux-2023/latest/ami-id"
)
_AMI = re.compile(r"^ami-[0-9a-f]{8,17}$")
#: The flags of the pool (not with --pools-file) and of the agents' network and image (dest names).
_POOL_FLAGS = {"compute_agent_instance_type": "instance_type", "min_dynamic_agents": "min_instances",
               "max_dynamic_agents": "max_instances", "spot": "spot", "spot_max_price": "spot_max_price",
               "max_idle_agent_period": "max_idle_agent_period",
               "max_agent_starting_period": "max_agent_starting_period"}  # fmt: skip
_AGENT_FLAGS = ("inbound_cidr", "agent_subnet_id", "keypair", "agent_ami")
#: The flag of each provider key (errors about the flags' pool name the flag).
FLAGS = {"instance_type": "--compute-agent-instance-type", "min_instances": "--min-dynamic-agents",
         "max_instances": "--max-dynamic-agents", "spot": "--spot", "spot_max_price": "--spot-max-price",
         "max_idle_agent_period": "--max-idle-agent-period",
         "max_agent_starting_period": "--max-agent-starting-period"}  # fmt: skip


def add_compute_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "compute (Determined's flags: one ec2 pool 'default', unless --pools-file or --no-compute)"
    )
    add = group.add_argument
    add(
        "--compute-agent-instance-type",
        "--gpu-agent-instance-type",
        metavar="TYPE",
        help=f"the agents' EC2 instance type (default {DEFAULT_INSTANCE_TYPE}: one GPU)",
    )
    add("--min-dynamic-agents", type=int, metavar="N", help="instances kept running (default 0)")
    add("--max-dynamic-agents", type=int, metavar="N", help="the most instances (default 5)")
    add("--spot", action=argparse.BooleanOptionalAction, help="spot instances (default --no-spot)")
    add("--spot-max-price", metavar="USD", help="the most per instance-hour (default: the on-demand price)")
    add("--max-idle-agent-period", metavar="DURATION", help="an idle instance goes after it (default 10m)")
    add(
        "--max-agent-starting-period",
        metavar="DURATION",
        help="an instance whose agent has not started by then is replaced (default 20m)",
    )
    add(
        "--inbound-cidr",
        metavar="CIDR",
        help=f"SSH to the agents from (with --keypair; default {DEFAULT_INBOUND_CIDR})",
    )
    add(
        "--agent-subnet-id",
        action="append",
        metavar="SUBNET[,SUBNET]",
        help="the agents' subnets, of one VPC (default: the default VPC's)",
    )
    add("--keypair", metavar="NAME", help="an EC2 key pair for SSH to the agents (default: none, no SSH)")
    add("--agent-ami", metavar="AMI", help="the agents' AMI (default: the Deep Learning AMI, from SSM)")
    add(
        "--pools-file",
        metavar="FILE",
        help="resource pools in Determined's resource_pools shape (docs/aws.md)",
    )
    add("--no-compute", action="store_true", help="no cloud pool: agents are started by hand (as before)")


class ComputeCalls(QuotaCalls, PlacementCalls, Protocol):
    region: str

    def ssm_parameter(self, name: str) -> str | None: ...
    def ssm_parameters_under(self, path: str) -> dict[str, str]: ...
    def default_network(self) -> tuple[str, list[str]] | None: ...
    def subnets_vpc(self, subnets: Sequence[str]) -> str: ...
    def check_key_pair(self, name: str) -> None: ...


@dataclass(frozen=True)
class ComputePlan:
    #: The control plane's PoolSpecs, or None for the template's default pools (`--no-compute`).
    pools: tuple[PoolSpec, ...] | None
    #: Stack parameters of the agents: AgentAmiId, AgentSubnetIds, AgentVpcId, InboundCidr, KeyName.
    parameters: dict[str, str] = field(default_factory=dict)
    #: Where the AMI came from: `--agent-ami` or the SSM parameter's name.
    ami_source: str = ""
    warnings: tuple[str, ...] = ()
    #: The vCPUs of the cloud pools' EC2 instance types (`ec2:DescribeInstanceTypes`), for the template's
    #: Batch pools: `infra.aws.template.template(plan.pools, plan.vcpus)`.
    vcpus: dict[str, int] = field(default_factory=dict)
    #: Their memory (MiB), where read: it caps a Batch job's memory (`template(..., memory=plan.memory)`).
    memory: dict[str, int] = field(default_factory=dict)
    #: What the capacity checks decided (`det.deploy.aws_checks.place_pools`): zones left out, EFA pools.
    notes: tuple[str, ...] = ()


def plan_compute(args: argparse.Namespace, calls: ComputeCalls) -> ComputePlan:
    """The pools and parameters of `up`; a UsageError (or `QuotaError`) for what cannot be deployed."""
    given = given_pools(args)
    if given is None:
        return ComputePlan(pools=None)
    given = [_with_image(pool, calls.region) for pool in given]
    cloud = [p for p in given if p.provider is not None]
    shapes = calls.instance_types(sorted({_ec2_type(t) for p in cloud for t in _types(p)}))
    pools = tuple(with_slots(given, shapes, _source(args)))
    warnings = tuple(check_quotas(calls, pools))
    vcpus = {kind: shape.vcpus for kind, shape in shapes.items()}
    memory = {kind: shape.memory_mib for kind, shape in shapes.items() if shape.memory_mib}
    if not any(traits(p.backend).networked for p in cloud):  # no agent network: no lookup, no parameter
        flags = [_flag(dest) for dest in _AGENT_FLAGS if getattr(args, dest)]
        if flags and not cloud:
            raise UsageError(
                f"{flags[0]} sets the cloud agents, and {_source(args)} has no cloud pool; drop it"
            )
        if flags:
            raise UsageError(
                f"{flags[0]} sets the EC2 and Batch agents, and {_source(args)} has only SageMaker pools "
                "(their jobs run in SageMaker's own network, from their image); drop it"
            )
        return ComputePlan(pools=pools, warnings=warnings, vcpus=vcpus, memory=memory)
    vpc, subnets = agent_network(calls, args.agent_subnet_id or [])
    placement = place_pools(calls, pools, subnets)
    pools = placement.pools
    cidr = args.inbound_cidr or DEFAULT_INBOUND_CIDR
    try:
        ipaddress.IPv4Network(cidr)
    except ValueError as e:
        raise UsageError(
            f"--inbound-cidr {cidr!r} is not an IPv4 CIDR ({e}); use one such as 203.0.113.0/24"
        ) from e
    if args.keypair:
        calls.check_key_pair(args.keypair)
    elif args.inbound_cidr:
        raise UsageError(
            f"--inbound-cidr {cidr} opens SSH to the agents, and there is no SSH without --keypair; "
            "give --keypair NAME too, or drop --inbound-cidr"
        )
    parameters = {
        "AgentSubnetIds": ",".join(subnets),
        "AgentVpcId": vpc,
        "InboundCidr": cidr,
        "KeyName": args.keypair or "",
    }
    # The subnets of the pools with their own (not all the agents').
    from infra.aws.compute_resources import subnet_parameters  # as aws.py: infra is loaded by `up` only

    names = subnet_parameters(pools)
    parameters |= {names[pool]: ",".join(kept) for pool, kept in placement.subnets.items()}
    source = ""
    if any(not traits(p.backend).runs_image for p in cloud):  # Batch and SageMaker bring their own images
        parameters["AgentAmiId"], source = resolve_ami(calls, args.agent_ami)
    elif args.agent_ami:
        raise UsageError(
            f"--agent-ami sets the EC2 agents' image, and {_source(args)} has no EC2 pool; drop it"
        )
    return ComputePlan(pools, parameters, source, warnings, vcpus, memory, placement.notes)


def given_pools(args: argparse.Namespace) -> list[PoolSpec] | None:
    """The pools of the flags or of the file; None with --no-compute."""
    pool_flags = {
        key: getattr(args, dest) for dest, key in _POOL_FLAGS.items() if getattr(args, dest) is not None
    }
    if args.no_compute:
        given = [FLAGS[key] for key in pool_flags]
        given += [_flag(dest) for dest in ("pools_file", *_AGENT_FLAGS) if getattr(args, dest)]
        if given:
            raise UsageError(f"--no-compute deploys no cloud pool; drop {given[0]} or --no-compute")
        return None
    if args.pools_file:
        if pool_flags:
            flag = FLAGS[next(iter(pool_flags))]
            raise UsageError(
                f"{flag} sets the default pool of the flags; with --pools-file, set it in the file"
            )
        return read_pools_file(Path(args.pools_file))
    raw = {"type": "ec2", "instance_type": DEFAULT_INSTANCE_TYPE, **pool_flags}
    try:
        return [cloud_pool(PoolSpec(DEFAULT_POOL), raw, Keys(flags=FLAGS))]
    except InvalidPoolError as e:
        raise UsageError(str(e)) from e


def with_slots(pools: list[PoolSpec], shapes: Mapping[str, InstanceShape], source: str) -> list[PoolSpec]:
    """The cloud pools with `slots_per_agent`: their instance type's GPUs, one for a CPU-only type."""
    done = []
    for pool in pools:
        if pool.provider is not None:
            kinds = pool.provider.instance_types
            slots = {kind: shapes[_ec2_type(kind)].slots for kind in kinds}
            if len(set(slots.values())) > 1:
                shown = ", ".join(f"{kind} {n}" for kind, n in slots.items())
                raise UsageError(
                    f"{source}: pool {pool.name!r} mixes instance types of different GPU counts ({shown}); "
                    "an agent's slots are its pool's, so give types of one GPU count"
                )
            gpus = shapes[_ec2_type(kinds[0])].gpus
            pool = replace(pool, slots_per_agent=slots[kinds[0]], provider=replace(pool.provider, gpus=gpus))
        done.append(pool)
    return done


def _with_image(pool: PoolSpec, region: str) -> PoolSpec:
    """A sagemaker pool that names no image gets AWS's PyTorch training image for its instance type."""
    if not traits(pool.backend).training_image or pool.provider is None or pool.provider.image:
        return pool
    image = pytorch_training_image(region, pool.provider.instance_types[0])
    return replace(pool, provider=replace(pool.provider, image=image))


def _types(pool: PoolSpec) -> tuple[str, ...]:
    return pool.provider.instance_types if pool.provider is not None else ()


def resolve_ami(calls: ComputeCalls, given: str | None) -> tuple[str, str]:
    """The agents' AMI and where it came from."""
    if given:
        if not _AMI.match(given):
            raise UsageError(
                f"--agent-ami {given!r} is not an AMI id; give one such as ami-0123456789abcdef0"
            )
        return given, "--agent-ami"
    value = calls.ssm_parameter(DLAMI_PARAMETER)
    if value:
        return value, DLAMI_PARAMETER
    newest = newest_dlami(calls.ssm_parameters_under(DLAMI_PATH))
    if newest is None:
        raise UsageError(
            f"no Deep Learning AMI is published in {calls.region} ({DLAMI_PARAMETER} nor another PyTorch "
            f"AL2023 one under {DLAMI_PATH}); pass --agent-ami with an AMI that has the NVIDIA driver"
        )
    return newest[1], newest[0]


def newest_dlami(parameters: Mapping[str, str]) -> tuple[str, str] | None:
    """The (name, AMI) of the newest PyTorch version's AL2023 DLAMI parameter (2.10 is newer than 2.9)."""
    found = [
        (tuple(int(n) for n in match.group(1).split(".")), name)
        for name in parameters
        if (match := _DLAMI_NAME.fullmatch(name))
    ]
    if not found:
        return None
    name = max(found)[1]
    return name, parameters[name]


def agent_network(calls: ComputeCalls, given: Sequence[str]) -> tuple[str, list[str]]:
    """The agents' VPC and subnets: those of `--agent-subnet-id`, else the default VPC's."""
    subnets = [s.strip() for value in given for s in value.split(",") if s.strip()]
    if subnets:
        return calls.subnets_vpc(subnets), subnets
    found = calls.default_network()
    if found is None or not found[1]:
        raise UsageError(f"region {calls.region} has no default VPC with subnets; pass --agent-subnet-id")
    return found


def describe(plan: ComputePlan) -> str:
    """The pools as a table (Determined's `det resource-pool list` columns) and the agents' parameters."""
    rows = []
    for pool in plan.pools or ():
        scheduler = pool.scheduler + (", preemption" if pool.preemption else "")
        p = pool.provider
        if p is None:
            rows.append([pool.name, pool.backend, "", "", "", "", "", "", scheduler])
            continue
        spot = ("yes" + (f", max {p.spot_max_price} USD/h" if p.spot_max_price else "")) if p.spot else "no"
        shape = [", ".join(p.instance_types), pool.slots_per_agent, p.min_instances, p.max_instances]
        rows.append(
            [pool.name, pool.backend, *map(str, shape), spot, _period(p.max_idle_agent_period_s), scheduler]
        )
    headers = ["Name", "Backend", "Instance Type", "Slots Per Agent", "Min Agents", "Max Agents", "Spot"]
    headers += ["Max Idle", "Scheduler"]
    out = table(headers, rows) if rows else "pools: the template's default (local, agents started by hand)"
    if plan.parameters:
        values = dict(plan.parameters)
        if "AgentAmiId" in values:
            values["AgentAmiId"] += f" (from {plan.ami_source})"
        out += "\n" + table(["Parameter", "Value"], sorted(values.items()))
    return "\n".join([out, *plan.notes])


class GroupCalls(Protocol):
    def stack_groups(self, tag: str, stack: str) -> list[dict[str, Any]]: ...
    def scale_to_zero(self, group: dict[str, Any]) -> list[str]: ...


def scale_groups_to_zero(rt: Runtime, calls: GroupCalls, tag: str, stack: str) -> None:
    """Before the stack goes: every group of it to min 0 / max 0 / desired 0, its instances terminated."""
    for group in calls.stack_groups(tag, stack):
        instances = calls.scale_to_zero(group)
        ended = f"terminated {', '.join(instances)}" if instances else "no instances"
        rt.say(f"group {group['AutoScalingGroupName']}: min 0 / max 0 / desired 0; {ended}")


def _ec2_type(kind: str) -> str:
    return kind.removeprefix("ml.")  # a SageMaker type is an EC2 type behind "ml."


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _source(args: argparse.Namespace) -> str:
    return f"--pools-file {args.pools_file}" if args.pools_file else "the flags"


def _period(seconds: float) -> str:
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"
