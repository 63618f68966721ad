"""The Batch pools' part of the template (infra/aws/compute_batch.py, merged by infra/aws/compute_resources.py):
compute environments sized from the pool, queues and job definitions named as the control plane submits
to them, multi-node jobs on on-demand capacity only, ended jobs routed to the events queue, and IAM
scoped to the stack. Pure: templates are rendered and read, nothing is deployed."""

from __future__ import annotations

import json
import re

import pytest

from chalicelib.domain.cloud_names import MULTI_NODE_SUFFIX
from infra.aws.compute_batch import (
    DEFAULT_VCPUS,
    MEMORY_PER_VCPU_MIB,
    BatchTemplateError,
    batch_resources,
    bid_percentage,
)
from infra.aws.compute_resources import compute_resources
from infra.aws.template import template
from infra.aws.template_app import COMPUTE_POLICY
from infra.boot import API_URL
from stratus.contract.container_boot import boot_command
from stratus.contract.pools import PoolSpec, Provider, pools_from_json

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/stratus:1"
SPOT = PoolSpec(
    name="gpu-b",
    slots_per_agent=4,
    max_agents=3,
    backend="batch",
    provider=Provider(
        instance_types=("g5.12xlarge", "p4d.24xlarge"), max_instances=3, spot=True, gpus=4, image=IMAGE
    ),
)
#: An on-demand pool whose trials take no GPU (gpus 0), on a type of the default table.
ON_DEMAND = PoolSpec(
    name="cpu",
    backend="batch",
    provider=Provider(instance_types=("g6.xlarge",), max_instances=2, image=IMAGE),
)
EC2 = PoolSpec(name="ec2", backend="ec2", provider=Provider(instance_types=("g5.xlarge",), spot=True))
POOLS = (PoolSpec(name="default"), SPOT, ON_DEMAND, EC2)


def _statements(policy: dict) -> list[dict]:
    return policy["Properties"]["PolicyDocument"]["Statement"]


def _actions(statement: dict) -> list[str]:
    return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]


def test_each_batch_pool_gets_its_environments_policy_queues_and_job_definitions():
    resources = template(POOLS)["Resources"]
    kinds = {k: r["Type"] for k, r in resources.items() if r["Type"].startswith("AWS::Batch::")}
    assert kinds == {
        "GpuBPoolOnDemandEnvironment": "AWS::Batch::ComputeEnvironment",
        "GpuBPoolSpotEnvironment": "AWS::Batch::ComputeEnvironment",
        "GpuBPoolFairShare": "AWS::Batch::SchedulingPolicy",
        "GpuBPoolQueue": "AWS::Batch::JobQueue",
        "GpuBPoolMultiNodeQueue": "AWS::Batch::JobQueue",
        "GpuBPoolJobDefinition": "AWS::Batch::JobDefinition",
        "GpuBPoolMultiNodeJobDefinition": "AWS::Batch::JobDefinition",
        # An on-demand pool has no spot environment.
        "CpuPoolOnDemandEnvironment": "AWS::Batch::ComputeEnvironment",
        "CpuPoolFairShare": "AWS::Batch::SchedulingPolicy",
        "CpuPoolQueue": "AWS::Batch::JobQueue",
        "CpuPoolMultiNodeQueue": "AWS::Batch::JobQueue",
        "CpuPoolJobDefinition": "AWS::Batch::JobDefinition",
        "CpuPoolMultiNodeJobDefinition": "AWS::Batch::JobDefinition",
    }
    # Every pool resource waits for the control plane, as the EC2 pools' do.
    assert all(resources[k].get("Condition") == "HasCode" for k in kinds)
    # The EC2 pool keeps its own resources.
    assert "Ec2PoolGroup" in resources
    fair = resources["GpuBPoolFairShare"]["Properties"]["FairsharePolicy"]
    assert fair == {"ShareDecaySeconds": 0, "ComputeReservation": 0}


