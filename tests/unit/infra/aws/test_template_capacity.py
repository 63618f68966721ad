"""The capacity parts of the stack's template (`infra/aws/compute_ec2.py`, `compute_batch.py`,
`compute_resources.py`): an EC2 pool marked `provider.efa` gets an EFA interface, a cluster placement group
and the security group's rule out to itself; a single-node g5 pool gets none of them; a pool marked
`provider.own_subnets` runs in its own parameter's subnets, the others in the agents'."""

from __future__ import annotations

from typing import Any

from infra.aws.compute_resources import subnet_parameters
from infra.aws.template import template
from stratus.contract.pools import PoolSpec, Provider

BIG = PoolSpec(
    name="big",
    slots_per_agent=8,
    max_agents=4,
    backend="ec2",
    provider=Provider(instance_types=("p4d.24xlarge",), max_instances=4, gpus=8, own_subnets=True, efa=True),
)
SMALL = PoolSpec(
    name="small",
    slots_per_agent=1,
    max_agents=1,
    backend="ec2",
    provider=Provider(instance_types=("g5.xlarge",), max_instances=1, gpus=1),
)
SECURITY_GROUP = {"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}


def _resources(*pools: PoolSpec) -> dict[str, Any]:
    return template([PoolSpec(name="default"), *pools])["Resources"]


def test_an_efa_pool_gets_an_efa_interface_a_cluster_placement_group_and_its_own_subnets() -> None:
    rendered = template([PoolSpec(name="default"), BIG])
    resources = rendered["Resources"]

    data = resources["BigPoolLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    # The security group goes on the interface: a launch template with interfaces names none of its own.
    assert "SecurityGroupIds" not in data
    assert data["NetworkInterfaces"] == [
        {"DeviceIndex": 0, "InterfaceType": "efa", "Groups": [SECURITY_GROUP], "DeleteOnTermination": True}
    ]
    placement = resources["BigPoolPlacementGroup"]
    assert placement["Type"] == "AWS::EC2::PlacementGroup"
    assert placement["Properties"]["Strategy"] == "cluster"
    group = resources["BigPoolGroup"]["Properties"]
    assert group["PlacementGroup"] == {"Ref": "BigPoolPlacementGroup"}
    # A cluster placement group holds one zone's instances: the pool's own subnets, which up gives one zone.
    assert group["VPCZoneIdentifier"] == {"Ref": "BigPoolSubnetIds"}
    assert rendered["Parameters"]["BigPoolSubnetIds"]["Type"] == "List<AWS::EC2::Subnet::Id>"
    # EFA needs all traffic allowed in from the security group itself (always there) and out to it.
    assert resources["AgentSelfIngress"]["Properties"]["SourceSecurityGroupId"] == SECURITY_GROUP
    egress = resources["AgentSelfEgress"]
    assert egress["Type"] == "AWS::EC2::SecurityGroupEgress"
    assert egress["Properties"] == {
        "Description": "EFA: the nodes of a trial, all traffic to each other",
        "GroupId": SECURITY_GROUP,
        "IpProtocol": "-1",
        "DestinationSecurityGroupId": SECURITY_GROUP,
    }


def test_a_single_node_g5_pool_gets_no_efa_no_placement_group_and_the_agents_subnets() -> None:
    rendered = template([PoolSpec(name="default"), SMALL])
    resources = rendered["Resources"]

    data = resources["SmallPoolLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    assert data["SecurityGroupIds"] == [SECURITY_GROUP] and "NetworkInterfaces" not in data
    group = resources["SmallPoolGroup"]["Properties"]
    assert "PlacementGroup" not in group and group["VPCZoneIdentifier"] == {"Ref": "AgentSubnetIds"}
    assert not {"SmallPoolPlacementGroup", "AgentSelfEgress"} & set(resources)
    assert "SmallPoolSubnetIds" not in rendered["Parameters"]


def test_efa_is_the_marked_pools_own_next_to_a_pool_without_it() -> None:
    resources = _resources(BIG, SMALL)
    assert {"BigPoolPlacementGroup", "AgentSelfEgress"} <= set(resources)
    assert "SmallPoolPlacementGroup" not in resources
    assert "PlacementGroup" not in resources["SmallPoolGroup"]["Properties"]


def test_a_batch_pool_with_its_own_subnets_runs_its_environments_there() -> None:
    provider = Provider(
        instance_types=("g5.xlarge",), spot=True, gpus=1, image="example/train:1", own_subnets=True
    )
    pool = PoolSpec(name="gpu-batch", slots_per_agent=1, backend="batch", provider=provider)
    rendered = template([PoolSpec(name="default"), pool])
    for environment in ("GpuBatchPoolOnDemandEnvironment", "GpuBatchPoolSpotEnvironment"):
        compute = rendered["Resources"][environment]["Properties"]["ComputeResources"]
        assert compute["Subnets"] == {"Ref": "GpuBatchPoolSubnetIds"}
    assert "GpuBatchPoolSubnetIds" in rendered["Parameters"]
    assert "AgentSelfEgress" not in rendered["Resources"]  # no EFA pool


def test_the_subnet_parameters_are_named_as_each_part_names_its_pools() -> None:
    batch = PoolSpec(
        name="big-b",
        backend="batch",
        provider=Provider(instance_types=("g5.xlarge",), image="example/train:1", own_subnets=True),
    )
    sagemaker = PoolSpec(
        name="sm", backend="sagemaker", provider=Provider(instance_types=("ml.g5.xlarge",), own_subnets=True)
    )
    names = subnet_parameters([PoolSpec(name="default"), BIG, SMALL, batch, sagemaker])
    # SageMaker runs in its own network (no subnets), SMALL in the agents'.
    assert names == {"big": "BigPoolSubnetIds", "big-b": "BigBPoolSubnetIds"}
    declared = template([PoolSpec(name="default"), BIG, SMALL, batch], vcpus={"g5.xlarge": 4})["Parameters"]
    assert {name for name in declared if name.endswith("PoolSubnetIds")} == set(names.values())
