"""Checks of `det deploy aws up` before it changes anything: the cluster id (a stack name, its bucket's
name, one that would share its resources' names with another stack's), the `--add-tag` pairs, the
template's validation for `--dry-run`, and the capacity the pools need.

Capacity (`place_pools`, on `CapacityCalls`): a networked pool (EC2, Batch) runs only in subnets whose
zone offers one of its instance types (`ec2:DescribeInstanceTypeOfferings`: us-east-1e offers no g5),
and a pool no zone of the subnets can serve is refused, naming the types, the region, the zones checked
and those that offer them; a pool left with some of the subnets is marked `provider.own_subnets` and
gets them as its own stack parameter (`infra.aws.compute_resources.subnet_parameters`). An EC2 pool that may place a multi-node trial (`max_instances` above 1) on
types that all support EFA (`ec2:DescribeInstanceTypes` `NetworkInfo.EfaSupported`; `EFA_TYPES` where
it does not say) is marked `provider.efa`: the template gives it an EFA interface and a cluster
placement group, which holds one zone's instances, so it keeps (as its own) the subnets of one zone.
The quotas are `det/deploy/quotas.py`'s; `CapacityCalls.named_quotas` reads those found by name."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from det._runtime import Runtime
from det.deploy.quotas import QuotaValue
from det.errors import StackError, UsageError
from stratus.contract.errors import InvalidTagError
from stratus.contract.pools import PoolSpec, traits
from stratus.contract.tags import user_tags

STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")


def bucket_name(stack: str, account: str, region: str) -> str:
    """The stack's bucket: lower case (a stack name may have capitals, a bucket name may not), at most 63."""
    name = f"{stack.lower()}-{account}-{region}"
    if len(name) > 63:
        raise UsageError(
            f"--cluster-id {stack!r} is too long for its bucket name {name!r}; use a shorter one"
        )
    return name


def stack_name(value: str) -> str:
    if not STACK_NAME.match(value or ""):
        raise UsageError(
            f"--cluster-id {value!r} is not a stack name: a letter, then letters, digits and hyphens (128 at most)"
        )
    return value


def user_tag_flags(pairs: list[str]) -> dict[str, str]:
    """The `--add-tag` pairs (a key given twice: its last value), checked by AWS's rules, sorted by key."""
    tags: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--add-tag {pair!r} is not KEY=VALUE")
        try:
            user_tags({key: value})
        except InvalidTagError as e:
            raise UsageError(f"--add-tag {pair!r}: {e}") from e
        tags[key] = value
    try:
        return user_tags(tags)
    except InvalidTagError as e:  # too many
        raise UsageError(f"--add-tag: {e}") from e


class StackCalls(Protocol):
    """What the stack's checks ask of `det.deploy.aws_calls.AwsCalls` (typed here, not imported: AwsCalls
    takes `CapacityCalls`, below, from this module)."""

    region: str

    def stacks(self) -> Iterator[dict[str, Any]]: ...
    def template_source(self, bucket: str | None, body: str) -> dict[str, str] | None: ...
    def validate(self, source: dict[str, str]) -> None: ...


def refuse_overlap(aws: StackCalls, stack: str, tag: str) -> None:
    """A stack's resources are named `<stack>-...` and its roles reach `<stack>-*`: stacks `lab` and
    `lab-big` would reach each other's jobs, groups and logs. One cluster id may not start another's."""
    mine = stack.lower()
    for found in aws.stacks():
        other = str(found["StackName"])
        tags = {t["Key"] for t in found.get("Tags", [])}
        theirs = other.lower()
        if (
            tag in tags
            and theirs != mine
            and (mine.startswith(theirs + "-") or theirs.startswith(mine + "-"))
        ):
            shorter = min(other, stack, key=len)
            raise UsageError(
                f"--cluster-id {stack}: Stratus stack {other!r} is in this region, and what one names "
                f"`{shorter}-...` (jobs, groups, logs, and the permissions over them) would take in the "
                "other's; choose a cluster id that does not start with the other's followed by '-'"
            )


def dry_run(rt: Runtime, aws: StackCalls, body: str, bucket: str | None) -> None:
    """CloudFormation checks the template where it can read it: inline up to 51,200 bytes, else from the
    bucket if it exists (the one object a dry run writes); otherwise cfn-lint checks it here, if installed."""
    size = f"{len(body.encode()):,} bytes"
    source = aws.template_source(bucket, body)
    if source is not None:
        aws.validate(source)
        where = f" (read from {source['TemplateURL']})" if "TemplateURL" in source else ""
        rt.say(f"dry run: the template ({size}) is valid{where}; nothing else was uploaded or changed")
        return
    try:
        from cfnlint.api import lint
    except ImportError:
        rt.say(
            f"dry run: the template ({size}) is over CloudFormation's inline limit (51,200 bytes) and the "
            "bucket it is read from does not exist yet, so CloudFormation checks it at `up`; install "
            "cfn-lint to check it here; nothing was uploaded or changed"
        )
        return
    errors = [m for m in lint(body, regions=[aws.region]) if str(m.rule.id).startswith("E")]
    for match in errors:
        rt.say(f"  cfn-lint {match.rule.id}: {match.message} ({'/'.join(map(str, match.path))})")
    if errors:
        raise StackError(f"the template has {len(errors)} error(s) (cfn-lint, above); nothing was changed")
    rt.say(
        f"dry run: the template ({size}) passes cfn-lint (CloudFormation reads a template over 51,200 bytes "
        "from S3 only, and the bucket does not exist yet); nothing was uploaded or changed"
    )