def test_the_queues_and_job_definitions_have_the_names_the_control_plane_submits_to():
    built = template(POOLS)
    resources = built["Resources"]

    def name(logical: str, key: str) -> str:
        return resources[logical]["Properties"][key]["Fn::Sub"]

    assert name("GpuBPoolQueue", "JobQueueName") == "${AWS::StackName}-gpu-b"
    assert name("GpuBPoolMultiNodeQueue", "JobQueueName") == "${AWS::StackName}-gpu-b" + MULTI_NODE_SUFFIX
    assert name("GpuBPoolJobDefinition", "JobDefinitionName") == "${AWS::StackName}-gpu-b"
    assert name("GpuBPoolMultiNodeJobDefinition", "JobDefinitionName") == "${AWS::StackName}-gpu-b-mnp"
    assert built["Outputs"]["GpuBPoolQueueName"]["Value"] == {"Fn::Sub": "${AWS::StackName}-gpu-b"}
    assert built["Outputs"]["CpuPoolMultiNodeQueueName"]["Value"] == {"Fn::Sub": "${AWS::StackName}-cpu-mnp"}
    for queue in ("GpuBPoolQueue", "GpuBPoolMultiNodeQueue"):
        properties = resources[queue]["Properties"]
        assert (properties["State"], properties["Priority"]) == ("ENABLED", 1)
        assert properties["SchedulingPolicyArn"] == {"Ref": "GpuBPoolFairShare"}


def test_the_functions_learn_each_batch_pools_queue_as_its_group():
    variables = template((PoolSpec(name="default"), SPOT, EC2))["Resources"]["ApiFunction"]["Properties"][
        "Environment"
    ]["Variables"]
    filled = variables["STRATUS_POOLS"]["Fn::Sub"].replace("${AWS::StackName}", "Lab").replace("${!", "${")
    groups = {pool.name: pool.provider.group for pool in pools_from_json(filled) if pool.provider}
    assert groups == {"gpu-b": "Lab-gpu-b", "ec2": "Lab-ec2"}


def test_single_node_jobs_try_spot_first_and_multi_node_jobs_run_on_demand_only():
    resources = template(POOLS)["Resources"]

    def order(queue: str) -> list[str]:
        entries = resources[queue]["Properties"]["ComputeEnvironmentOrder"]
        return [e["ComputeEnvironment"]["Ref"] for e in sorted(entries, key=lambda e: e["Order"])]

    assert order("GpuBPoolQueue") == ["GpuBPoolSpotEnvironment", "GpuBPoolOnDemandEnvironment"]
    assert order("GpuBPoolMultiNodeQueue") == ["GpuBPoolOnDemandEnvironment"]
    assert order("CpuPoolQueue") == ["CpuPoolOnDemandEnvironment"]
    assert order("CpuPoolMultiNodeQueue") == ["CpuPoolOnDemandEnvironment"]


def test_the_environments_scale_from_zero_to_max_instances_of_the_largest_type():
    resources = template(POOLS)["Resources"]
    spot = resources["GpuBPoolSpotEnvironment"]["Properties"]
    on_demand = resources["GpuBPoolOnDemandEnvironment"]["Properties"]
    assert spot["Type"] == on_demand["Type"] == "MANAGED"
    assert spot["ServiceRole"] == {"Fn::GetAtt": ["BatchServiceRole", "Arn"]}
    compute = spot["ComputeResources"]
    assert (compute["Type"], compute["AllocationStrategy"]) == ("SPOT", "SPOT_PRICE_CAPACITY_OPTIMIZED")
    assert "BidPercentage" not in compute  # no spot_max_price: up to the on-demand price
    assert (on_demand["ComputeResources"]["Type"], on_demand["ComputeResources"]["AllocationStrategy"]) == (
        "EC2",
        "BEST_FIT_PROGRESSIVE",
    )
    assert (compute["MinvCpus"], compute["MaxvCpus"]) == (0, 3 * 96)  # p4d.24xlarge: 96 vCPUs
    assert compute["InstanceTypes"] == ["g5.12xlarge", "p4d.24xlarge"]
    assert compute["Subnets"] == {"Ref": "AgentSubnetIds"}
    assert compute["SecurityGroupIds"] == [{"Fn::GetAtt": ["AgentSecurityGroup", "GroupId"]}]
    assert compute["InstanceRole"] == {"Fn::GetAtt": ["BatchInstanceProfile", "Arn"]}
    assert compute["Ec2Configuration"] == [{"ImageType": "ECS_AL2023_NVIDIA"}]
    assert compute["Tags"]["stratus:pool"] == "gpu-b"
    assert compute["Tags"]["stratus:cluster-id"] == {"Ref": "AWS::StackName"}
    cpu = resources["CpuPoolOnDemandEnvironment"]["Properties"]["ComputeResources"]
    assert cpu["Ec2Configuration"] == [{"ImageType": "ECS_AL2023"}] and cpu["MaxvCpus"] == 2 * 4


