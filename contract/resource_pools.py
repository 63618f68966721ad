"""Determined's master-config `resource_pools:` list, read into pools (`stratus.contract.pools`) by one
reader for every side: `det deploy aws up --pools-file FILE` (and its flags, whose values go through the
same provider rules), and the local stack's `det deploy local up --cluster-config FILE`.

    resource_pools:
      - pool_name: default
        description: one GPU per agent
        scheduler: {type: priority, preemption: true, default_priority: 42}   # or {type: fair_share}
        provider:
          type: ec2                      # ec2 | batch | sagemaker
          instance_type: g5.xlarge       # or a list, the first preferred
          min_instances: 0
          max_instances: 5
          spot: true
          spot_max_price: "0.50"         # USD per instance-hour; absent = up to the on-demand price
          max_idle_agent_period: 10m     # Determined's durations: 30s, 10m, 1h, 1h30m
          max_agent_starting_period: 20m
          image: ...                     # the container image of batch and sagemaker pools
        agents: 2                        # the local stack only: the agents it starts for a local pool
        slots_per_agent: 4               # the local stack only: each agent's slots

A pool without `provider:` is a local pool (agents started by hand, or by the local stack). A cloud
pool's `max_agents` is its `max_instances`; its `slots_per_agent` comes from the instance type, which
only the deploying side can look up. The caller loads the YAML (the contract imports the standard
library only) and says where it came from, so that every error names the file, the pool and the key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from stratus.contract.errors import InvalidPoolError
from stratus.contract.pools import (
    CLOUD_BACKENDS,
    DEFAULT_POOL,
    DEFAULT_PRIORITY,
    POOL_NAME,
    SCHEDULER_KINDS,
    Backend,
    PoolSpec,
    Provider,
    SchedulerKind,
    traits,
)

#: Determined's keys of a pool.
POOL_KEYS = ("pool_name", "description", "scheduler", "provider")
#: The local stack's keys besides Determined's: the agents it starts for the pool, and their slots.
LOCAL_KEYS = ("agents", "slots_per_agent")
SCHEDULER_KEYS = ("type", "preemption", "default_priority")
PROVIDER_KEYS = ("type", "instance_type", "min_instances", "max_instances", "spot", "spot_max_price",
                 "max_idle_agent_period", "max_agent_starting_period", "image")  # fmt: skip
#: Determined's defaults for an agent's idle and starting periods (on AWS; the local stack passes its own).
IDLE_PERIOD = "10m"
STARTING_PERIOD = "20m"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0}


@dataclass(frozen=True)
class ConfiguredPool:
    """A pool of the list: what the control plane knows of it, and the local stack's agents for it."""

    spec: PoolSpec
    #: The local stack's `agents:` and `slots_per_agent:` (None where not given, and never on AWS).
    agents: int | None = None
    slots_per_agent: int | None = None


@dataclass(frozen=True)
class Keys:
    """How errors name a provider key: `pools.yaml: pool 'gpu': provider.spot`, or the flag `--spot`."""

    where: str = ""
    #: The flag of each key, where the keys come from flags.
    flags: Mapping[str, str] | None = None

    def __call__(self, key: str) -> str:
        return self.where + self.name(key)

    def name(self, key: str) -> str:
        return self.flags.get(key, key) if self.flags is not None else f"provider.{key}"


@dataclass(frozen=True)
class ProviderDefaults:
    """What a provider block that leaves a key out gets: Determined's values on AWS; the local stack plays
    its instances on this machine and passes shorter periods and a stand-in instance type."""

    idle: str = IDLE_PERIOD
    starting: str = STARTING_PERIOD
    #: None: `instance_type` must be given (AWS must know what to start).
    instance_type: str | None = None


def read_resource_pools(
    data: Any,
    where: str,
    *,
    local: bool = False,
    require_default: bool = True,
    defaults: ProviderDefaults = ProviderDefaults(),
) -> list[ConfiguredPool]:
    """The pools of a loaded master config (`data`, from the file `where`). `local`: the local stack's
    keys are allowed too. `require_default`: one pool must be named `default` (Determined's
    `default_compute_resource_pool`: experiments that name no pool run there)."""
    entries = data.get("resource_pools") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise InvalidPoolError(
            f"{where} needs a non-empty `resource_pools:` list (Determined's master config)"
        )
    pools = [read_pool(where, i, entry, local=local, defaults=defaults) for i, entry in enumerate(entries)]
    names = [pool.spec.name for pool in pools]
    for name in names:
        if names.count(name) > 1:
            raise InvalidPoolError(f"{where}: pool {name!r} is given twice; name each pool once")
    if require_default and DEFAULT_POOL not in names:
        raise InvalidPoolError(
            f"{where}: no pool is named {DEFAULT_POOL!r}; experiments that name no resource_pool run there, "
            f"so name one pool {DEFAULT_POOL}"
        )
    return pools


