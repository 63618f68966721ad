"""The EC2 pools' part of the template (infra/aws/compute_ec2.py, merged by infra/aws/compute_resources.py;
infra/boot.py): a launch template and an Auto Scaling group per pool that only the control plane scales,
IAM scoped to the stack's groups, spot warnings routed to the events queue, and agents whose unit runs
exactly `agent_command`. Pure: templates are rendered and read, nothing is deployed."""

from __future__ import annotations

import json
import re

import pytest

from infra.aws.compute_agents import ComputeTemplateError, logical_ids
from infra.aws.compute_resources import compute_resources
from infra.aws.template import template
from infra.aws.template_app import COMPUTE_POLICY, QUEUE_IDS
from infra.boot import API_URL, agent_command, agent_command_in, script
from stratus.contract.pools import DEFAULT_POOLS, PoolSpec, Provider, pools_from_json

#: The API's function and one per queue the app consumes.
FUNCTIONS = 1 + len(QUEUE_IDS)

GPU = PoolSpec(
    name="gpu-a",
    slots_per_agent=4,
    max_agents=4,
    backend="ec2",
    provider=Provider(instance_types=("g5.12xlarge", "g6.12xlarge"), max_instances=4, spot=True),
)
CPU = PoolSpec(
    name="cpu",
    scheduler="fair_share",
    backend="ec2",
    provider=Provider(instance_types=("m5.xlarge",), min_instances=1, max_instances=2),
)
POOLS = (PoolSpec(name="default"), GPU, CPU)


def _statements(policy: dict) -> list[dict]:
    return policy["Properties"]["PolicyDocument"]["Statement"]


def _actions(statement: dict) -> list[str]:
    return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]