def test_the_job_runs_the_one_run_agent_with_the_jobs_parameters_on_a_whole_instance():
    resources = template(POOLS)["Resources"]
    definition = resources["GpuBPoolJobDefinition"]["Properties"]
    assert definition["Type"] == "container" and definition["PlatformCapabilities"] == ["EC2"]
    assert definition["RetryStrategy"] == {"Attempts": 1} and "Timeout" not in definition
    container = definition["ContainerProperties"]
    assert container["Image"] == IMAGE
    # The image's Python installs the stack's compute package (from STRATUS_COMPUTE_URI), then runs the agent.
    assert container["Command"] == boot_command([
        "--only-runs", "Ref::runs", "--batch-agents", "Ref::agents", "--credential-from", "Ref::credentials",
        "--api", {"Fn::Sub": API_URL}, "--pool", "gpu-b", "--slots", "4", "--work-dir", "/tmp/stratus",
    ])  # fmt: skip
    assert container["Environment"] == [
        {"Name": "STRATUS_COMPUTE_URI", "Value": {"Fn::Sub": "s3://${BucketName}/${ComputeKey}"}}
    ]
    assert container["JobRoleArn"] == {"Fn::GetAtt": ["BatchJobRole", "Arn"]}
    requirements = {r["Type"]: r["Value"] for r in container["ResourceRequirements"]}
    # The smallest type of the pool, whole: g5.12xlarge's 48 vCPUs.
    assert requirements == {"GPU": "4", "VCPU": "48", "MEMORY": str(48 * MEMORY_PER_VCPU_MIB)}
    assert container["LinuxParameters"]["SharedMemorySize"] == 48 * MEMORY_PER_VCPU_MIB // 2
    cpu = resources["CpuPoolJobDefinition"]["Properties"]["ContainerProperties"]
    assert {r["Type"] for r in cpu["ResourceRequirements"]} == {"VCPU", "MEMORY"}  # no GPU asked
    assert cpu["Command"][cpu["Command"].index("--slots") + 1] == "1"


def test_the_multi_node_job_definition_runs_the_same_container_on_every_node():
    resources = template(POOLS)["Resources"]
    single = resources["GpuBPoolJobDefinition"]["Properties"]
    multi = resources["GpuBPoolMultiNodeJobDefinition"]["Properties"]
    assert multi["Type"] == "multinode" and "ContainerProperties" not in multi
    assert multi["NodeProperties"] == {
        "NumNodes": 2,
        "MainNode": 0,
        "NodeRangeProperties": [{"TargetNodes": "0:", "Container": single["ContainerProperties"]}],
    }
    assert multi["RetryStrategy"] == {"Attempts": 1}