def read_pool(
    where: str,
    index: int,
    entry: Any,
    *,
    local: bool = False,
    defaults: ProviderDefaults = ProviderDefaults(),
) -> ConfiguredPool:
    if not isinstance(entry, dict) or not entry.get("pool_name"):
        raise InvalidPoolError(f"{where}: resource_pools[{index}] needs a `pool_name`; add one")
    name = str(entry["pool_name"])
    here = f"{where}: pool {name!r}"
    check_name(name, here)
    _known(entry, POOL_KEYS + (LOCAL_KEYS if local else ()), lambda key: f"{here}: key {key!r}")
    kind, preemption, priority = read_scheduler(entry.get("scheduler"), here)
    spec = PoolSpec(
        name=name,
        description=str(entry.get("description") or ""),
        scheduler=kind,
        preemption=preemption and kind == "priority",
        default_priority=priority,
    )
    agents = _positive(entry, "agents", here)
    slots = _positive(entry, "slots_per_agent", here)
    raw = entry.get("provider")
    if raw is None:
        return ConfiguredPool(spec, agents, slots)
    if not isinstance(raw, dict):
        raise InvalidPoolError(f"{here}: provider must be a mapping such as {{type: ec2}}; fix it")
    if agents is not None:
        raise InvalidPoolError(
            f"{here}: agents is for local pools; a cloud pool's instances come and go between its "
            "provider's min_instances and max_instances, so drop it"
        )
    return ConfiguredPool(cloud_pool(spec, raw, Keys(f"{here}: "), defaults), None, slots)


def check_name(name: str, where: str) -> None:
    if not POOL_NAME.match(name):
        raise InvalidPoolError(
            f"{where}: the name must be letters, digits, '-' or '_' (at most 63), starting with a letter or digit"
        )


def read_scheduler(raw: Any, where: str) -> tuple[SchedulerKind, bool, int]:
    """A `scheduler:` block: its kind, whether it preempts, its default priority (Determined's 42)."""
    scheduler = raw or {}
    if not isinstance(scheduler, dict):
        raise InvalidPoolError(
            f"{where}: scheduler must be a mapping such as {{type: priority, preemption: true}}"
        )
    _known(scheduler, SCHEDULER_KEYS, lambda k: f"{where}: scheduler.{k}")
    kind = scheduler.get("type", "priority")
    if kind not in SCHEDULER_KINDS:
        raise InvalidPoolError(f"{where}: scheduler.type {kind!r} must be {' or '.join(SCHEDULER_KINDS)}")
    preemption = scheduler.get("preemption", True)
    if not isinstance(preemption, bool):
        raise InvalidPoolError(f"{where}: scheduler.preemption {preemption!r} must be true or false")
    priority = scheduler.get("default_priority", DEFAULT_PRIORITY)
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 99:
        raise InvalidPoolError(
            f"{where}: scheduler.default_priority {priority!r} must be an integer from 1 to 99"
        )
    return kind, preemption, priority


def cloud_pool(
    pool: PoolSpec, raw: Mapping[str, Any], label: Keys, defaults: ProviderDefaults = ProviderDefaults()
) -> PoolSpec:
    """`pool` (name, scheduler, ...) made a cloud pool by its Determined-keyed provider mapping."""
    backend, provider = read_provider(raw, label, defaults)
    return replace(pool, max_agents=provider.max_instances, backend=backend, provider=provider)


