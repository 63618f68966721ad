"""The resource pools of the local stack: `det deploy local up --pool ...` options and the
`--cluster-config FILE` file, read into pools with their agents.

    --pool NAME[:scheduler=priority|fair_share][:preemption=on|off][:priority=N][:slots=N][:agents=N]
           [:backend=local|ec2|batch|sagemaker][:min=N][:max=N][:spot=on|off][:idle=SECONDS]

(repeatable; `slots` and `agents` default to `--slots` and `--agents`; `--backend ec2` makes the default
pool an ec2 one) and, in the shape of Determined's
master config (its `resource_pools` list, plus the agents the local stack starts for each pool):

    resource_pools:
      - pool_name: gpu
        description: the big ones
        scheduler: {type: priority, preemption: true, default_priority: 42}   # or {type: fair_share}
        agents: 2
        slots_per_agent: 4
      - pool_name: spot
        provider: {type: ec2, max_instances: 3, spot: true}   # played in the stack's moto (below)

read by the reader `det deploy aws up --pools-file` uses too (`stratus.contract.resource_pools`); a
`provider:` block's periods default to the local stack's (`LOCAL_IDLE_S`, `LOCAL_STARTING_S`) and its
instance type to a stand-in.

The pool "default" always exists (an experiment without `resources.resource_pool` goes there): with
`--slots` and `--agents`, the priority scheduler and preemption, unless a pool of that name is given. A
pool given explicitly declares its shape (agents × slots), so the control plane refuses at submission a
trial that could never fit in it; the implicit default pool keeps its shape unknown, as before pools
were configurable (more agents may join it by hand).

A pool with `backend=sagemaker` runs each run as a SageMaker training job in the stack's moto, whose
instances' agents the local SageMaker runner (`infra.local.sagemaker`) starts. A pool with
`backend=batch` is AWS Batch's job queues in the stack's moto: `max` lanes of `slots` slots,
each run a job whose agent the local Batch runner (`infra.local.batch`) starts. A pool with `backend=ec2`
starts no agent: it is an Auto Scaling group in the stack's moto, from `min`
(default 0) to `max` (default `agents`) instances of `slots` slots, which the control plane scales from
its queue and the local compute runner (`infra.local.compute`) turns into agent processes, one per
running instance. `spot=on` makes its instances spot ones (a fake interruption can be sent to them);
`idle` is how long an idle instance is kept (default 20 s here, Determined's 10 minutes on AWS).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from stratus.contract.errors import InvalidPoolError
from stratus.contract.pools import (
    BACKENDS,
    CLOUD_BACKENDS,
    DEFAULT_POOL,
    DEFAULT_PRIORITY,
    SCHEDULER_KINDS,
    PoolSpec,
    Provider,
    traits,
)
from stratus.contract.pools import POOL_NAME as _NAME
from stratus.contract.resource_pools import ConfiguredPool, ProviderDefaults, read_resource_pools

_ON = {"on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}
#: The local stack's ec2 pools: an idle instance goes after this long, one whose agent never joined
#: after this long is replaced (Determined's 10 and 20 minutes are for AWS).
LOCAL_IDLE_S = 20.0
LOCAL_STARTING_S = 60.0
#: What a cluster config's `provider:` block leaves out gets the same local values (and a stand-in type).
_LOCAL = ProviderDefaults(
    idle=f"{LOCAL_IDLE_S:g}s", starting=f"{LOCAL_STARTING_S:g}s", instance_type="g5.xlarge"
)
#: The image a local Batch or SageMaker pool's jobs name (their agents run in this machine's Python).
LOCAL_IMAGE = "stratus/local"
_OPTIONS = ("scheduler", "preemption", "priority", "slots", "agents", "backend", "min", "max", "spot", "idle")


class ClusterConfigError(InvalidPoolError):
    """A pool option or cluster config the local stack cannot use (the message names it and the fix)."""


@dataclass(frozen=True)
class LocalPool:
    """A pool of the local stack: what the control plane knows of it, and the agents started for it."""

    spec: PoolSpec
    agents: int
    slots: int  # of each agent

    def agent_ids(self) -> list[str]:
        # The default pool's agents keep the names they always had.
        prefix = "local" if self.spec.name == DEFAULT_POOL else self.spec.name
        return [f"{prefix}-{i}" for i in range(self.agents)]


def local_pools(
    options: list[str], config_file: Path | None, *, slots: int, agents: int, backend: str = "local"
) -> list[LocalPool]:
    """The pools: those of the config file, then those of the options, then the implicit default pool
    unless one of them is named "default" (of `backend`: `ec2` makes it a group of up to `agents`)."""
    pools: list[LocalPool] = []
    if config_file is not None:
        pools.extend(read_cluster_config(config_file, slots=slots, agents=agents))
    pools.extend(parse_pool_option(text, slots=slots, agents=agents) for text in options)
    names = [pool.spec.name for pool in pools]
    for name in names:
        if names.count(name) > 1:
            raise ClusterConfigError(f"pool {name!r} is given twice; name each pool once")
    if DEFAULT_POOL not in names:
        if backend in CLOUD_BACKENDS:
            pools.insert(
                0, parse_pool_option(f"{DEFAULT_POOL}:backend={backend}", slots=slots, agents=agents)
            )
        elif backend not in BACKENDS:
            raise ClusterConfigError(f"--backend {backend!r} is not available here; use {_one_of(BACKENDS)}")
        else:
            # Its shape is known (this machine's agents): a trial it can never hold is refused at submission.
            spec = PoolSpec(DEFAULT_POOL, slots_per_agent=slots, max_agents=agents)
            pools.insert(0, LocalPool(spec, agents=agents, slots=slots))
    return pools


def parse_pool_option(text: str, *, slots: int, agents: int) -> LocalPool:
    name, *settings = text.split(":")
    values: dict[str, str] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not value:
            raise ClusterConfigError(
                f"--pool {text!r}: {setting!r} is not KEY=VALUE; e.g. --pool gpu:scheduler=fair_share:agents=2"
            )
        values[key] = value
    unknown = sorted(set(values) - set(_OPTIONS))
    if unknown:
        raise ClusterConfigError(
            f"--pool {text!r}: unknown setting {unknown[0]!r}; use {', '.join(_OPTIONS)}"
        )
    where = f"--pool {text!r}"
    pool = _pool(
        where,
        name,
        scheduler=values.get("scheduler", "priority"),
        preemption=_switch(where, "preemption", values.get("preemption", "on")),
        default_priority=_count(where, "priority", values.get("priority", DEFAULT_PRIORITY)),
        slots=_count(where, "slots", values.get("slots", slots)),
        agents=_count(where, "agents", values.get("agents", agents)),
    )
    backend = values.get("backend", "local")
    if backend in BACKENDS and not traits(backend).cloud:
        extra = sorted(set(values) & {"min", "max", "spot", "idle"})
        if extra:
            raise ClusterConfigError(
                f"{where}: {extra[0]!r} is for cloud pools (backend={_one_of(CLOUD_BACKENDS)})"
            )
        return pool
    if backend not in CLOUD_BACKENDS:
        raise ClusterConfigError(
            f"{where}: backend {backend!r} is not available here; use {_one_of(BACKENDS)}"
        )
    most = _count(where, "max", values.get("max", pool.agents))
    least = int(values.get("min", "0")) if values.get("min", "0").isdigit() else -1
    if not 0 <= least <= most:
        raise ClusterConfigError(
            f"{where}: min {values.get('min')!r} must be a whole number from 0 to max ({most})"
        )
    try:
        idle = float(values.get("idle", LOCAL_IDLE_S))
    except ValueError:
        idle = -1.0
    if idle <= 0:
        raise ClusterConfigError(f"{where}: idle {values.get('idle')!r} must be a positive number of seconds")
    provider = Provider(
        # A stand-in type, as the backend spells it (`ml.` for SageMaker); an image where trials run in one.
        instance_types=(traits(backend).instance_prefix + "g5.xlarge",),
        image=LOCAL_IMAGE if traits(backend).runs_image else "",
        min_instances=least,
        max_instances=most,
        spot=_switch(where, "spot", values.get("spot", "off")),
        max_idle_agent_period_s=idle,
        max_agent_starting_period_s=LOCAL_STARTING_S,
    )
    spec = replace(pool.spec, backend=backend, provider=provider, max_agents=most)
    return LocalPool(spec, agents=0, slots=pool.slots)


def read_cluster_config(path: Path, *, slots: int, agents: int) -> list[LocalPool]:
    """The pools of a cluster config, read by the reader every side shares
    (`stratus.contract.resource_pools`), plus the local stack's `agents` and `slots_per_agent` (which
    default to `--agents` and `--slots`). A pool with a `provider:` block is a cloud pool played in the
    stack's moto (its instances' agents run here), with the local stack's short periods."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ClusterConfigError(
            f"cannot read the cluster config {path}: {error.strerror or error}"
        ) from error
    except yaml.YAMLError as error:
        raise ClusterConfigError(f"the cluster config {path} is not YAML: {error}") from error
    try:
        pools = read_resource_pools(data, str(path), local=True, require_default=False, defaults=_LOCAL)
    except InvalidPoolError as error:
        raise ClusterConfigError(str(error)) from error
    return [_local(pool, slots=slots, agents=agents) for pool in pools]