def test_ended_jobs_of_the_stacks_queues_reach_the_events_queue_as_compute_events():
    resources = template((PoolSpec(name="default"), SPOT, EC2))["Resources"]
    rule = resources["BatchStateRule"]["Properties"]
    arn = "arn:${AWS::Partition}:batch:${AWS::Region}:${AWS::AccountId}:job-queue/${AWS::StackName}-"
    assert rule["EventPattern"] == {
        "source": ["aws.batch"],
        "detail-type": ["Batch Job State Change"],
        "detail": {
            "jobQueue": [{"Fn::Sub": arn + "gpu-b"}, {"Fn::Sub": arn + "gpu-b-mnp"}],
            "status": ["SUCCEEDED", "FAILED"],
        },
    }
    (target,) = rule["Targets"]
    (spot_target,) = resources["SpotWarningRule"]["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["EventsQueue", "Arn"]}
    assert target["InputTransformer"] == spot_target["InputTransformer"]  # the same compute_event message
    event = {"detail-type": "Batch Job State Change", "detail": {"jobId": "j-1", "status": "FAILED"}}
    body = target["InputTransformer"]["InputTemplate"].replace("<aws.events.event.json>", json.dumps(event))
    assert json.loads(body) == {"type": "compute_event", "event": event}
    (statement,) = _statements(resources["EventsQueuePolicy"])
    assert statement["Condition"] == {
        "ArnEquals": {
            "aws:SourceArn": [
                {"Fn::GetAtt": ["SpotWarningRule", "Arn"]},
                {"Fn::GetAtt": ["BatchStateRule", "Arn"]},
            ]
        }
    }


def test_the_control_plane_may_submit_only_to_the_stacks_queues_and_definitions():
    built = template((PoolSpec(name="default"), SPOT, EC2))
    statements = {s["Sid"]: s for s in _statements(built["Resources"][COMPUTE_POLICY])}
    batch = "arn:${AWS::Partition}:batch:${AWS::Region}:${AWS::AccountId}:"
    submit = statements["SubmitToTheStacksQueues"]
    assert _actions(submit) == ["batch:SubmitJob"]
    assert submit["Resource"] == [
        {"Fn::Sub": batch + "job-queue/${AWS::StackName}-*"},
        {"Fn::Sub": batch + "job-definition/${AWS::StackName}-*"},
    ]
    terminate = statements["TerminateJobs"]
    assert _actions(terminate) == ["batch:TerminateJob"] and terminate["Resource"] == {
        "Fn::Sub": batch + "job/*"
    }
    # SubmitJob with tags (the control plane always sends its cluster tag) is authorized as TagResource
    # on the new job too: jobs only, never a queue, environment or definition.
    tag = statements["TagTheJobsItSubmits"]
    assert _actions(tag) == ["batch:TagResource"] and tag["Resource"] == {"Fn::Sub": batch + "job/*"}
    describe = statements["DescribeJobs"]
    assert (
        sorted(_actions(describe)) == ["batch:DescribeJobDefinitions", "batch:DescribeJobs", "batch:ListJobs"]
        and describe["Resource"] == "*"
    )
    # The EC2 pool's scaling stays; a stack without EC2 pools has none of it.
    assert "ScaleTheStacksGroups" in statements
    batch_only = template((PoolSpec(name="default"), SPOT))
    sids = [s["Sid"] for s in _statements(batch_only["Resources"][COMPUTE_POLICY])]
    assert sids == ["SubmitToTheStacksQueues", "TagTheJobsItSubmits", "TerminateJobs", "DescribeJobs",
                    "RegisterImageDefinitions", "PassTheJobsRole"]  # fmt: skip
    # Batch pools boot the ECS AMI and their image: no AMI to pass; their jobs install the compute package.
    assert "AgentAmiId" not in batch_only["Parameters"] and "ComputeKey" in batch_only["Parameters"]
    assert {"AgentSubnetIds", "AgentVpcId"} <= set(batch_only["Parameters"])
    assert "AgentSecurityGroup" in batch_only["Resources"]
    for text in (json.dumps(built), json.dumps(batch_only)):
        assert "arn:aws:" not in text  # every ARN names its partition


def test_the_roles_of_batch_its_instances_and_its_jobs():
    resources = template((PoolSpec(name="default"), SPOT))["Resources"]

    def trusted(role: str) -> str:
        (statement,) = resources[role]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        return statement["Principal"]["Service"]

    assert trusted("BatchServiceRole") == "batch.amazonaws.com"
    assert resources["BatchServiceRole"]["Properties"]["ManagedPolicyArns"] == [
        {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/service-role/AWSBatchServiceRole"}
    ]
    assert trusted("BatchInstanceRole") == "ec2.amazonaws.com"
    assert resources["BatchInstanceRole"]["Properties"]["ManagedPolicyArns"] == [
        {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role"}
    ]
    assert resources["BatchInstanceProfile"]["Properties"]["Roles"] == [{"Ref": "BatchInstanceRole"}]
    # The jobs' role may only get its agent credential (trials use presigned URLs): read and delete its
    # credential object (`--credential-from`), or call the IAM credential route.
    assert trusted("BatchJobRole") == "ecs-tasks.amazonaws.com"
    assert "Policies" not in resources["BatchJobRole"]["Properties"]
    policy = resources["BatchJobPolicy"]
    assert policy["Condition"] == "HasCode" and policy["Properties"]["Roles"] == [{"Ref": "BatchJobRole"}]
    credential, objects, package = _statements(policy)
    # ...and its container installs the stack's compute package (`stratus.contract.container_boot`).
    assert package == {
        "Sid": "ReadTheComputePackage",
        "Effect": "Allow",
        "Action": "s3:GetObject",
        "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/compute/*"},
    }
    assert objects == {
        "Sid": "ReadOnceJobCredentials",
        "Effect": "Allow",
        "Action": ["s3:GetObject", "s3:DeleteObject"],
        "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/credentials/*"},
    }
    assert credential["Action"] == "execute-api:Invoke"
    assert credential["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${RestApi}"
        "/api/POST/agents/*/iam-credential"
    }
    assert resources["GpuBPoolJobDefinition"]["DependsOn"] == ["BatchJobPolicy"]


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        (
            Provider(instance_types=("g5.xlarge",)),
            "Batch pool 'gpu' has no image; give its provider the container image",
        ),
        (Provider(image=IMAGE), "Batch pool 'gpu' has no instance type"),
        (
            Provider(instance_types=("g5.xlarge", "x9.huge"), image=IMAGE),
            "Batch pool 'gpu' has instance type 'x9.huge', whose vCPUs the template does not know; deploy it "
            "with `det deploy aws up`, which reads every type's vCPUs from EC2, or pass them to the template: "
            "template(pools, vcpus={'x9.huge': <vCPUs>})",
        ),
    ],
)
def test_a_batch_pool_the_template_cannot_render_is_refused_naming_it(provider: Provider, message: str):
    with pytest.raises(BatchTemplateError, match=re.escape(message)):
        compute_resources([PoolSpec(name="gpu", backend="batch", provider=provider)])
    # det deploy aws up reads any ValueError as a pool it cannot deploy.
    assert issubclass(BatchTemplateError, ValueError)


