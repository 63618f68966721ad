"""The capacity checks of `det deploy aws up` (`det/deploy/aws_checks.place_pools`), on a fake of their EC2
calls: a networked pool keeps the subnets whose zone offers one of its types (a pool no zone of them
serves is refused, naming its types, the region, the zones checked and those that would do); an EC2 pool
that may place a multi-node trial on EFA-capable types takes EFA, in one zone; and the plan passes each
pool's own subnets as its stack parameter."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from det import cli
from det.deploy import aws_compute
from det.deploy.aws_checks import EFA_TYPES, place_pools
from det.deploy.quotas import InstanceShape, QuotaValue
from det.errors import UsageError
from stratus.contract.pools import PoolSpec, Provider

#: us-east-1 as EC2 describes it: the default VPC's subnet per zone, and the zones that offer each type.
SUBNETS = {"subnet-0a": "us-east-1a", "subnet-0b": "us-east-1b", "subnet-0e": "us-east-1e"}
OFFERED = {
    "g5.xlarge": {"us-east-1a", "us-east-1b", "us-east-1f"},  # no g5 in us-east-1e
    "g5.12xlarge": {"us-east-1a", "us-east-1b"},
    "p4d.24xlarge": {"us-east-1b", "us-east-1e"},
    "p5.48xlarge": {"us-east-1e"},
    "c6i.large": {"us-east-1a", "us-east-1b", "us-east-1e"},
    "x2gd.medium": set(),
}
EFA = {"g5.xlarge": False, "g5.12xlarge": True, "p4d.24xlarge": True, "p5.48xlarge": True, "c6i.large": False}
SHAPES = {"g5.xlarge": InstanceShape(4, 1), "g5.12xlarge": InstanceShape(48, 4),
          "p4d.24xlarge": InstanceShape(96, 8), "c6i.large": InstanceShape(2, 0)}  # fmt: skip


class FakeEc2:
    """`det deploy aws up`'s AWS calls, answering from the tables above and recording what was asked."""

    region = "us-east-1"

    def __init__(self, efa: Mapping[str, bool] = EFA) -> None:
        self.efa = dict(efa)
        self.asked: list[str] = []

    def subnet_zones(self, subnets: Sequence[str]) -> dict[str, str]:
        self.asked.append("subnets")
        return {subnet: SUBNETS[subnet] for subnet in subnets}

    def offering_zones(self, types: Sequence[str]) -> dict[str, frozenset[str]]:
        self.asked.append(f"offerings {','.join(types)}")
        return {kind: frozenset(OFFERED[kind]) for kind in types}

    def efa_support(self, types: Sequence[str]) -> dict[str, bool]:
        self.asked.append(f"efa {','.join(types)}")
        return {kind: self.efa[kind] for kind in types if kind in self.efa}

    # The rest of plan_compute's calls.
    def instance_types(self, names: Sequence[str]) -> dict[str, InstanceShape]:
        return {name: SHAPES[name] for name in names}

    def service_quota(self, code: str) -> float | None:
        return 10_000.0

    def named_quotas(self, service: str, names: Sequence[str]) -> dict[str, QuotaValue | None]:
        return {name: QuotaValue("L-00000000", 100.0) for name in names}

    def ssm_parameter(self, name: str) -> str | None:
        return "ami-0aaaaaaaaaaaaaaaa"

    def ssm_parameters_under(self, path: str) -> dict[str, str]:
        return {}

    def default_network(self) -> tuple[str, list[str]] | None:
        return "vpc-1", sorted(SUBNETS)

    def subnets_vpc(self, subnets: Sequence[str]) -> str:
        return "vpc-1"

    def check_key_pair(self, name: str) -> None:
        pass


def ec2(name: str, *types: str, max_instances: int = 4, backend: str = "ec2") -> PoolSpec:
    provider = Provider(instance_types=types, max_instances=max_instances, image="example/train:1")
    return PoolSpec(name, backend=backend, provider=provider, max_agents=max_instances)  # type: ignore[arg-type]


