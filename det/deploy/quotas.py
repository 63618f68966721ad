"""The quota preflight of `det deploy aws up` (Determined's `deploy/aws/preflight.py`): each cloud pool at
its maximum must fit the account's quotas, in the stack's region.

EC2 and Batch pools: the EC2 vCPU quota of the instance family. EC2 counts running vCPUs per quota, not
instances: on-demand and spot apart, and families grouped (G and VT, P, "standard" A C D H I M R T Z).
The need of a quota is the sum over the pools drawing on it of `vCPUs of the type x max_instances` (the
largest of a pool's types in that quota, as AWS may launch any: a Batch pool's `maxvCpus`). A spot Batch
pool draws on the on-demand quota too (the `spot_with_on_demand` trait: its queue falls back to its
on-demand environment, and its multi-node queue has only that one).

SageMaker pools: SageMaker's own quota of the instances of the pool's type its training jobs may run at
once, `ml.<type> for training job usage` (`... for spot training job usage` for a spot pool), found by
name in Service Quotas (`TRAINING_QUOTAS`); the need is the sum of `max_instances` over the pools of that
type. New accounts often have 0 for the GPU types.

A quota too low refuses `up` (`QuotaError`, naming the pool, the type, the quota, its value, the need and
where to ask for more; a quota of 0 is said so); a quota that cannot be read (no permission; moto knows
no EC2 or SageMaker quota) is a warning, and `up` goes on.

The module is pure: the AWS calls come in through `QuotaCalls`, and the pools are anything shaped like
the control plane's `PoolSpec` (`QuotaPool`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from det._render import plural
from det.errors import UsageError
from stratus.contract.ec2_quotas import CONSOLE_URL, quota_for
from stratus.contract.pools import traits

#: Where the account asks for more of a quota, and a service's quotas (the console in the stack's region).
QUOTA_PAGE = (
    "https://console.aws.amazon.com/servicequotas/home/services/{service}/quotas/{code}?region={region}"
)
QUOTA_LIST = "https://console.aws.amazon.com/servicequotas/home/services/{service}/quotas?region={region}"
#: Each backend with instance quotas of its own: (Service Quotas' service code, the quota's name of an
#: on-demand and a spot pool's type). SageMaker names its quotas by instance type.
TRAINING_QUOTAS: dict[str, tuple[str, str, str]] = {
    "sagemaker": ("sagemaker", "{type} for training job usage", "{type} for spot training job usage"),
}


class QuotaError(UsageError):
    """A pool at its maximum would need more than the account's quota allows."""


@dataclass(frozen=True)
class QuotaValue:
    """A quota as Service Quotas gives it: its code and the account's value (the applied one, else AWS's
    default)."""

    code: str
    value: float


@dataclass(frozen=True)
class InstanceShape:
    """What `ec2:DescribeInstanceTypes` says of a type: its vCPUs, GPUs and memory (MiB, 0: not read)."""

    vcpus: int
    gpus: int
    memory_mib: int = 0

    @property
    def slots(self) -> int:
        """Slots of an agent on it: its GPUs (as Determined counts them); a CPU-only type runs CPU trials
        with one slot per agent (Determined would give it none: its CPU agents take zero-slot tasks)."""
        return self.gpus or 1


class QuotaProvider(Protocol):
    @property
    def instance_types(self) -> Sequence[str]: ...
    @property
    def max_instances(self) -> int: ...
    @property
    def spot(self) -> bool: ...


