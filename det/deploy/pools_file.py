"""The pools file of `det deploy aws up --pools-file FILE`: Determined's master-config `resource_pools:`
list, each pool's `provider:` block with Determined's key names, read into the pools' wire form.

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

A pool without `provider:` is a local pool (agents started by hand). One pool must be named `default`
(as Determined's `default_compute_resource_pool`): experiments that name no pool run there. The wire
form is the control plane's (`STRATUS_POOLS`: `PoolSpec`'s fields, `provider` `Provider`'s);
`max_agents` is `max_instances`, `slots_per_agent` comes at deploy from the instance type
(`det/deploy/aws_compute.py`, whose flags go through `read_provider` too).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from det.errors import UsageError

CLOUD_BACKENDS = ("ec2", "batch", "sagemaker")
SCHEDULER_KINDS = ("priority", "fair_share")
DEFAULT_POOL = "default"
POOL_KEYS = ("pool_name", "description", "scheduler", "provider")
PROVIDER_KEYS = ("type", "instance_type", "min_instances", "max_instances", "spot", "spot_max_price",
                 "max_idle_agent_period", "max_agent_starting_period", "image")  # fmt: skip
# The control plane's POOL_NAME (chalicelib/domain/pools.py; the CLI cannot import it), checked here first
# so that a pools file's error names the file and the pool.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0}


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


def read_pools_file(path: Path) -> list[dict[str, Any]]:
    """The pools of the file, in the control plane's wire form; a UsageError naming the file, the pool,
    the key and the fix for anything it cannot use."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise UsageError(f"--pools-file {path}: cannot read it ({e.strerror or e}); pass a YAML file") from e
    except yaml.YAMLError as e:
        raise UsageError(f"--pools-file {path} is not YAML ({e}); fix the line it names") from e
    entries = data.get("resource_pools") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{path} needs a non-empty `resource_pools:` list (Determined's master config)")
    pools = [_pool(path, i, entry) for i, entry in enumerate(entries)]
    names = [pool["name"] for pool in pools]
    for name in names:
        if names.count(name) > 1:
            raise UsageError(f"{path}: pool {name!r} is given twice; name each pool once")
    if DEFAULT_POOL not in names:
        raise UsageError(
            f"{path}: no pool is named {DEFAULT_POOL!r}; experiments that name no resource_pool run there, "
            f"so name one pool {DEFAULT_POOL}"
        )
    return pools


def _pool(path: Path, index: int, entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict) or not entry.get("pool_name"):
        raise UsageError(f"{path}: resource_pools[{index}] needs a `pool_name`; add one")
    name = str(entry["pool_name"])
    where = f"{path}: pool {name!r}"
    if not _NAME.match(name):
        raise UsageError(
            f"{where}: the name must be letters, digits, '-' or '_' (at most 63), starting with a letter or digit"
        )
    _known(entry, POOL_KEYS, lambda key: f"{where}: key {key!r}")
    scheduler = entry.get("scheduler") or {}
    if not isinstance(scheduler, dict):
        raise UsageError(f"{where}: scheduler must be a mapping such as {{type: priority, preemption: true}}")
    _known(scheduler, ("type", "preemption", "default_priority"), lambda k: f"{where}: scheduler.{k}")
    kind = scheduler.get("type", "priority")
    if kind not in SCHEDULER_KINDS:
        raise UsageError(f"{where}: scheduler.type {kind!r} must be {' or '.join(SCHEDULER_KINDS)}")
    preemption = scheduler.get("preemption", True)
    if not isinstance(preemption, bool):
        raise UsageError(f"{where}: scheduler.preemption {preemption!r} must be true or false")
    priority = scheduler.get("default_priority", 42)  # Determined's
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 99:
        raise UsageError(f"{where}: scheduler.default_priority {priority!r} must be an integer from 1 to 99")
    pool: dict[str, Any] = {
        "name": name,
        "description": str(entry.get("description") or ""),
        "scheduler": kind,
        "preemption": preemption and kind == "priority",
        "default_priority": priority,
    }
    raw = entry.get("provider")
    if raw is None:
        return pool | {"backend": "local"}
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: provider must be a mapping such as {{type: ec2}}; fix it")
    return cloud_pool(pool, raw, Keys(f"{where}: "))


def cloud_pool(pool: dict[str, Any], raw: Mapping[str, Any], label: Keys) -> dict[str, Any]:
    """`pool` (name, scheduler, ...) made a cloud pool by its Determined-keyed provider mapping."""
    backend, provider = read_provider(raw, label)
    return pool | {"backend": backend, "max_agents": provider["max_instances"], "provider": provider}


def read_provider(raw: Mapping[str, Any], label: Keys) -> tuple[str, dict[str, Any]]:
    """The backend and the wire form of a `provider:` block (Determined's keys)."""
    _known(raw, PROVIDER_KEYS, label)
    backend = raw.get("type")
    if backend not in CLOUD_BACKENDS:
        raise UsageError(f"{label('type')} {backend!r} is not a backend; use {', '.join(CLOUD_BACKENDS)}")
    given = raw.get("instance_type")
    types = [given] if isinstance(given, str) else given
    if not isinstance(types, list) or not types or not all(isinstance(t, str) and t for t in types):
        raise UsageError(f"{label('instance_type')} {given!r} must be an instance type (g5.xlarge) or a list")
    for kind in types:
        if kind.startswith("ml.") != (backend == "sagemaker"):
            fix = "SageMaker's start with ml." if backend == "sagemaker" else "drop the ml. prefix"
            raise UsageError(f"{label('instance_type')} {kind!r} is not a {backend} instance type; {fix}")
    low, high = _whole(raw, "min_instances", 0, label), _whole(raw, "max_instances", 5, label)
    if high < 1 or low > high:
        raise UsageError(
            f"{label('min_instances')} {low} and {label.name('max_instances')} {high} must satisfy "
            "0 <= min <= max and max >= 1; fix them"
        )
    spot = raw.get("spot", False)
    if not isinstance(spot, bool):
        raise UsageError(f"{label('spot')} {spot!r} must be true or false")
    price = "" if raw.get("spot_max_price") is None else str(raw["spot_max_price"])
    if price and not spot:
        raise UsageError(
            f"{label('spot_max_price')} applies to spot instances only; set {label.name('spot')} too, or drop it"
        )
    if price and (not re.fullmatch(r"\d+(\.\d+)?", price) or float(price) <= 0):
        raise UsageError(f"{label('spot_max_price')} {price!r} must be a positive price in USD such as 0.50")
    if backend == "sagemaker" and low:
        raise UsageError(
            f"{label('min_instances')} {low}: a SageMaker pool starts a training job per trial and keeps no "
            "instance between them; drop it (or use an ec2 or batch pool to keep instances warm)"
        )
    if backend == "sagemaker" and price:
        raise UsageError(
            f"{label('spot_max_price')}: SageMaker's managed spot training takes no price cap (it bills "
            "the spot price, at most the on-demand one); drop it"
        )
    image = str(raw.get("image") or "")
    if image and backend == "ec2":
        raise UsageError(f"{label('image')}: EC2 pools run on the AMI (--agent-ami), not an image; drop it")
    idle = duration_s(raw.get("max_idle_agent_period", "10m"), label("max_idle_agent_period"))
    starting = duration_s(raw.get("max_agent_starting_period", "20m"), label("max_agent_starting_period"))
    return backend, {
        "instance_types": types,
        "min_instances": low,
        "max_instances": high,
        "spot": spot,
        "spot_max_price": price,
        "max_idle_agent_period_s": idle,
        "max_agent_starting_period_s": starting,
        "image": image,
    }


def duration_s(value: Any, what: str) -> float:
    """Seconds of a duration as Determined writes them (`30s`, `10m`, `1h`, `1h30m`)."""
    text = str(value).strip()
    parts = _DURATION.findall(text)
    if isinstance(value, bool) or not parts or "".join(n + u for n, u in parts) != text:
        raise UsageError(f"{what} {value!r} is not a duration; use one such as 30s, 10m or 1h")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _whole(raw: Mapping[str, Any], key: str, default: int, label: Keys) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"{label(key)} {value!r} must be a whole number, 0 or more")
    return value


def _known(given: Mapping[str, Any], keys: tuple[str, ...], label: Callable[[str], str]) -> None:
    unknown = sorted(set(given) - set(keys))
    if unknown:
        raise UsageError(f"{label(unknown[0])} is not a key Stratus reads; use {', '.join(keys)}")
