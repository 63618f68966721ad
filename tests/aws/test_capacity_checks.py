"""The capacity checks of `det deploy aws up` against moto (real boto3 calls through AWS_ENDPOINT_URL):
the zones of the default VPC's subnets and the zones that offer a type (`DescribeInstanceTypeOfferings`:
moto's us-east-1 offers no g5 in us-east-1e, as AWS), which types support EFA (`DescribeInstanceTypes`),
and SageMaker's training quotas found by name in Service Quotas.

moto's Service Quotas know only VPC's quotas: a SageMaker quota is added to its backend here (the server
runs in this process), so that the lookup by name, then by code, goes through boto3 and moto's wire."""

from __future__ import annotations

import argparse
import base64
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from det.cli import build_parser
from det.deploy.aws_calls import AwsCalls
from det.deploy.aws_compute import describe, plan_compute
from det.deploy.quotas import QuotaError
from det.errors import UsageError

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS")

TRAINING_QUOTA = "ml.g5.xlarge for training job usage"


Calls = AwsCalls  # `det deploy aws up`'s calls, the capacity checks' among them (`CapacityCalls`)


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)

    def calls(*flags: str) -> tuple[argparse.Namespace, Calls]:
        args = build_parser().parse_args(["deploy", "aws", "up", *flags, "--region", "us-east-1"])
        return args, Calls(args)

    return calls


def _default_subnets() -> dict[str, str]:
    """The default VPC's subnets, by zone."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    (vpc,) = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])["Subnets"]
    return {s["AvailabilityZone"]: s["SubnetId"] for s in subnets}


def _ami() -> str:
    return boto3.client("ec2", region_name="us-east-1").describe_images(Owners=["amazon"])["Images"][0][
        "ImageId"
    ]


def test_ec2_gives_the_subnets_zones_the_zones_offering_each_type_and_efa_support(aws) -> None:
    _, calls = aws()
    by_zone = _default_subnets()
    assert calls.subnet_zones(sorted(by_zone.values())) == {subnet: zone for zone, subnet in by_zone.items()}

    offered = calls.offering_zones(["g5.xlarge", "p4d.24xlarge", "no.such"])
    assert "us-east-1e" in by_zone and "us-east-1e" not in offered["g5.xlarge"]
    assert {"us-east-1a", "us-east-1b"} <= offered["g5.xlarge"] and offered["p4d.24xlarge"]
    assert offered["no.such"] == frozenset()

    assert calls.efa_support(["p4d.24xlarge", "p5.48xlarge", "g5.xlarge"]) == {
        "p4d.24xlarge": True, "p5.48xlarge": True, "g5.xlarge": False
    }  # fmt: skip


def test_the_default_pool_leaves_out_the_zone_that_offers_no_g5(aws) -> None:
    args, calls = aws("--agent-ami", _ami())
    plan = plan_compute(args, calls)

    by_zone = _default_subnets()
    assert plan.parameters["AgentSubnetIds"] == ",".join(sorted(by_zone.values()))
    kept = plan.parameters["DefaultPoolSubnetIds"].split(",")
    assert by_zone["us-east-1e"] not in kept and sorted(kept) == sorted(
        subnet for zone, subnet in by_zone.items() if zone != "us-east-1e"
    )
    assert plan.pools is not None and plan.pools[0].provider is not None
    assert plan.pools[0].provider.own_subnets and not plan.pools[0].provider.efa  # g5.xlarge has no EFA
    assert "(us-east-1e offers no g5.xlarge)" in describe(plan)


def test_subnets_given_only_in_a_zone_without_the_type_are_refused(aws) -> None:
    subnet = _default_subnets()["us-east-1e"]
    args, calls = aws("--agent-ami", _ami(), "--agent-subnet-id", subnet)
    with pytest.raises(UsageError) as caught:
        plan_compute(args, calls)
    message = str(caught.value)
    assert message.startswith(
        f"pool 'default': no zone of the agents' subnets offers g5.xlarge in us-east-1 (checked us-east-1e "
        f"({subnet})); the zones of us-east-1 that do: us-east-1a, us-east-1b,"
    )
    assert (
        "pass --agent-subnet-id with subnets in one of them, or use another instance type or region"
        in message
    )


def test_a_multi_node_p4d_pool_takes_efa_in_one_zone_and_its_group_runs_there(
    aws, deployed_pools_stack
) -> None:
    """moto's CloudFormation skips the placement group and the egress rule (types it lacks) and keeps the
    rest: the group's subnets are the pool's own, one zone's."""
    ami = _ami()
    args, calls = aws(
        "--agent-ami", ami, "--gpu-agent-instance-type", "p4d.24xlarge", "--max-dynamic-agents", "2"
    )
    plan = plan_compute(args, calls)
    assert plan.pools is not None
    (pool,) = plan.pools
    assert pool.provider is not None and pool.provider.efa and pool.provider.own_subnets
    (subnet,) = plan.parameters["DefaultPoolSubnetIds"].split(",")
    zone = {s: z for z, s in _default_subnets().items()}[subnet]
    assert f"in {zone} alone" in describe(plan)

    name = "Efa-" + uuid.uuid4().hex[:8]
    with deployed_pools_stack(
        name, plan.pools, AgentAmiId=ami, ComputeKey="compute/stratus.whl", DefaultPoolSubnetIds=subnet
    ):
        autoscaling = boto3.client("autoscaling", region_name="us-east-1")
        (group,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[f"{name}-default"])[
            "AutoScalingGroups"
        ]
        assert group["VPCZoneIdentifier"] == subnet
        template_id = group["MixedInstancesPolicy"]["LaunchTemplate"]["LaunchTemplateSpecification"]
        ec2 = boto3.client("ec2", region_name="us-east-1")
        (version,) = ec2.describe_launch_template_versions(LaunchTemplateId=template_id["LaunchTemplateId"])[
            "LaunchTemplateVersions"
        ]
        (interface,) = version["LaunchTemplateData"]["NetworkInterfaces"]
        assert interface["InterfaceType"] == "efa" and interface["DeviceIndex"] == 0
        assert base64.b64decode(version["LaunchTemplateData"]["UserData"])  # the agent still boots