def read_provider(
    raw: Mapping[str, Any], label: Keys, defaults: ProviderDefaults = ProviderDefaults()
) -> tuple[Backend, Provider]:
    """The backend and the provider of a `provider:` block (Determined's keys)."""
    _known(raw, PROVIDER_KEYS, label)
    backend = raw.get("type")
    if backend not in CLOUD_BACKENDS:
        raise InvalidPoolError(
            f"{label('type')} {backend!r} is not a backend; use {', '.join(CLOUD_BACKENDS)}"
        )
    types = _instance_types(raw, backend, label, defaults)
    low, high = _whole(raw, "min_instances", 0, label), _whole(raw, "max_instances", 5, label)
    if high < 1 or low > high:
        raise InvalidPoolError(
            f"{label('min_instances')} {low} and {label.name('max_instances')} {high} must satisfy "
            "0 <= min <= max and max >= 1; fix them"
        )
    spot = raw.get("spot", False)
    if not isinstance(spot, bool):
        raise InvalidPoolError(f"{label('spot')} {spot!r} must be true or false")
    price = "" if raw.get("spot_max_price") is None else str(raw["spot_max_price"])
    if price and not spot:
        raise InvalidPoolError(
            f"{label('spot_max_price')} applies to spot instances only; set {label.name('spot')} too, or drop it"
        )
    if price and (not re.fullmatch(r"\d+(\.\d+)?", price) or float(price) <= 0):
        raise InvalidPoolError(
            f"{label('spot_max_price')} {price!r} must be a positive price in USD such as 0.50"
        )
    kind = traits(backend)
    if not kind.keeps_instances and low:
        raise InvalidPoolError(
            f"{label('min_instances')} {low}: a {backend} pool starts a job per trial and keeps no "
            "instance between them; drop it (or use an ec2 or batch pool to keep instances warm)"
        )
    if not kind.keeps_instances and price:
        raise InvalidPoolError(
            f"{label('spot_max_price')}: a {backend} pool's managed spot capacity takes no price cap (it "
            "bills the spot price, at most the on-demand one); drop it"
        )
    image = str(raw.get("image") or "")
    if image and not kind.runs_image:
        raise InvalidPoolError(
            f"{label('image')}: {backend} pools run on the AMI (--agent-ami), not an image; drop it"
        )
    idle = duration_s(raw.get("max_idle_agent_period", defaults.idle), label("max_idle_agent_period"))
    starting = duration_s(
        raw.get("max_agent_starting_period", defaults.starting), label("max_agent_starting_period")
    )
    provider = Provider(
        instance_types=tuple(types),
        min_instances=low,
        max_instances=high,
        spot=spot,
        spot_max_price=price,
        max_idle_agent_period_s=idle,
        max_agent_starting_period_s=starting,
        image=image,
    )
    return backend, provider


def duration_s(value: Any, what: str) -> float:
    """Seconds of a duration as Determined writes them (`30s`, `10m`, `1h`, `1h30m`)."""
    text = str(value).strip()
    parts = _DURATION.findall(text)
    if isinstance(value, bool) or not parts or "".join(n + u for n, u in parts) != text:
        raise InvalidPoolError(f"{what} {value!r} is not a duration; use one such as 30s, 10m or 1h")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _instance_types(
    raw: Mapping[str, Any], backend: str, label: Keys, defaults: ProviderDefaults
) -> list[str]:
    given = raw.get("instance_type")
    if given is None and defaults.instance_type is not None:
        given = traits(backend).instance_prefix + defaults.instance_type
    types = [given] if isinstance(given, str) else given
    if not isinstance(types, list) or not types or not all(isinstance(t, str) and t for t in types):
        raise InvalidPoolError(
            f"{label('instance_type')} {given!r} must be an instance type (g5.xlarge) or a list"
        )
    prefix = traits(backend).instance_prefix
    for kind in types:
        if not kind.startswith(prefix) or (not prefix and kind.startswith("ml.")):
            fix = f"{backend}'s start with {prefix}" if prefix else "drop the ml. prefix"
            raise InvalidPoolError(
                f"{label('instance_type')} {kind!r} is not a {backend} instance type; {fix}"
            )
    return types


def _whole(raw: Mapping[str, Any], key: str, default: int, label: Keys) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidPoolError(f"{label(key)} {value!r} must be a whole number, 0 or more")
    return value


def _positive(entry: Mapping[str, Any], key: str, where: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidPoolError(f"{where}: {key} {value!r} must be a positive integer")
    return value


def _known(given: Mapping[str, Any], keys: tuple[str, ...], label: Callable[[str], str]) -> None:
    unknown = sorted(set(given) - set(keys))
    if unknown:
        raise InvalidPoolError(f"{label(unknown[0])} is not a key Stratus reads; use {', '.join(keys)}")