def test_a_spot_max_price_becomes_the_percentage_that_keeps_every_type_under_it():
    capped = Provider(
        instance_types=("g5.12xlarge", "p4d.24xlarge"), spot=True, spot_max_price="4.00", image=IMAGE
    )
    assert bid_percentage(capped) == 12  # p4d.24xlarge at 32.7726 USD: 12% is 3.93, 13% would be 4.26
    resources = batch_resources([PoolSpec(name="gpu", backend="batch", provider=capped)], {"gpu": "GpuPool"})
    assert resources[0]["GpuPoolSpotEnvironment"]["Properties"]["ComputeResources"]["BidPercentage"] == 12
    assert "BidPercentage" not in resources[0]["GpuPoolOnDemandEnvironment"]["Properties"]["ComputeResources"]
    above = Provider(instance_types=("g5.xlarge",), spot=True, spot_max_price="9", image=IMAGE)
    assert bid_percentage(above) == 100  # a cap over the on-demand price: Batch's most
    unknown = Provider(instance_types=("g5.xlarge", "x9.huge"), spot=True, spot_max_price="1", image=IMAGE)
    with pytest.raises(BatchTemplateError, match=r"spot_max_price 1 cannot be given to Batch for x9\.huge"):
        bid_percentage(unknown)


def test_a_type_given_in_the_vcpus_table_is_rendered():
    pool = PoolSpec(
        name="cpu", backend="batch", provider=Provider(instance_types=("m5.xlarge",), image=IMAGE)
    )
    with pytest.raises(BatchTemplateError, match="'m5.xlarge'"):
        batch_resources([pool], {"cpu": "CpuPool"})
    resources, _ = batch_resources([pool], {"cpu": "CpuPool"}, {**DEFAULT_VCPUS, "m5.xlarge": 2})
    # max_instances (5 by default) of 2 vCPUs.
    assert resources["CpuPoolOnDemandEnvironment"]["Properties"]["ComputeResources"]["MaxvCpus"] == 10
    assert batch_resources([], {}) == ({}, {})


#: A type outside `DEFAULT_VCPUS`, with the vCPUs `det deploy aws up` reads from ec2:DescribeInstanceTypes.
G4DN = PoolSpec(
    name="t4",
    slots_per_agent=1,
    max_agents=3,
    backend="batch",
    provider=Provider(instance_types=("g4dn.xlarge",), max_instances=3, spot=True, gpus=1, image=IMAGE),
)