def _local(pool: ConfiguredPool, *, slots: int, agents: int) -> LocalPool:
    each = pool.slots_per_agent or slots
    if pool.spec.provider is None:
        count = pool.agents or agents
        return LocalPool(replace(pool.spec, slots_per_agent=each, max_agents=count), agents=count, slots=each)
    provider = pool.spec.provider
    if traits(pool.spec.backend).runs_image and not provider.image:
        provider = replace(provider, image=LOCAL_IMAGE)  # the local runners start their agents here
    return LocalPool(replace(pool.spec, slots_per_agent=each, provider=provider), agents=0, slots=each)


def _pool(
    where: str,
    name: str,
    *,
    scheduler: str,
    preemption: bool,
    default_priority: int,
    slots: int,
    agents: int,
    description: str = "",
) -> LocalPool:
    if not _NAME.match(name):
        raise ClusterConfigError(
            f"{where}: pool name {name!r} must be letters, digits, '-' or '_' (at most 63), starting with a letter or digit"
        )
    if scheduler not in SCHEDULER_KINDS:
        raise ClusterConfigError(
            f"{where}: scheduler {scheduler!r} is not one of {', '.join(SCHEDULER_KINDS)}"
        )
    if not 1 <= default_priority <= 99:
        raise ClusterConfigError(f"{where}: default priority {default_priority} must be 1 to 99")
    spec = PoolSpec(
        name=name,
        scheduler=scheduler,  # checked against SCHEDULER_KINDS above
        preemption=preemption and scheduler == "priority",
        default_priority=default_priority,
        description=description,
        slots_per_agent=slots,
        max_agents=agents,
    )
    return LocalPool(spec, agents=agents, slots=slots)


def _switch(where: str, key: str, value: str) -> bool:
    if value.lower() not in _ON:
        raise ClusterConfigError(f"{where}: {key}={value!r} must be on or off")
    return _ON[value.lower()]


def _count(where: str, what: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if isinstance(value, bool) or number < 1 or str(number) != str(value).strip():
        raise ClusterConfigError(f"{where}: {what} {value!r} must be a positive integer")
    return number


def _one_of(names: tuple[str, ...]) -> str:
    """`local, ec2, batch or sagemaker`: the declared kinds, as a message names them."""
    return ", ".join(names[:-1]) + " or " + names[-1]
