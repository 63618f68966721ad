"""Resource pools, one model for every side: the CLI's `det deploy aws up`, the local stack, the stack's
template and the control plane read and write pools through this module (and `resource_pools`, which
reads Determined's master-config `resource_pools:` list into these records).

A pool (Determined's `resource_pools` in the master config) has a name, a scheduler and, where the pool's
machines are known, its shape. The scheduler kinds are Determined's: `priority` (lower number first,
default 42; with `preemption` on, a job that cannot fit stops lower-priority running trials through the
pause path) and `fair_share` (the pool's slots divided among active jobs by weight). A pool whose shape
is known (its agents' slots and how many agents it can have) refuses at submission a request that could
never fit in it.

A pool's `backend` says where its runs execute: `local` (agents started by hand or by the local stack),
or `ec2` (an Auto Scaling group per pool, scaled by the control plane from the queue), `batch` and
`sagemaker`; a cloud pool's `provider` holds what its backend needs (Determined's `provider` keys).
The kinds are declared here once; each side finds what a kind needs through its own registry
(docs/extending.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal

from stratus.contract.errors import InvalidPoolError

SchedulerKind = Literal["priority", "fair_share"]
SCHEDULER_KINDS: tuple[SchedulerKind, ...] = ("priority", "fair_share")
Backend = Literal["local", "ec2", "batch", "sagemaker"]


@dataclass(frozen=True)
class BackendTraits:
    """What every side may ask of a backend without running it: the CLI's checks, the template, the
    local stack and the control plane read these instead of comparing backend names. What a backend
    does is found through each side's registry (docs/extending.md)."""

    #: The stack starts its machines, as a `provider:` block says (every backend but `local`).
    cloud: bool
    #: Its instances run in the agents' network: the stack's subnets, security group and key pair.
    networked: bool = False
    #: The stack names a resource after each of its pools (`<stack>-<pool>`: an Auto Scaling group, a
    #: Batch job queue) and records it as the pool's `provider.group`.
    grouped: bool = False
    #: Its trials run in the experiment's container image (`environment.image`); the others run in the
    #: agent's own Python, and a trial's log says the image is unused.
    runs_image: bool = False
    #: How its instance types are spelled: SageMaker's are EC2's behind "ml.".
    instance_prefix: str = ""
    #: It keeps instances between runs: `min_instances` above 0 and a spot price cap mean something.
    keeps_instances: bool = True
    #: Its instances count against the account's EC2 vCPU quotas (checked at deploy and before scaling).
    ec2_quotas: bool = False
    #: Each run is a job of its own: submitted when the run launches, ended when the run is stopped.
    job_per_run: bool = False
    #: A pool that names no image runs AWS's PyTorch training image for its region and instance type.
    training_image: bool = False
    #: Its service writes job ARNs in lower case, which IAM and the stack's event rule match exactly: the
    #: stack's name must be lower case.
    lowercase_arns: bool = False
    #: Its pools that may place a multi-node trial on an EFA-capable type get an EFA network interface
    #: and a cluster placement group (`Provider.efa`, decided at deploy).
    efa: bool = False
    #: A spot pool also runs on-demand instances (Batch: its job queue falls back to its on-demand
    #: environment, and its multi-node queue has only that one): both vCPU quotas count.
    spot_with_on_demand: bool = False


#: Every backend, declared once: a new one is a line here and a module per side (docs/extending.md).
BACKEND_TRAITS: dict[Backend, BackendTraits] = {
    "local": BackendTraits(cloud=False),
    "ec2": BackendTraits(cloud=True, networked=True, grouped=True, ec2_quotas=True, efa=True),
    "batch": BackendTraits(
        cloud=True,
        networked=True,
        grouped=True,
        runs_image=True,
        ec2_quotas=True,
        job_per_run=True,
        spot_with_on_demand=True,
    ),
    "sagemaker": BackendTraits(
        cloud=True,
        runs_image=True,
        instance_prefix="ml.",
        keeps_instances=False,
        job_per_run=True,
        training_image=True,
        lowercase_arns=True,
    ),
}
BACKENDS: tuple[Backend, ...] = tuple(BACKEND_TRAITS)
#: The backends whose machines the stack starts (a `provider:` block says how).
CLOUD_BACKENDS: tuple[Backend, ...] = tuple(b for b, t in BACKEND_TRAITS.items() if t.cloud)