def test_without_ec2_pools_the_template_is_the_one_it_always_was():
    assert compute_resources(DEFAULT_POOLS) == ({}, {}, {}, {})
    assert template(DEFAULT_POOLS) == template() == template([PoolSpec(name="default")])
    local = (PoolSpec(name="default"), PoolSpec(name="big", slots_per_agent=8, max_agents=2))
    built = template(local)
    # Other local pools reach the functions, and nothing else changes: no machine, no parameter.
    functions = [r for r in built["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    for function in functions:
        variables = function["Properties"]["Environment"]["Variables"]
        # A plain string: no group's name to fill in (an `Fn::Sub` without a variable is a cfn-lint warning).
        assert pools_from_json(variables.pop("STRATUS_POOLS")) == local
    assert len(functions) == FUNCTIONS and built == template()


def test_each_ec2_pool_gets_a_launch_template_and_a_group_named_after_the_stack():
    built = template(POOLS)
    resources = built["Resources"]
    kinds = {
        k: r["Type"]
        for k, r in resources.items()
        if r["Type"].startswith(("AWS::AutoScaling", "AWS::EC2::L"))
    }
    assert kinds == {
        "GpuAPoolLaunchTemplate": "AWS::EC2::LaunchTemplate",
        "GpuAPoolGroup": "AWS::AutoScaling::AutoScalingGroup",
        "CpuPoolLaunchTemplate": "AWS::EC2::LaunchTemplate",
        "CpuPoolGroup": "AWS::AutoScaling::AutoScalingGroup",
    }
    group = resources["GpuAPoolGroup"]
    properties = group["Properties"]
    assert properties["AutoScalingGroupName"] == {"Fn::Sub": "${AWS::StackName}-gpu-a"}
    assert (properties["MinSize"], properties["MaxSize"]) == ("0", "4")
    assert (
        resources["CpuPoolGroup"]["Properties"]["MinSize"],
        resources["CpuPoolGroup"]["Properties"]["MaxSize"],
    ) == ("1", "2")
    # The control plane alone sets the desired capacity, and a stack update never resets it.
    assert "DesiredCapacity" not in properties
    assert properties["NewInstancesProtectedFromScaleIn"] is True and properties["CapacityRebalance"] is False
    assert properties["VPCZoneIdentifier"] == {"Ref": "AgentSubnetIds"}
    launch = properties["MixedInstancesPolicy"]["LaunchTemplate"]
    assert launch["LaunchTemplateSpecification"]["LaunchTemplateId"] == {"Ref": "GpuAPoolLaunchTemplate"}
    assert launch["Overrides"] == [{"InstanceType": "g5.12xlarge"}, {"InstanceType": "g6.12xlarge"}]
    assert {t["Key"]: t["Value"] for t in properties["Tags"]}["stratus:pool"] == "gpu-a"
    assert all(t["PropagateAtLaunch"] for t in properties["Tags"])
    assert group["Condition"] == "HasCode" and group["DependsOn"] == ["AgentPolicy"]
    assert built["Outputs"]["GpuAPoolGroupName"]["Value"] == {"Ref": "GpuAPoolGroup"}
    assert built["Outputs"]["CpuPoolGroupName"]["Value"] == {"Ref": "CpuPoolGroup"}


def test_the_launch_template_asks_for_imdsv2_a_200_gb_root_and_termination_on_shutdown():
    data = template(POOLS)["Resources"]["GpuAPoolLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    assert data["ImageId"] == {"Ref": "AgentAmiId"}
    assert data["IamInstanceProfile"] == {"Arn": {"Fn::GetAtt": ["AgentInstanceProfile", "Arn"]}}
    assert data["SecurityGroupIds"] == [{"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}]
    assert data["MetadataOptions"] == {"HttpTokens": "required", "HttpPutResponseHopLimit": 2}
    (root,) = data["BlockDeviceMappings"]
    assert root["Ebs"]["VolumeSize"] == 200 and root["Ebs"]["VolumeType"] == "gp3"
    assert data["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert data["KeyName"] == {"Fn::If": ["HasKeyName", {"Ref": "KeyName"}, {"Ref": "AWS::NoValue"}]}
    assert [spec["ResourceType"] for spec in data["TagSpecifications"]] == ["instance", "volume"]
    tags = {t["Key"]: t["Value"] for t in data["TagSpecifications"][0]["Tags"]}
    assert tags == {
        "stratus:cluster-id": {"Ref": "AWS::StackName"},
        "stratus:pool": "gpu-a",
        "Name": {"Fn::Sub": "${AWS::StackName}-gpu-a"},
    }


def test_spot_pools_buy_spot_only_and_on_demand_pools_on_demand_only():
    resources = template((GPU, CPU))["Resources"]

    def distribution(logical: str) -> dict:
        return resources[logical]["Properties"]["MixedInstancesPolicy"]["InstancesDistribution"]

    assert distribution("GpuAPoolGroup") == {
        "OnDemandBaseCapacity": 0,
        "OnDemandPercentageAboveBaseCapacity": 0,
        "OnDemandAllocationStrategy": "prioritized",
        "SpotAllocationStrategy": "price-capacity-optimized",
    }
    assert distribution("CpuPoolGroup")["OnDemandPercentageAboveBaseCapacity"] == 100
    capped = PoolSpec(
        name="gpu",
        backend="ec2",
        provider=Provider(instance_types=("g5.xlarge",), spot=True, spot_max_price="0.5"),
    )
    _, _, capped_resources, _ = compute_resources([capped])
    assert (
        capped_resources["GpuPoolGroup"]["Properties"]["MixedInstancesPolicy"]["InstancesDistribution"][
            "SpotMaxPrice"
        ]
        == "0.5"
    )


def test_the_control_plane_may_scale_only_the_stacks_groups_and_every_function_waits_for_it():
    built = template(POOLS)
    resources = built["Resources"]
    policy = resources[COMPUTE_POLICY]
    assert policy["Type"] == "AWS::IAM::Policy" and policy["Properties"]["Roles"] == [{"Ref": "ApiRole"}]
    scale, describe = _statements(policy)
    assert sorted(_actions(scale)) == [
        "autoscaling:SetDesiredCapacity",
        "autoscaling:TerminateInstanceInAutoScalingGroup",
    ]
    assert scale["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:autoscaling:${AWS::Region}:${AWS::AccountId}:autoScalingGroup:*"
        ":autoScalingGroupName/${AWS::StackName}-*"
    }
    # Only the describe calls, which IAM cannot scope to a resource, are allowed on "*".
    assert sorted(_actions(describe)) == [
        "autoscaling:DescribeAutoScalingGroups",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeInstances",
        "servicequotas:GetServiceQuota",
    ]
    assert describe["Resource"] == "*"
    functions = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    assert len(functions) == FUNCTIONS and all(COMPUTE_POLICY in f["DependsOn"] for f in functions)
    assert "arn:aws:" not in json.dumps(built)  # every ARN names its partition


def test_agents_may_read_only_the_compute_package_and_call_only_the_credential_route():
    resources = template(POOLS)["Resources"]
    assert resources["AgentInstanceProfile"]["Properties"]["Roles"] == [{"Ref": "AgentRole"}]
    policy = resources["AgentPolicy"]
    assert policy["Properties"]["Roles"] == [{"Ref": "AgentRole"}]
    package, credential = _statements(policy)
    assert package["Action"] == "s3:GetObject"
    assert package["Resource"] == {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/compute/*"}
    assert credential["Action"] == "execute-api:Invoke"
    assert credential["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${RestApi}"
        "/api/POST/agents/*/iam-credential"
    }


def test_a_trials_nodes_reach_each_other_and_ssh_only_with_a_key():
    built = template(POOLS)
    resources = built["Resources"]
    group_id = {"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}
    own = resources["AgentSelfIngress"]["Properties"]
    assert (own["GroupId"], own["SourceSecurityGroupId"], own["IpProtocol"]) == (group_id, group_id, "-1")
    ssh = resources["AgentSshIngress"]
    assert ssh["Condition"] == "HasKeyName" and ssh["Properties"]["CidrIp"] == {"Ref": "InboundCidr"}
    assert (ssh["Properties"]["FromPort"], ssh["Properties"]["ToPort"]) == (22, 22)
    assert built["Conditions"]["HasKeyName"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "KeyName"}, ""]}]}
    parameters = built["Parameters"]
    assert parameters["InboundCidr"]["Default"] == "0.0.0.0/0" and parameters["KeyName"]["Default"] == ""
    assert (
        "Default" not in parameters["AgentAmiId"]
        and parameters["AgentSubnetIds"]["Type"] == "CommaDelimitedList"
    )


def test_spot_warnings_reach_the_events_queue_as_compute_events_and_only_from_their_rule():
    resources = template(POOLS)["Resources"]
    rule = resources["SpotWarningRule"]["Properties"]
    assert rule["EventPattern"] == {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Spot Instance Interruption Warning"],
    }
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["EventsQueue", "Arn"]}
    event = {"detail-type": "EC2 Spot Instance Interruption Warning", "detail": {"instance-id": "i-1"}}
    body = target["InputTransformer"]["InputTemplate"].replace("<aws.events.event.json>", json.dumps(event))
    assert json.loads(body) == {"type": "compute_event", "event": event}
    (statement,) = _statements(resources["EventsQueuePolicy"])
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert statement["Condition"] == {
        "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["SpotWarningRule", "Arn"]}}
    }


def test_the_agents_unit_runs_exactly_agent_command():
    assert agent_command("https://api.example/api", "gpu-a", 4) == [
        "/opt/pytorch/bin/python", "-P", "-m", "stratus.harness.agent", "--aws", "--api", "https://api.example/api",
        "--pool", "gpu-a", "--slots", "4", "--work-dir", "/var/lib/stratus",
    ]  # fmt: skip
    user_data = template(POOLS)["Resources"]["GpuAPoolLaunchTemplate"]["Properties"]["LaunchTemplateData"][
        "UserData"
    ]
    text = user_data["Fn::Base64"]["Fn::Sub"]
    assert text == script("gpu-a", 4)
    assert "ExecStart=" + " ".join(agent_command(API_URL, "gpu-a", 4)) in text.splitlines()
    # As CloudFormation fills it in, and as the local stack reads it back.
    url = "https://abc123.execute-api.us-east-1.amazonaws.com/api"
    filled = text.replace(API_URL, url)
    assert agent_command_in(filled) == agent_command(url, "gpu-a", 4)
    for line in ("KillSignal=SIGTERM", "TimeoutStopSec=150", "Restart=on-failure"):
        assert line in text.splitlines()
    assert (
        'aws s3 cp --region ${AWS::Region} "s3://${BucketName}/$key"' in text
        and "key='${ComputeKey}'" in text
    )
    assert "/opt/pytorch/bin/python -m pip install" in text and text.startswith("#!/bin/bash\n")
    # Fn::Sub fills in every ${...}: the script's own shell variables never use braces.
    assert set(re.findall(r"\$\{([^}]*)\}", text)) == {
        "AWS::StackName", "AWS::Region", "AWS::URLSuffix", "BucketName", "ComputeKey", "RestApi",
    }  # fmt: skip
    cpu = template(POOLS)["Resources"]["CpuPoolLaunchTemplate"]["Properties"]["LaunchTemplateData"][
        "UserData"
    ]
    assert agent_command_in(cpu["Fn::Base64"]["Fn::Sub"])[-4:] == [
        "--slots",
        "1",
        "--work-dir",
        "/var/lib/stratus",
    ]


def test_the_functions_learn_each_ec2_pools_group_from_stratus_pools():
    described = PoolSpec(name="gpu-a", description="costs ${dollars}", backend="ec2", provider=GPU.provider)
    variables = template((PoolSpec(name="default"), described))["Resources"]["OnSchedulerMessageFunction"][
        "Properties"
    ]["Environment"]["Variables"]
    text = variables["STRATUS_POOLS"]["Fn::Sub"]
    # What Fn::Sub makes of it: the stack's name filled in, `${!` back to a literal `${`.
    filled = text.replace("${AWS::StackName}", "Lab").replace("${!", "${")
    pools = {pool.name: pool for pool in pools_from_json(filled)}
    assert pools["gpu-a"].provider is not None and pools["gpu-a"].provider.group == "Lab-gpu-a"
    assert pools["gpu-a"].description == "costs ${dollars}"
    assert pools["default"].provider is None


IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/stratus:1"
BATCH = PoolSpec(
    name="batch", backend="batch", provider=Provider(instance_types=("g5.xlarge",), gpus=1, image=IMAGE)
)
SAGEMAKER = PoolSpec(
    name="sm", backend="sagemaker", provider=Provider(instance_types=("ml.g5.xlarge",), gpus=1, image=IMAGE)
)
NETWORK = {"AgentSubnetIds", "AgentVpcId", "InboundCidr", "KeyName"}


@pytest.mark.parametrize(
    ("pools", "declared"),
    [
        ((), set()),
        ((CPU,), {"AgentAmiId", "ComputeKey", *NETWORK}),
        ((BATCH,), {"ComputeKey", *NETWORK}),
        ((SAGEMAKER,), {"ComputeKey"}),
        ((CPU, BATCH), {"AgentAmiId", "ComputeKey", *NETWORK}),
        ((CPU, SAGEMAKER), {"AgentAmiId", "ComputeKey", *NETWORK}),
        ((BATCH, SAGEMAKER), {"ComputeKey", *NETWORK}),
        ((CPU, BATCH, SAGEMAKER), {"AgentAmiId", "ComputeKey", *NETWORK}),
    ],
    ids=["local", "ec2", "batch", "sagemaker", "ec2+batch", "ec2+sagemaker", "batch+sagemaker", "all"],
)
def test_each_compute_parameter_is_declared_only_where_a_pool_uses_it(pools: tuple, declared: set):
    """CloudFormation refuses a parameter nothing uses: the AMI only with EC2 pools, the compute package with
    any cloud pool (instances and container jobs install it), the agents' network only with EC2 or Batch
    pools (SageMaker jobs run in SageMaker's own network)."""
    built = template((PoolSpec(name="default"), *pools))
    assert set(built["Parameters"]) - set(template()["Parameters"]) == declared
    assert ("HasKeyName" in built["Conditions"]) == ("KeyName" in declared)
    assert ("AgentSecurityGroup" in built["Resources"]) == ("AgentVpcId" in declared)
    # Every parameter is used: by a Ref, or by name in an Fn::Sub string.
    text = json.dumps(built["Resources"]) + json.dumps(built["Conditions"]) + json.dumps(built["Outputs"])
    unused = [
        name
        for name in built["Parameters"]
        if f'{{"Ref": "{name}"}}' not in text and f"${{{name}}}" not in text
    ]
    assert unused == []


def test_logical_ids_are_alphanumeric_and_unique_even_for_names_that_look_alike():
    def pool(name: str) -> PoolSpec:
        return PoolSpec(name=name, backend="ec2", provider=Provider(instance_types=("g5.xlarge",)))

    ids = logical_ids([pool("gpu-a"), pool("gpu_a"), pool("cpu"), pool("8x")])
    assert ids["cpu"] == "CpuPool" and ids["8x"] == "8xPool"
    assert len(set(ids.values())) == 4 and all(re.fullmatch(r"[A-Za-z0-9]+", i) for i in ids.values())
    assert ids["gpu-a"].startswith("GpuA") and ids["gpu-a"] != ids["gpu_a"]
    assert logical_ids([pool("gpu-a")]) == {"gpu-a": "GpuAPool"}


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        (PoolSpec(name="gpu", backend="ec2", provider=Provider()), "EC2 pool 'gpu' has no instance type"),
        (
            PoolSpec(name="gpu pool", backend="ec2", provider=Provider(instance_types=("g5.xlarge",))),
            "pool name 'gpu pool' cannot name an EC2 Auto Scaling group",
        ),
    ],
)
def test_a_pool_the_template_cannot_render_is_refused_naming_it(pool: PoolSpec, message: str):
    with pytest.raises(ComputeTemplateError, match=re.escape(message)):
        compute_resources([pool])
