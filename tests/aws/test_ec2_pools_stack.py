"""A stack with EC2 pools in moto's CloudFormation (real boto3 calls through AWS_ENDPOINT_URL): each
pool's launch template and Auto Scaling group are made, the group at its minimum of 0 with no instance
running, the agents' unit runs `agent_command` with the stack's API URL once CloudFormation has filled in
the user data, and the functions know each pool's group.

What moto 5.2.5 does not do with this template (observed with it):
- It skips `AWS::SQS::QueuePolicy` (the events queue's policy for the spot warning rule) and
  `AWS::SecretsManager::Secret`, with a warning "Tried to parse ... but it's not supported".
- It checks no parameter: `AWS::EC2::Image::Id`, `AWS::EC2::VPC::Id` and `KeyName` take any string (an
  AMI, VPC or key pair that does not exist too), and no `AllowedPattern` is enforced.
- Its CloudFormation reads no `CapacityRebalance` of a group (always false) and makes the security group
  without AWS's default allow-all egress rule.
- Its user data never runs. An instance the group launches (after a `SetDesiredCapacity`) has an empty
  instance type (the overrides are not applied), no spot lifecycle, no instance profile and
  `HttpTokens: optional`: the launch template's metadata options are not applied.
"""

from __future__ import annotations

import base64
import io
import json
import uuid
import zipfile

import boto3
import pytest

from infra.aws.template import template
from infra.boot import agent_command, agent_command_in
from stratus.contract.pools import PoolSpec, Provider, pools_from_json

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS")

GPU = PoolSpec(
    name="gpu-a",
    slots_per_agent=1,
    backend="ec2",
    provider=Provider(instance_types=("g5.xlarge", "g6.xlarge"), max_instances=4, spot=True),
)


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    return lambda service: boto3.client(service, region_name="us-east-1")


def _code(s3, bucket: str) -> str:  # noqa: ANN001
    """A stand-in Lambda package (moto stores a function's code, never runs it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "app = None\n")
    s3.put_object(Bucket=bucket, Key="code/stratus.zip", Body=buffer.getvalue())
    return "code/stratus.zip"


def test_a_stack_with_an_ec2_pool_makes_its_group_at_zero_and_starts_no_instance(aws) -> None:
    stack = "Pools-" + uuid.uuid4().hex[:8]
    bucket = stack.lower() + "-bucket"
    s3, ec2, cfn, autoscaling = aws("s3"), aws("ec2"), aws("cloudformation"), aws("autoscaling")
    s3.create_bucket(Bucket=bucket)
    subnets = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
    parameters = {
        "BucketName": bucket,
        "CreateBucket": "false",
        "CodeKey": _code(s3, bucket),
        "ComputeKey": "compute/stratus-0.1.tar.gz",
        "AgentAmiId": ec2.describe_images()["Images"][0]["ImageId"],
        "AgentSubnetIds": ",".join(s["SubnetId"] for s in subnets[:2]),
        "AgentVpcId": subnets[0]["VpcId"],
    }
    cfn.create_stack(
        StackName=stack,
        TemplateBody=json.dumps(template([PoolSpec(name="default"), GPU])),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    cfn.get_waiter("stack_create_complete").wait(
        StackName=stack, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
    )
    try:
        (described,) = cfn.describe_stacks(StackName=stack)["Stacks"]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}
        assert outputs["GpuAPoolGroupName"] == f"{stack}-gpu-a"

        (group,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[f"{stack}-gpu-a"])[
            "AutoScalingGroups"
        ]
        assert (group["MinSize"], group["MaxSize"], group["DesiredCapacity"]) == (0, 4, 0)
        assert group["Instances"] == [] and group["NewInstancesProtectedFromScaleIn"] is True
        assert set(group["VPCZoneIdentifier"].split(",")) == {s["SubnetId"] for s in subnets[:2]}
        policy = group["MixedInstancesPolicy"]
        overrides = policy["LaunchTemplate"]["Overrides"]
        assert [o["InstanceType"] for o in overrides] == ["g5.xlarge", "g6.xlarge"]
        tags = {t["Key"]: t["Value"] for t in group["Tags"]}
        assert tags["stratus:cluster-id"] == stack and tags["stratus:pool"] == "gpu-a"
        running = ec2.describe_instances(Filters=[{"Name": "tag:stratus:cluster-id", "Values": [stack]}])
        assert [i for r in running["Reservations"] for i in r["Instances"]] == []

        # The agents' command line, as CloudFormation filled it in and as the local stack reads it back.
        template_id = policy["LaunchTemplate"]["LaunchTemplateSpecification"]["LaunchTemplateId"]
        (version,) = ec2.describe_launch_template_versions(LaunchTemplateId=template_id)[
            "LaunchTemplateVersions"
        ]
        assert version["LaunchTemplateName"] == f"{stack}-gpu-a"
        data = version["LaunchTemplateData"]
        assert data["MetadataOptions"]["HttpTokens"] == "required"
        assert data["InstanceInitiatedShutdownBehavior"] == "terminate" and "KeyName" not in data
        user_data = base64.b64decode(data["UserData"]).decode()
        assert agent_command_in(user_data) == agent_command(outputs["ApiUrl"], "gpu-a", 1)
        assert f'"s3://{bucket}/$key"' in user_data and "key='compute/stratus-0.1.tar.gz'" in user_data

        # The agents' security group lets a trial's nodes reach each other, and nothing else in.
        (security_group,) = ec2.describe_security_groups(GroupIds=data["SecurityGroupIds"])["SecurityGroups"]
        (rule,) = security_group["IpPermissions"]
        assert rule["IpProtocol"] == "-1"
        assert [p["GroupId"] for p in rule["UserIdGroupPairs"]] == [security_group["GroupId"]]

        # Every function knows the pool's group.
        function = aws("lambda").get_function(FunctionName=f"{stack}-on-scheduler-message")
        pools = pools_from_json(function["Configuration"]["Environment"]["Variables"]["STRATUS_POOLS"])
        assert [p.provider.group for p in pools if p.provider] == [f"{stack}-gpu-a"]
    finally:
        cfn.delete_stack(StackName=stack)