def test_a_type_outside_the_default_table_renders_with_the_vcpus_the_deploy_side_gives():
    assert "g4dn.xlarge" not in DEFAULT_VCPUS
    resources = template((PoolSpec(name="default"), G4DN), vcpus={"g4dn.xlarge": 4})["Resources"]
    for environment in ("T4PoolSpotEnvironment", "T4PoolOnDemandEnvironment"):
        compute = resources[environment]["Properties"]["ComputeResources"]
        assert (compute["MinvCpus"], compute["MaxvCpus"]) == (0, 3 * 4)  # max_instances of 4 vCPUs
        assert compute["InstanceTypes"] == ["g4dn.xlarge"]
    container = resources["T4PoolJobDefinition"]["Properties"]["ContainerProperties"]
    requirements = {r["Type"]: r["Value"] for r in container["ResourceRequirements"]}
    assert requirements == {"VCPU": "4", "MEMORY": str(4 * MEMORY_PER_VCPU_MIB), "GPU": "1"}
    assert container["LinuxParameters"]["SharedMemorySize"] == 4 * MEMORY_PER_VCPU_MIB // 2
    (node,) = resources["T4PoolMultiNodeJobDefinition"]["Properties"]["NodeProperties"]["NodeRangeProperties"]
    assert node["Container"] == container


def test_a_type_with_less_than_4_gib_a_vcpu_gets_7_8_of_its_own_memory():
    """A c type (c6i.large: 2 vCPUs, 4 GiB) could never place a job asking 3.5 GiB a vCPU: where det read
    the type's memory, the job asks 7/8 of it; a GPU type keeps 3.5 GiB a vCPU (its memory is more)."""
    cpu = PoolSpec(name="cpu", backend="batch", provider=Provider(instance_types=("c6i.large",), image=IMAGE))
    pools = (PoolSpec(name="default"), cpu, G4DN)
    vcpus, memory = {"c6i.large": 2, "g4dn.xlarge": 4}, {"c6i.large": 4096, "g4dn.xlarge": 16384}
    resources = template(pools, vcpus=vcpus, memory=memory)["Resources"]

    def asked(definition: str) -> dict[str, str]:
        container = resources[definition]["Properties"]["ContainerProperties"]
        return {r["Type"]: r["Value"] for r in container["ResourceRequirements"]}

    assert asked("CpuPoolJobDefinition") == {"VCPU": "2", "MEMORY": str(4096 * 7 // 8)}
    assert asked("T4PoolJobDefinition")["MEMORY"] == str(4 * MEMORY_PER_VCPU_MIB)  # 14,336 of 16,384
    without = template(pools, vcpus=vcpus)["Resources"]["CpuPoolJobDefinition"]["Properties"]
    assert {r["Type"]: r["Value"] for r in without["ContainerProperties"]["ResourceRequirements"]}[
        "MEMORY"
    ] == str(2 * MEMORY_PER_VCPU_MIB)  # not read: as before


def test_a_type_whose_vcpus_are_unknown_is_refused_naming_it_and_the_fix():
    # Rendered without the deploy side's vCPUs: only the default table's types.
    with pytest.raises(BatchTemplateError) as caught:
        template((PoolSpec(name="default"), G4DN))
    assert str(caught.value) == (
        "Batch pool 't4' has instance type 'g4dn.xlarge', whose vCPUs the template does not know; deploy it "
        "with `det deploy aws up`, which reads every type's vCPUs from EC2, or pass them to the template: "
        "template(pools, vcpus={'g4dn.xlarge': <vCPUs>})"
    )
    # The vCPUs given are the whole table: a type missing from them is refused too, not looked up elsewhere.
    with pytest.raises(BatchTemplateError, match=r"instance type 'g5\.12xlarge'"):
        template((PoolSpec(name="default"), SPOT), vcpus={"p4d.24xlarge": 96})
    # ... and they win over the default table's.
    resources = template((PoolSpec(name="default"), SPOT), vcpus={"g5.12xlarge": 48, "p4d.24xlarge": 100})
    compute = resources["Resources"]["GpuBPoolOnDemandEnvironment"]["Properties"]["ComputeResources"]
    assert compute["MaxvCpus"] == 3 * 100