def test_a_pool_keeps_the_subnets_whose_zone_offers_its_type_and_the_others_keep_them_all() -> None:
    calls = FakeEc2()
    placement = place_pools(
        calls, [PoolSpec("default"), ec2("gpu", "g5.xlarge"), ec2("cpu", "c6i.large")], sorted(SUBNETS)
    )

    default, gpu, cpu = placement.pools
    assert default == PoolSpec("default")
    assert gpu.provider is not None and gpu.provider.own_subnets and not gpu.provider.efa
    assert cpu.provider is not None and not cpu.provider.own_subnets  # every zone offers c6i.large
    assert placement.subnets == {"gpu": ["subnet-0a", "subnet-0b"]}
    assert placement.notes == (
        "pool 'gpu': subnets in us-east-1a, us-east-1b only (us-east-1e offers no g5.xlarge)",
    )
    # One call each, for all the pools (EFA: of the types of those that may place a multi-node trial).
    assert calls.asked == ["subnets", "offerings c6i.large,g5.xlarge", "efa c6i.large,g5.xlarge"]


def test_a_pool_of_several_types_keeps_the_zones_that_offer_any_of_them() -> None:
    placement = place_pools(
        FakeEc2(), [ec2("gpu", "g5.xlarge", "p4d.24xlarge", max_instances=1)], sorted(SUBNETS)
    )
    assert placement.subnets == {} and placement.notes == ()  # us-east-1e offers p4d.24xlarge
    assert placement.pools[0].provider is not None and not placement.pools[0].provider.own_subnets


def test_a_pool_no_zone_of_the_subnets_serves_is_refused_with_the_zones_that_would() -> None:
    with pytest.raises(UsageError) as caught:
        place_pools(FakeEc2(), [ec2("gpu", "g5.xlarge", max_instances=1)], ["subnet-0e"])
    assert str(caught.value) == (
        "pool 'gpu': no zone of the agents' subnets offers g5.xlarge in us-east-1 (checked us-east-1e "
        "(subnet-0e)); the zones of us-east-1 that do: us-east-1a, us-east-1b, us-east-1f; pass "
        "--agent-subnet-id with subnets in one of them, or use another instance type or region (`aws ec2 "
        "describe-instance-type-offerings --location-type availability-zone --filters "
        "Name=instance-type,Values=g5.xlarge --region us-east-1` lists the zones)"
    )


def test_a_type_no_zone_of_the_region_offers_is_refused() -> None:
    with pytest.raises(UsageError) as caught:
        place_pools(FakeEc2(), [ec2("mem", "x2gd.medium", backend="batch")], sorted(SUBNETS))
    message = str(caught.value)
    assert message.startswith(
        "pool 'mem': no zone of the agents' subnets offers x2gd.medium in us-east-1 (checked us-east-1a "
        "(subnet-0a), us-east-1b (subnet-0b), us-east-1e (subnet-0e)); no zone of us-east-1 does; use another "
        "instance type or region"
    )


def test_a_multi_node_ec2_pool_on_efa_types_takes_efa_in_the_zone_offering_most_of_them() -> None:
    placement = place_pools(
        FakeEc2(), [ec2("big", "p4d.24xlarge", "p5.48xlarge", max_instances=4)], sorted(SUBNETS)
    )
    (big,) = placement.pools
    assert big.provider is not None and big.provider.efa and big.provider.own_subnets
    # us-east-1e offers both types, us-east-1b only p4d.24xlarge: one zone, for the placement group.
    assert placement.subnets == {"big": ["subnet-0e"]}
    assert placement.notes == (
        "pool 'big': subnets in us-east-1b, us-east-1e only (us-east-1a offers no p4d.24xlarge or p5.48xlarge)",
        "pool 'big': EFA and a cluster placement group (p4d.24xlarge and p5.48xlarge support EFA, and a trial "
        "may take up to 4 instances), in us-east-1e alone",
    )


@pytest.mark.parametrize(
    "pool",
    [
        ec2("one", "g5.12xlarge", max_instances=1),  # EFA-capable, but no trial spans two instances
        ec2("small", "g5.xlarge", max_instances=4),  # multi-node, but g5.xlarge has no EFA
        ec2("mixed", "g5.12xlarge", "g5.xlarge", max_instances=4),  # one type without EFA: no EFA
        ec2("batch", "p4d.24xlarge", max_instances=4, backend="batch"),  # Batch: no EFA trait
    ],
    ids=["single-node", "no-efa-type", "mixed-types", "batch"],
)
def test_no_efa_for_a_single_node_pool_a_type_without_it_or_a_backend_without_the_trait(
    pool: PoolSpec,
) -> None:
    (placed,) = place_pools(FakeEc2(), [pool], sorted(SUBNETS)).pools
    assert placed.provider is not None and not placed.provider.efa