# ---- capacity: the zones that offer each pool's types, EFA, quotas by name ---------------------------------

#: The GPU and accelerator types that support EFA, for where `ec2:DescribeInstanceTypes` does not say:
#: those its `NetworkInfo.EfaSupported` marks in the copy of EC2's data that moto 5.2.5 ships.
EFA_TYPES: frozenset[str] = frozenset(
    f"{family}.{size}"
    for family, sizes in {
        "p3dn": ("24xlarge",), "p4d": ("24xlarge",), "p4de": ("24xlarge",), "p5": ("4xlarge", "48xlarge"),
        "p5e": ("48xlarge",), "p5en": ("48xlarge",), "p6-b200": ("48xlarge",), "trn1": ("32xlarge",),
        "trn1n": ("32xlarge",), "trn2": ("3xlarge", "48xlarge"), "dl2q": ("24xlarge",),
        "g4dn": ("8xlarge", "12xlarge", "16xlarge", "metal"),
        **{g: ("8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge") for g in ("g5", "g6", "g6e")},
    }.items()
    for size in sizes
)  # fmt: skip


class CapacityCalls:
    """The AWS calls of the capacity checks (a base of `det.deploy.aws_calls.AwsCalls`, whose session,
    botocore errors and region it uses)."""

    _session: Any
    _errors: Any
    region: str

    def subnet_zones(self, subnets: Sequence[str]) -> dict[str, str]:
        """Each subnet's availability zone."""
        found = self._session.client("ec2").describe_subnets(SubnetIds=list(subnets))["Subnets"]
        return {s["SubnetId"]: s["AvailabilityZone"] for s in found}

    def offering_zones(self, types: Sequence[str]) -> dict[str, frozenset[str]]:
        """The zones of the region that offer each type (`ec2:DescribeInstanceTypeOfferings`)."""
        pages = self._session.client("ec2").get_paginator("describe_instance_type_offerings")
        zones: dict[str, set[str]] = {kind: set() for kind in types}
        for page in pages.paginate(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": list(types)}]
        ):
            for offer in page["InstanceTypeOfferings"]:
                zones.setdefault(offer["InstanceType"], set()).add(offer["Location"])
        return {kind: frozenset(found) for kind, found in zones.items()}

    def efa_support(self, types: Sequence[str]) -> dict[str, bool]:
        """Whether each type supports EFA, where `ec2:DescribeInstanceTypes` says."""
        pages = self._session.client("ec2").get_paginator("describe_instance_types")
        return {
            item["InstanceType"]: bool(item["NetworkInfo"]["EfaSupported"])
            for page in pages.paginate(InstanceTypes=list(types))
            for item in page["InstanceTypes"]
            if "EfaSupported" in item.get("NetworkInfo", {})
        }

    def named_quotas(self, service: str, names: Sequence[str]) -> dict[str, QuotaValue | None] | None:
        """The service's quotas of these names, found by name among AWS's defaults (which list them all,
        with their codes), valued by `GetServiceQuota` (the account's applied value; AWS's default where
        none was applied). A name missing: no such quota; None for one: its value cannot be read; None:
        the service's quotas cannot be listed (no permission; moto knows only VPC's)."""
        client = self._session.client("service-quotas")
        try:
            pages = client.get_paginator("list_aws_default_service_quotas").paginate(ServiceCode=service)
            defaults = {
                q["QuotaName"]: q for page in pages for q in page["Quotas"] if q["QuotaName"] in names
            }
        except self._errors.ClientError:
            return None
        found: dict[str, QuotaValue | None] = {}
        for name, default in defaults.items():
            code = str(default["QuotaCode"])
            try:
                value = client.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"]
            except self._errors.ClientError as e:
                if e.response.get("Error", {}).get("Code") != "NoSuchResourceException":
                    found[name] = None
                    continue
                value = default["Value"]  # no value applied to the account: AWS's default holds
            found[name] = QuotaValue(code, float(value))
        return found