def traits(backend: str) -> BackendTraits:
    """The traits of `backend`; an unknown one is refused by name."""
    for name, found in BACKEND_TRAITS.items():
        if name == backend:
            return found
    raise InvalidPoolError(f"backend {backend!r} is not one Stratus has; use one of {', '.join(BACKENDS)}")


#: A pool's name: the stack's resources are named after it (an Auto Scaling group `<stack>-<pool>`).
POOL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")

#: Determined's default job priority (1-99, lower runs first).
DEFAULT_PRIORITY = 42
DEFAULT_POOL = "default"


@dataclass(frozen=True)
class Provider:
    """What a cloud pool's backend needs (Determined's `provider` keys, periods in seconds)."""

    #: Instance types, the first preferred (an EC2 group's overrides; Batch's compute environment).
    instance_types: tuple[str, ...] = ()
    min_instances: int = 0
    max_instances: int = 5
    spot: bool = False
    #: The most to pay per instance-hour for spot, in USD ("" = up to the on-demand price).
    spot_max_price: str = ""
    #: An instance idle this long is scaled in (Determined's `max_idle_agent_period`, 10 minutes).
    max_idle_agent_period_s: float = 600.0
    #: An instance whose agent has not heartbeated this long after launch is replaced (20 minutes).
    max_agent_starting_period_s: float = 1200.0
    #: The container image of Batch and SageMaker jobs.
    image: str = ""
    #: The backend's resource for this pool: the Auto Scaling group, the Batch job queue (set at deploy).
    group: str = ""
    #: GPUs of each instance (0: a CPU type; its trials get the CPU flavour of `environment`).
    gpus: int = 0
    #: Its instances run in subnets of their own, not in all of the agents' (set at deploy where a zone of
    #: those offers none of its types, and for an `efa` pool: one zone's): the stack takes them as the
    #: pool's own parameter.
    own_subnets: bool = False
    #: Its instances take an EFA network interface and share a cluster placement group, which holds one
    #: zone's instances (set at deploy, with `own_subnets`, for a pool whose backend has the `efa` trait,
    #: whose types all support EFA and which may place a multi-node trial: `max_instances` above 1).
    efa: bool = False


@dataclass(frozen=True)
class PoolSpec:
    name: str
    scheduler: SchedulerKind = "priority"
    #: Priority scheduler only: a higher-priority job that cannot fit preempts lower-priority trials.
    preemption: bool = True
    default_priority: int = DEFAULT_PRIORITY
    description: str = ""
    #: Slots of each agent, where known (the local stack's `--slots`, an instance type's GPUs).
    slots_per_agent: int | None = None
    #: The most agents the pool can have, where known (the local stack's count, an ASG's maximum).
    max_agents: int | None = None
    backend: Backend = "local"
    provider: Provider | None = None

    @property
    def max_slots(self) -> int | None:
        """The most slots the pool can ever offer, or None where its shape is unknown."""
        if self.slots_per_agent is None or self.max_agents is None:
            return None
        return self.slots_per_agent * self.max_agents


#: The pools of a control plane configured with none: Determined's default pool, priority scheduler
#: with preemption on (so a plain `det deploy local up` shows preemption).
DEFAULT_POOLS: tuple[PoolSpec, ...] = (PoolSpec(name=DEFAULT_POOL),)


def pools_from_json(text: str) -> tuple[PoolSpec, ...]:
    """Pools from their JSON form (`STRATUS_POOLS`: a list of objects with PoolSpec's fields); the
    default pools when `text` is empty."""
    if not text.strip():
        return DEFAULT_POOLS
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise InvalidPoolError(f"the pools setting {text[:80]!r} is not JSON: {error}") from error
    if not isinstance(raw, list) or not raw:
        raise InvalidPoolError(f"the pools setting must be a non-empty JSON list of pools, not {text[:80]!r}")
    pools = tuple(pool_from_dict(item) for item in raw)
    names = [pool.name for pool in pools]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise InvalidPoolError(f"pool names must be unique; {', '.join(duplicates)} is configured twice")
    return pools