def test_where_ec2_does_not_say_the_known_efa_types_decide() -> None:
    assert {"p4d.24xlarge", "p5.48xlarge", "trn1.32xlarge", "g6e.12xlarge"} <= EFA_TYPES
    assert not {"g5.xlarge", "g6e.xlarge", "c6i.large"} & EFA_TYPES
    (big,) = place_pools(
        FakeEc2(efa={}), [ec2("big", "p4d.24xlarge", max_instances=2)], sorted(SUBNETS)
    ).pools
    assert big.provider is not None and big.provider.efa


def test_pools_outside_the_agents_network_ask_nothing() -> None:
    calls = FakeEc2()
    pools = [PoolSpec("default"), ec2("sm", "ml.g5.xlarge", backend="sagemaker")]
    assert place_pools(calls, pools, sorted(SUBNETS)).pools == tuple(pools) and calls.asked == []


# ---- in the plan: the pools' own subnets as stack parameters, the notes in its description ------------------


def _args(tmp_path: Path, pools: str) -> argparse.Namespace:
    path = tmp_path / "pools.yaml"
    path.write_text("resource_pools:\n  - pool_name: default\n" + pools)
    return cli.build_parser().parse_args(["deploy", "aws", "up", "--pools-file", str(path)])


def test_the_plan_passes_each_pools_own_subnets_and_says_why(tmp_path: Path) -> None:
    args = _args(
        tmp_path,
        "  - pool_name: gpu\n"
        "    provider: {type: ec2, instance_type: g5.xlarge, max_instances: 2}\n"
        "  - pool_name: big\n"
        "    provider: {type: ec2, instance_type: p4d.24xlarge, max_instances: 2}\n"
        "  - pool_name: cpu\n"
        "    provider: {type: batch, instance_type: c6i.large, image: example/train:1}\n",
    )
    plan = aws_compute.plan_compute(args, FakeEc2())

    assert plan.parameters["AgentSubnetIds"] == "subnet-0a,subnet-0b,subnet-0e"
    # The template's names for them (`infra.aws.compute_resources.subnet_parameters`); cpu keeps them all.
    assert plan.parameters["GpuPoolSubnetIds"] == "subnet-0a,subnet-0b"
    assert plan.parameters["BigPoolSubnetIds"] == "subnet-0b"  # one zone of the two that offer it
    assert not {"CpuPoolSubnetIds"} & set(plan.parameters)
    assert plan.pools is not None
    assert [(p.name, p.provider.efa, p.provider.own_subnets) for p in plan.pools if p.provider] == [
        ("gpu", False, True), ("big", True, True), ("cpu", False, False)
    ]  # fmt: skip
    described = aws_compute.describe(plan).splitlines()
    assert described[-3:] == [
        "pool 'gpu': subnets in us-east-1a, us-east-1b only (us-east-1e offers no g5.xlarge)",
        "pool 'big': subnets in us-east-1b, us-east-1e only (us-east-1a offers no p4d.24xlarge)",
        "pool 'big': EFA and a cluster placement group (p4d.24xlarge supports EFA, and a trial may take up to "
        "2 instances), in us-east-1b alone",
    ]
    assert any(line.startswith(" GpuPoolSubnetIds ") for line in described)


def test_the_rendered_template_takes_exactly_the_parameters_the_plan_passes(tmp_path: Path) -> None:
    from infra.aws.template import template

    args = _args(
        tmp_path,
        "  - pool_name: gpu\n"
        "    provider: {type: ec2, instance_type: g5.xlarge, max_instances: 2}\n"
        "  - pool_name: cpu\n"
        "    provider: {type: ec2, instance_type: c6i.large}\n",
    )
    plan = aws_compute.plan_compute(args, FakeEc2())
    assert plan.pools is not None
    declared = template(plan.pools, plan.vcpus)["Parameters"]
    own = {name for name in declared if name.endswith("PoolSubnetIds")}
    assert own == {"GpuPoolSubnetIds"} == {name for name in plan.parameters if name.endswith("PoolSubnetIds")}
