"""The stack's template with the capacity checks' marks passes cfn-lint: an EFA pool (its interface,
cluster placement group, the security group's rule out to itself) and pools with subnets of their own,
next to a single-node pool without either."""

from __future__ import annotations

from pathlib import Path

from infra.aws.template import template
from stratus.contract.pools import PoolSpec, Provider
from tests.integration.test_template_lint import _assert_lint_clean


def test_a_template_with_an_efa_pool_and_pools_of_their_own_subnets_is_cfn_lint_clean(tmp_path: Path) -> None:
    efa = Provider(
        instance_types=("p4d.24xlarge", "p5.48xlarge"),
        max_instances=4,
        spot=True,
        gpus=8,
        own_subnets=True,
        efa=True,
    )
    batch = Provider(
        instance_types=("g5.xlarge",), spot=True, gpus=1, image="example/train:1", own_subnets=True
    )
    pools = [
        PoolSpec(name="default"),
        PoolSpec(name="big", slots_per_agent=8, max_agents=4, backend="ec2", provider=efa),
        PoolSpec(
            name="small", slots_per_agent=1, backend="ec2", provider=Provider(("g5.xlarge",), max_instances=1)
        ),
        PoolSpec(name="gpu-batch", slots_per_agent=1, backend="batch", provider=batch),
    ]
    rendered = template(pools)
    assert {"BigPoolPlacementGroup", "AgentSelfEgress"} <= set(rendered["Resources"])
    assert {"BigPoolSubnetIds", "GpuBatchPoolSubnetIds"} <= set(rendered["Parameters"])
    _assert_lint_clean(tmp_path / "capacity.cfn.json", rendered)