def pool_from_dict(item: Any) -> PoolSpec:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        raise InvalidPoolError(f"each pool needs a non-empty string 'name'; got {item!r}")
    if not POOL_NAME.match(item["name"]):
        raise InvalidPoolError(
            f"pool name {item['name']!r} must be letters, digits, '-' or '_' (at most 63), starting with a "
            "letter or digit"
        )
    known = {f.name for f in fields(PoolSpec)}
    unknown = sorted(set(item) - known)
    if unknown:
        raise InvalidPoolError(
            f"pool {item['name']!r} has unknown fields {unknown}; the fields are {sorted(known)}"
        )
    provider = item.get("provider")
    if provider is not None:
        item = {**item, "provider": provider_from_dict(item["name"], provider)}
    spec = PoolSpec(**item)
    if spec.backend not in BACKENDS:
        raise InvalidPoolError(
            f"pool {spec.name!r} has backend {spec.backend!r}; use one of {', '.join(BACKENDS)}"
        )
    if traits(spec.backend).cloud and spec.provider is None:
        raise InvalidPoolError(f"pool {spec.name!r} has backend {spec.backend!r} and no provider; add one")
    if spec.scheduler not in SCHEDULER_KINDS:
        raise InvalidPoolError(
            f"pool {spec.name!r} has scheduler {spec.scheduler!r}; use one of {', '.join(SCHEDULER_KINDS)}"
        )
    if not isinstance(spec.preemption, bool):
        raise InvalidPoolError(f"pool {spec.name!r} has preemption {spec.preemption!r}; use true or false")
    if not isinstance(spec.default_priority, int) or not 1 <= spec.default_priority <= 99:
        raise InvalidPoolError(
            f"pool {spec.name!r} has default_priority {spec.default_priority}; use 1 to 99"
        )
    for name in ("slots_per_agent", "max_agents"):
        value = getattr(spec, name)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise InvalidPoolError(f"pool {spec.name!r} has {name} {value!r}; use a positive integer")
    return spec


def provider_from_dict(pool: str, item: Any) -> Provider:
    if isinstance(item, Provider):
        return item
    if not isinstance(item, dict):
        raise InvalidPoolError(f"pool {pool!r} has provider {item!r}; use an object with Provider's fields")
    known = {f.name for f in fields(Provider)}
    unknown = sorted(set(item) - known)
    if unknown:
        raise InvalidPoolError(
            f"pool {pool!r}'s provider has unknown fields {unknown}; the fields are {sorted(known)}"
        )
    provider = Provider(**{**item, "instance_types": tuple(item.get("instance_types") or ())})
    if not 0 <= provider.min_instances <= provider.max_instances:
        raise InvalidPoolError(
            f"pool {pool!r} has min_instances {provider.min_instances} and max_instances "
            f"{provider.max_instances}; use 0 <= min <= max"
        )
    return provider


def pools_to_json(pools: Iterable[PoolSpec]) -> str:
    """The pools' JSON (`pools_from_json` reads it back): only the fields that differ from their defaults,
    without spaces, as it travels in a Lambda environment (4 KB in all, with the other variables)."""
    return json.dumps([_changed(pool) for pool in pools], sort_keys=True, separators=(",", ":"))


def _changed(record: PoolSpec | Provider) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if f.name == "name" or value != default:
            out[f.name] = _changed(value) if isinstance(value, Provider) else _plain(value)
    return out


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def why_never_fits(pool: PoolSpec, slots: int) -> str | None:
    """Why a trial of `slots` slots can never run in the pool, as far as its shape is known; None when it
    may. One agent holds a request up to its size; a bigger one takes whole agents (as
    `scheduling.multi_node_placement` places it), so it must be a multiple of the agents' slots, and
    at most the pool's slots."""
    per_agent = pool.slots_per_agent
    if per_agent is not None and slots > per_agent and slots % per_agent:
        return (
            f"slots_per_trial {slots} is more than one agent of pool {pool.name!r} holds ({per_agent}) and "
            f"not a multiple of it, so it can never be placed on whole agents"
        )
    most = pool.max_slots
    if most is not None and slots > most:
        return f"slots_per_trial {slots} is more than pool {pool.name!r} can ever offer ({most} slots)"
    return None