class PlacementCalls(Protocol):
    region: str

    def subnet_zones(self, subnets: Sequence[str]) -> Mapping[str, str]: ...
    def offering_zones(self, types: Sequence[str]) -> Mapping[str, frozenset[str]]: ...
    def efa_support(self, types: Sequence[str]) -> Mapping[str, bool]: ...


@dataclass(frozen=True)
class Placement:
    #: The pools: those that take EFA marked `provider.efa`, those with subnets of their own (not all of
    #: the agents') `provider.own_subnets`.
    pools: tuple[PoolSpec, ...]
    #: The subnets of each pool with subnets of its own (of the agents', in their order), by pool name.
    subnets: dict[str, list[str]]
    #: What was decided, for the plan's description: the zones left out, the EFA pools and their zone.
    notes: tuple[str, ...] = ()


def place_pools(calls: PlacementCalls, pools: Sequence[PoolSpec], subnets: Sequence[str]) -> Placement:
    """The networked pools' subnets among the agents' `subnets`, and which EC2 pools take EFA; a
    UsageError for a pool that no zone of the subnets can serve."""
    networked = [p for p in pools if p.provider is not None and traits(p.backend).networked]
    if not networked:
        return Placement(tuple(pools), {})
    zone_of = calls.subnet_zones(subnets)
    offered = calls.offering_zones(sorted({t for p in networked for t in _types(p)}))
    placed: dict[str, list[str]] = {}
    notes: list[str] = []
    done: list[PoolSpec] = []
    for pool in with_efa(calls, pools):
        if pool.provider is None or not traits(pool.backend).networked:
            done.append(pool)
            continue
        types = pool.provider.instance_types
        serving = {zone for kind in types for zone in offered.get(kind, ())}
        kept = [s for s in subnets if zone_of.get(s) in serving]
        if not kept:
            raise UsageError(_nowhere(pool.name, types, calls.region, zone_of, subnets, serving))
        left_out = sorted({zone_of.get(s, "?") for s in subnets} - serving)
        if left_out:
            notes.append(
                f"pool {pool.name!r}: subnets in {', '.join(sorted({zone_of[s] for s in kept}))} only "
                f"({', '.join(left_out)} offer{'s' if len(left_out) == 1 else ''} no {' or '.join(types)})"
            )
        if pool.provider.efa:
            # A cluster placement group holds one zone: the one of the subnets offering most of the types.
            zone = min(
                {zone_of[s] for s in kept}, key=lambda z: (-sum(z in offered.get(t, ()) for t in types), z)
            )
            kept = [s for s in kept if zone_of[s] == zone]
            notes.append(
                f"pool {pool.name!r}: EFA and a cluster placement group ({' and '.join(types)} "
                f"support{'s' if len(types) == 1 else ''} EFA, and a trial may take up to "
                f"{pool.provider.max_instances} instances), in {zone} alone"
            )
        if kept != list(subnets) or pool.provider.efa:
            placed[pool.name] = kept
            pool = replace(pool, provider=replace(pool.provider, own_subnets=True))
        done.append(pool)
    return Placement(tuple(done), placed, tuple(notes))


def with_efa(calls: PlacementCalls, pools: Sequence[PoolSpec]) -> list[PoolSpec]:
    """The pools, those of a backend with the `efa` trait that may place a multi-node trial (more than
    one instance) on types that all support EFA marked `provider.efa`."""
    multi_node = {
        p.name: _types(p)
        for p in pools
        if p.provider is not None and traits(p.backend).efa and p.provider.max_instances > 1
    }
    if not multi_node:
        return list(pools)
    said = calls.efa_support(sorted({t for types in multi_node.values() for t in types}))
    capable = {
        name for name, types in multi_node.items() if all(said.get(kind, kind in EFA_TYPES) for kind in types)
    }
    return [
        replace(pool, provider=replace(pool.provider, efa=True))
        if pool.name in capable and pool.provider is not None
        else pool
        for pool in pools
    ]


def _types(pool: PoolSpec) -> tuple[str, ...]:
    return pool.provider.instance_types if pool.provider is not None else ()


def _nowhere(
    pool: str,
    types: Sequence[str],
    region: str,
    zone_of: Mapping[str, str],
    subnets: Sequence[str],
    serving: set[str],
) -> str:
    kinds = " or ".join(types)
    checked = ", ".join(f"{zone_of.get(s, '?')} ({s})" for s in subnets)
    fix = (
        f"the zones of {region} that do: {', '.join(sorted(serving))}; pass --agent-subnet-id with subnets "
        "in one of them, or use another instance type or region"
        if serving
        else f"no zone of {region} does; use another instance type or region"
    )
    return (
        f"pool {pool!r}: no zone of the agents' subnets offers {kinds} in {region} (checked {checked}); "
        f"{fix} (`aws ec2 describe-instance-type-offerings --location-type availability-zone --filters "
        f"Name=instance-type,Values={','.join(types)} --region {region}` lists the zones)"
    )
