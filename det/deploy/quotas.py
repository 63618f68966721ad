"""The vCPU quota preflight of `det deploy aws up` (Determined's `deploy/aws/preflight.py`): each cloud
pool at its maximum must fit the account's EC2 vCPU quota of its instance family.

EC2 counts running vCPUs per quota, not instances: on-demand and spot apart, and families grouped (G and
VT, P, "standard" A C D H I M R T Z). The need of a quota is the sum over the pools drawing on it of
`vCPUs of the type x max_instances` (the largest of a pool's types in that quota, as AWS may launch any).
A quota too low refuses `up` (`QuotaError`, naming the pool, the type, the quota, the need and where to
ask for more); a quota that cannot be read (no permission; moto knows no EC2 quota) is a warning.
Batch pools run EC2 instances too and count; SageMaker has quotas of its own, not checked here.

The module is pure: the AWS calls come in through `QuotaCalls`, and the pools are anything shaped like
the control plane's `PoolSpec` (`QuotaPool`), so the control plane can reuse it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from det.errors import UsageError
from stratus.contract.ec2_quotas import CONSOLE_URL, quota_for
from stratus.contract.pools import traits


class QuotaError(UsageError):
    """A pool at its maximum would need more vCPUs than the account's quota allows."""


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
    def instance_types(self, names: Sequence[str]) -> Mapping[str, InstanceShape]: ...

    def service_quota(self, code: str) -> float | None:
        """The account's value of the EC2 quota, or None where it cannot be read."""


@dataclass
class _Need:
    vcpus: int = 0
    #: How each pool drawing on the quota asks for it: `pool 'gpu' (5 x g5.xlarge of 4 vCPUs)`.
    parts: list[str] = field(default_factory=list)


def check_quotas(calls: QuotaCalls, pools: Sequence[QuotaPool]) -> list[str]:
    """Warnings about quotas that could not be checked; a QuotaError when a pool cannot fit its quota."""
    warnings: list[str] = []
    needs: dict[tuple[str, str], _Need] = {}
    for pool in pools:
        provider = pool.provider
        if not traits(pool.backend).ec2_quotas or provider is None:
            continue
        shapes = calls.instance_types(provider.instance_types)
        widest: dict[tuple[str, str], str] = {}
        for kind in provider.instance_types:
            quota = quota_for(kind, provider.spot)
            if quota is None:
                warnings.append(f"pool {pool.name!r}: no vCPU quota known for {kind}'s family; not checked")
            elif quota not in widest or shapes[kind].vcpus > shapes[widest[quota]].vcpus:
                widest[quota] = kind
        for quota, kind in widest.items():
            need = needs.setdefault(quota, _Need())
            need.vcpus += shapes[kind].vcpus * provider.max_instances
            need.parts.append(
                f"pool {pool.name!r} ({provider.max_instances} x {kind} of {shapes[kind].vcpus} vCPUs)"
            )
    for (code, name), need in sorted(needs.items()):
        value = calls.service_quota(code)
        if value is None:
            warnings.append(
                f"could not read the quota {code} ({name}); {need.vcpus} vCPUs are needed, check it at "
                + CONSOLE_URL.format(code=code)
            )
        elif need.vcpus > value:
            raise QuotaError(_refusal(code, name, need, value))
    return warnings


def _refusal(code: str, name: str, need: _Need, value: float) -> str:
    return (
        f"{' and '.join(need.parts)} need{'s' if len(need.parts) == 1 else ''} {need.vcpus} vCPUs at most, "
        f"but the account's quota {code} ({name}) is {value:g} vCPUs; lower max_instances or ask for more "
        f"at {CONSOLE_URL.format(code=code)}"
    )