class QuotaPool(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def provider(self) -> QuotaProvider | None: ...


class QuotaCalls(Protocol):
    region: str

    def instance_types(self, names: Sequence[str]) -> Mapping[str, InstanceShape]: ...

    def service_quota(self, code: str) -> float | None:
        """The account's value of the EC2 quota, or None where it cannot be read."""

    def named_quotas(self, service: str, names: Sequence[str]) -> Mapping[str, QuotaValue | None] | None:
        """The service's quotas of these names (a name missing: no such quota; None: that one cannot be
        read), or None where the service's quotas cannot be listed."""


@dataclass
class _Need:
    #: vCPUs of an EC2 quota, instances of a training quota.
    count: int = 0
    #: How each pool drawing on the quota asks for it: `pool 'gpu' (5 x g5.xlarge of 4 vCPUs)`.
    parts: list[str] = field(default_factory=list)

    def pools(self) -> str:
        return " and ".join(self.parts) + (" needs" if len(self.parts) == 1 else " need")


def check_quotas(calls: QuotaCalls, pools: Sequence[QuotaPool]) -> list[str]:
    """Warnings about quotas that could not be checked; a QuotaError when a pool cannot fit its quota."""
    return check_vcpu_quotas(calls, pools) + check_training_quotas(calls, pools)


def check_vcpu_quotas(calls: QuotaCalls, pools: Sequence[QuotaPool]) -> list[str]:
    """The EC2 vCPU quotas of the EC2 and Batch pools."""
    warnings: list[str] = []
    needs: dict[tuple[str, str], _Need] = {}
    for pool in pools:
        provider = pool.provider
        if not traits(pool.backend).ec2_quotas or provider is None:
            continue
        shapes = calls.instance_types(provider.instance_types)
        markets = [provider.spot]
        if provider.spot and traits(pool.backend).spot_with_on_demand:
            markets.append(False)
        widest: dict[tuple[str, str], str] = {}
        for kind in provider.instance_types:
            quotas = [quota_for(kind, spot) for spot in markets]
            if None in quotas:
                warnings.append(f"pool {pool.name!r}: no vCPU quota known for {kind}'s family; not checked")
            for quota in filter(None, quotas):
                if quota not in widest or shapes[kind].vcpus > shapes[widest[quota]].vcpus:
                    widest[quota] = kind
        for quota, kind in widest.items():
            need = needs.setdefault(quota, _Need())
            need.count += shapes[kind].vcpus * provider.max_instances
            need.parts.append(
                f"pool {pool.name!r} ({provider.max_instances} x {kind} of {shapes[kind].vcpus} vCPUs)"
            )
    for (code, name), need in sorted(needs.items()):
        value = calls.service_quota(code)
        if value is None:
            warnings.append(
                f"could not read the quota {code} ({name}); {need.count} vCPUs are needed, check it at "
                + CONSOLE_URL.format(code=code)
            )
        elif need.count > value:
            raise QuotaError(_refusal(code, name, need, value))
    return warnings


def check_training_quotas(calls: QuotaCalls, pools: Sequence[QuotaPool]) -> list[str]:
    """The instance quotas of the backends that have their own (`TRAINING_QUOTAS`: SageMaker's)."""
    needs: dict[tuple[str, str], _Need] = {}
    for pool in pools:
        provider = pool.provider
        if pool.backend not in TRAINING_QUOTAS or provider is None or not provider.instance_types:
            continue
        service, on_demand, spot = TRAINING_QUOTAS[pool.backend]
        kind = provider.instance_types[0]  # a training job runs on the pool's first type
        need = needs.setdefault((service, (spot if provider.spot else on_demand).format(type=kind)), _Need())
        need.count += provider.max_instances
        need.parts.append(f"pool {pool.name!r} ({provider.max_instances} x {kind})")
    warnings: list[str] = []
    for service in sorted({service for service, _ in needs}):
        names = sorted(name for s, name in needs if s == service)
        found = calls.named_quotas(service, names)
        for name in names:
            need = needs[(service, name)]
            if found is not None and name not in found:
                warnings.append(
                    f"{service} has no quota {name!r} in {calls.region} (is the type offered for training "
                    f"there?); {' and '.join(need.parts)} not checked"
                )
            elif found is None or (quota := found[name]) is None:
                page = QUOTA_LIST.format(service=service, region=calls.region)
                warnings.append(
                    f"could not read the {service} quota {name!r}; {plural(need.count, 'instance')} "
                    f"{'is' if need.count == 1 else 'are'} needed, check it at {page}"
                )
            elif need.count > quota.value:
                raise QuotaError(_training_refusal(service, name, need, quota, calls.region))
    return warnings


def _refusal(code: str, name: str, need: _Need, value: float) -> str:
    zero = ": the account can run no instance of these types until it is raised" if value == 0 else ""
    return (
        f"{need.pools()} {need.count} vCPUs at most, but the account's quota {code} ({name}) is {value:g} "
        f"vCPUs{zero}; lower max_instances or ask for more at {CONSOLE_URL.format(code=code)}"
    )


def _training_refusal(service: str, name: str, need: _Need, quota: QuotaValue, region: str) -> str:
    kind = name.split(" ", 1)[0]
    zero = f": no {service} training job can run on {kind} until it is raised" if quota.value == 0 else ""
    page = QUOTA_PAGE.format(service=service, code=quota.code, region=region)
    return (
        f"{need.pools()} {plural(need.count, 'instance')} at most, but the account's {service} quota {quota.code} "
        f"({name}) is {quota.value:g} in {region}{zero}; lower max_instances or ask for more at {page}"
    )