# ---- SageMaker's training quotas, by name -------------------------------------------------------------------


@pytest.fixture
def sagemaker_quotas(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """moto's Service Quotas with one SageMaker quota (AWS's default 0, as new accounts have for GPU types);
    the returned dict holds the account's applied values by code (none: GetServiceQuota finds none)."""
    from moto.servicequotas.exceptions import NoSuchResource
    from moto.servicequotas.models import ServiceQuotasBackend

    quota = {
        "QuotaName": TRAINING_QUOTA, "QuotaCode": "L-TEST0001", "ServiceCode": "sagemaker",
        "ServiceName": "Amazon SageMaker", "Value": 0.0, "Unit": "None", "Adjustable": True, "GlobalQuota": False,
    }  # fmt: skip
    applied: dict[str, float] = {}
    defaults = ServiceQuotasBackend.list_aws_default_service_quotas
    values = ServiceQuotasBackend.get_service_quota

    def list_defaults(self: ServiceQuotasBackend, service_code: str) -> list[dict[str, Any]]:
        return [quota] if service_code == "sagemaker" else defaults(self, service_code)

    def get_quota(self: ServiceQuotasBackend, service_code: str, quota_code: str) -> dict[str, Any]:
        if service_code != "sagemaker":
            return values(self, service_code, quota_code)
        if quota_code not in applied:
            raise NoSuchResource
        return {**quota, "Value": applied[quota_code]}

    monkeypatch.setattr(ServiceQuotasBackend, "list_aws_default_service_quotas", list_defaults)
    monkeypatch.setattr(ServiceQuotasBackend, "get_service_quota", get_quota)
    return applied


def _sagemaker_pool(tmp_path: Path, max_instances: int) -> str:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "resource_pools:\n"
        "  - pool_name: default\n"
        "    provider: {type: sagemaker, instance_type: ml.g5.xlarge, max_instances: "
        f"{max_instances}, image: example/train:1}}\n"
    )
    return str(path)


def test_moto_knows_no_sagemaker_quota_so_it_is_a_warning(aws, tmp_path: Path) -> None:
    args, calls = aws("--pools-file", _sagemaker_pool(tmp_path, 2))
    plan = plan_compute(args, calls)
    assert plan.warnings == (
        f"could not read the sagemaker quota {TRAINING_QUOTA!r}; 2 instances are needed, check it at "
        "https://console.aws.amazon.com/servicequotas/home/services/sagemaker/quotas?region=us-east-1",
    )


def test_a_sagemaker_quota_of_zero_refuses_up_with_the_page_to_raise_it(
    aws, sagemaker_quotas: dict[str, float], tmp_path: Path
) -> None:
    args, calls = aws("--pools-file", _sagemaker_pool(tmp_path, 2))
    with pytest.raises(QuotaError) as caught:
        plan_compute(args, calls)
    assert str(caught.value) == (
        f"pool 'default' (2 x ml.g5.xlarge) needs 2 instances at most, but the account's sagemaker quota "
        f"L-TEST0001 ({TRAINING_QUOTA}) is 0 in us-east-1: no sagemaker training job can run on ml.g5.xlarge "
        "until it is raised; lower max_instances or ask for more at "
        "https://console.aws.amazon.com/servicequotas/home/services/sagemaker/quotas/L-TEST0001?region=us-east-1"
    )


def test_the_accounts_applied_value_counts_over_the_default(
    aws, sagemaker_quotas: dict[str, float], tmp_path: Path
) -> None:
    sagemaker_quotas["L-TEST0001"] = 4.0
    args, calls = aws("--pools-file", _sagemaker_pool(tmp_path, 4))
    assert plan_compute(args, calls).warnings == ()
    args, calls = aws("--pools-file", _sagemaker_pool(tmp_path, 5))
    with pytest.raises(QuotaError, match=r"needs 5 instances at most, .* is 4 in us-east-1; lower"):
        plan_compute(args, calls)


def test_the_rendered_efa_template_names_the_parameters_the_plan_passes(aws) -> None:
    """What `up` hands CloudFormation: every parameter of the plan that the template declares is passed
    (`det/deploy/aws.py` passes those), and the pool's own subnets are among them."""
    from infra.aws.template import template

    args, calls = aws(
        "--agent-ami", _ami(), "--gpu-agent-instance-type", "p4d.24xlarge", "--max-dynamic-agents", "4"
    )
    plan = plan_compute(args, calls)
    assert plan.pools is not None
    declared = template(plan.pools, plan.vcpus)["Parameters"]
    passed = {name for name in plan.parameters if name in declared}
    assert "DefaultPoolSubnetIds" in passed and passed == set(plan.parameters)
    assert declared["DefaultPoolSubnetIds"]["Type"] == "List<AWS::EC2::Subnet::Id>"
