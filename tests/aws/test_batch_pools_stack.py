"""A stack with a spot Batch pool in moto's CloudFormation (real boto3 calls through AWS_ENDPOINT_URL):
the pool's job queues and job definitions exist under the names the control plane submits to (the
functions' `provider.group`, and `-mnp` for multi-node jobs), the single-node queue tries the spot
environment first, the multi-node queue has the on-demand one only, the control plane may submit to the
stack's queues, and only the queues' ended jobs reach the events queue as `compute_event` messages.

What moto 5.2.5 does not do with this template (observed with it):
- Its CloudFormation registers every `AWS::Batch::JobDefinition` as `container` whatever its `Type`, so
  the multi-node one fails the stack ("containerProperties or eksProperties must be provided"): the
  `multinode_job_definitions` fixture honours `Type`. It also drops `PlatformCapabilities` and
  lower-cases the first letter of every key, tag keys included (`Name` -> `name`); and its
  `DescribeJobDefinitions` leaves out a multi-node definition's `nodeProperties`.
- It skips `AWS::Batch::SchedulingPolicy` (no CloudFormation model: "No Moto CloudFormation support"),
  so no scheduling policy exists and the queues have no `schedulingPolicyArn`; it also skips
  `AWS::SQS::QueuePolicy` and `AWS::SecretsManager::Secret` (as for the EC2 pools' stack).
- It drops the tags of a job queue and of a compute environment (the environment's `ComputeResources`
  tags, those of its instances, are kept) and attaches no `ManagedPolicyArns` to a role (the service and
  instance roles have no policy there; nothing in moto checks them).
- It names each compute environment `<stack>-<logical id>-<random>` and starts no instance (`MinvCpus`
  0). Its EventBridge sends to a rule's targets within `PutEvents`; the events queue's functions cannot
  run there (no Docker), so the rule is observed through a probe queue added as a second target.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from stratus.contract.container_boot import agent_argv
from stratus.contract.pools import PoolSpec, Provider, pools_from_json

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS")

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/stratus:1"
ARN = "arn:aws:batch:us-east-1:123456789012:"
GPU = PoolSpec(
    name="gpu-b",
    slots_per_agent=1,
    max_agents=4,
    backend="batch",
    provider=Provider(
        instance_types=("g5.xlarge", "g6.xlarge"), max_instances=4, spot=True, gpus=1, image=IMAGE
    ),
)


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Any]:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    return lambda service: boto3.client(service, region_name="us-east-1")


@pytest.fixture
def multinode_job_definitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's CloudFormation registers every job definition as `container` whatever its `Type`, so a
    multi-node one fails ("containerProperties or eksProperties must be provided"): honour `Type`."""
    from moto.batch import models
    from moto.batch.utils import lowercase_first_key

    original = models.JobDefinition.create_from_cloudformation_json.__func__

    def create(cls, resource_name: str, cloudformation_json: dict[str, Any], account_id: str,
               region_name: str, **kwargs: Any) -> Any:  # fmt: skip
        properties = cloudformation_json["Properties"]
        if properties.get("Type") != "multinode":
            return original(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
        return models.batch_backends[account_id][region_name].register_job_definition(
            def_name=resource_name,
            parameters=lowercase_first_key(properties.get("Parameters", {})),
            _type="multinode",
            tags=properties.get("Tags", {}),
            retry_strategy=lowercase_first_key(properties["RetryStrategy"]),
            container_properties=None,
            node_properties=lowercase_first_key(properties["NodeProperties"]),
            eks_properties=None,
            timeout={},
            platform_capabilities=properties.get("PlatformCapabilities", []),
            propagate_tags=False,
        )

    monkeypatch.setattr(models.JobDefinition, "create_from_cloudformation_json", classmethod(create))


@pytest.fixture
def stack(deployed_pools_stack, multinode_job_definitions: None) -> Iterator[Any]:  # noqa: ANN001
    """The stack with the default pool and GPU, its control plane included, deployed with a user's tag."""
    name = "Batch-" + uuid.uuid4().hex[:8]
    with deployed_pools_stack(name, [PoolSpec(name="default"), GPU], tags={"team": "vision"}) as deployed:
        yield deployed


def test_the_queues_and_job_definitions_have_the_names_the_control_plane_submits_to(aws, stack) -> None:
    batch, name = aws("batch"), stack.name
    assert stack.outputs["GpuBPoolQueueName"] == f"{name}-gpu-b"
    assert stack.outputs["GpuBPoolMultiNodeQueueName"] == f"{name}-gpu-b-mnp"
    # The functions submit to the pool's queue by the group they know; a multi-node job adds -mnp.
    function = aws("lambda").get_function(FunctionName=f"{name}-on-scheduler-message")
    pools = pools_from_json(function["Configuration"]["Environment"]["Variables"]["STRATUS_POOLS"])
    assert [p.provider.group for p in pools if p.provider] == [f"{name}-gpu-b"]
    queues = batch.describe_job_queues(jobQueues=[f"{name}-gpu-b", f"{name}-gpu-b-mnp"])["jobQueues"]
    assert sorted(q["jobQueueName"] for q in queues) == [f"{name}-gpu-b", f"{name}-gpu-b-mnp"]
    assert all(q["state"] == "ENABLED" and q["priority"] == 1 for q in queues)

    definitions = {
        d["jobDefinitionName"]: d
        for d in batch.describe_job_definitions(status="ACTIVE")["jobDefinitions"]
        if d["jobDefinitionName"].startswith(name)
    }
    assert set(definitions) == {f"{name}-gpu-b", f"{name}-gpu-b-mnp"}
    # The user's tag, which the jobs' ECS tasks get (the control plane submits with propagateTags).
    assert all(d["tags"]["team"] == "vision" for d in definitions.values())
    container = definitions[f"{name}-gpu-b"]["containerProperties"]
    assert container["image"] == IMAGE
    command = container["command"]
    # The image installs the stack's compute package first (`stratus.contract.container_boot`), from the bucket.
    assert agent_argv(command)[:8] == [
        "-m", "stratus.harness.agent", "--only-runs", "Ref::runs", "--batch-agents", "Ref::agents",
        "--credential-from", "Ref::credentials",
    ]  # fmt: skip
    (uri,) = container["environment"]
    # (This stack was made with no ComputeKey, so the URI names the bucket only; `up` sets the key.)
    assert uri == {"name": "STRATUS_COMPUTE_URI", "value": f"s3://{stack.name.lower()}-bucket/"}
    assert command[command.index("--pool") + 1] == "gpu-b"
    assert command[command.index("--api") + 1] == stack.outputs["ApiUrl"]  # filled in by CloudFormation
    assert {r["type"]: r["value"] for r in container["resourceRequirements"]}["GPU"] == "1"
    assert container["jobRoleArn"].endswith("/" + stack.resources["BatchJobRole"])
    multi_node = definitions[f"{name}-gpu-b-mnp"]
    assert multi_node["type"] == "multinode" and multi_node["retryStrategy"] == {"attempts": 1}
    assert batch.list_scheduling_policies()["schedulingPolicies"] == []  # skipped by moto

    # The control plane may submit to the stack's queues and job definitions.
    policy = aws("iam").get_role_policy(RoleName=stack.resources["ApiRole"], PolicyName="ec2-pools")
    (submit,) = [s for s in policy["PolicyDocument"]["Statement"] if s["Action"] == "batch:SubmitJob"]
    assert submit["Resource"] == [f"{ARN}job-queue/{name}-*", f"{ARN}job-definition/{name}-*"]
    (tag,) = [s for s in policy["PolicyDocument"]["Statement"] if s["Action"] == "batch:TagResource"]
    assert tag["Resource"] == f"{ARN}job/*"  # SubmitJob with tags: the new job only
    # The functions tag the jobs they submit with the user's tags.
    assert function["Configuration"]["Environment"]["Variables"]["STRATUS_TAGS"] == '{"team":"vision"}'


def test_single_node_jobs_try_spot_first_and_multi_node_jobs_get_on_demand_only(aws, stack) -> None:
    batch, resources = aws("batch"), stack.resources
    single, multi = (
        batch.describe_job_queues(jobQueues=[f"{stack.name}-{suffix}"])["jobQueues"][0]
        for suffix in ("gpu-b", "gpu-b-mnp")
    )

    def order(queue: dict) -> list[str]:
        return [
            e["computeEnvironment"]
            for e in sorted(queue["computeEnvironmentOrder"], key=lambda e: e["order"])
        ]

    spot_arn, on_demand_arn = resources["GpuBPoolSpotEnvironment"], resources["GpuBPoolOnDemandEnvironment"]
    assert order(single) == [spot_arn, on_demand_arn] and order(multi) == [on_demand_arn]
    environments = batch.describe_compute_environments(computeEnvironments=[spot_arn, on_demand_arn])
    kinds = {e["computeEnvironmentArn"]: e for e in environments["computeEnvironments"]}
    for arn, kind in ((spot_arn, "SPOT"), (on_demand_arn, "EC2")):
        environment = kinds[arn]
        compute = environment["computeResources"]
        assert environment["type"] == "MANAGED" and compute["type"] == kind
        assert (compute["minvCpus"], compute["maxvCpus"]) == (0, 4 * 4)  # 4 instances of 4 vCPUs
        assert compute["instanceTypes"] == ["g5.xlarge", "g6.xlarge"]
        assert set(compute["subnets"]) == set(stack.subnets)
        assert compute["securityGroupIds"] == [resources["AgentSecurityGroup"]]
        assert compute["instanceRole"].endswith("/" + resources["BatchInstanceProfile"])
        assert compute["ec2Configuration"] == [{"imageType": "ECS_AL2023_NVIDIA"}]
        assert compute["tags"]["stratus:cluster-id"] == stack.name
        assert compute["tags"]["team"] == "vision"  # the user's tag, on the environment's instances
        assert environment["serviceRole"].endswith("/" + resources["BatchServiceRole"])


def test_only_ended_jobs_of_the_stacks_queues_reach_the_events_queue(aws, stack) -> None:
    events, sqs = aws("events"), aws("sqs")
    rule = stack.resources["BatchStateRule"]
    (target,) = events.list_targets_by_rule(Rule=rule)["Targets"]
    assert target["Arn"].endswith(f":{stack.name}-trial-events")
    # A probe queue gets what the rule's own target gets.
    probe = sqs.create_queue(QueueName=f"{stack.name}-probe")["QueueUrl"]
    probe_arn = sqs.get_queue_attributes(QueueUrl=probe, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_targets(Rule=rule, Targets=[{**target, "Id": "probe", "Arn": probe_arn}])
    queue = f"{ARN}job-queue/{stack.name}-gpu-b"
    for job, job_queue, status in [
        ("j-1", queue, "FAILED"),
        ("j-2", queue, "RUNNING"),  # not ended: not sent
        ("j-3", queue + "-mnp", "SUCCEEDED"),
        ("j-4", f"{ARN}job-queue/{stack.name}-other", "FAILED"),  # not one of the stack's queues
    ]:
        detail = {"jobId": job, "jobQueue": job_queue, "status": status, "parameters": {"runs": "r1"}}
        entry = {"Source": "aws.batch", "DetailType": "Batch Job State Change", "Detail": json.dumps(detail)}
        assert events.put_events(Entries=[entry])["FailedEntryCount"] == 0
    received = sqs.receive_message(QueueUrl=probe, MaxNumberOfMessages=10)["Messages"]
    bodies = [json.loads(m["Body"]) for m in received]
    assert {b["type"] for b in bodies} == {"compute_event"}
    assert sorted(b["event"]["detail"]["jobId"] for b in bodies) == ["j-1", "j-3"]
    assert all(b["event"]["source"] == "aws.batch" for b in bodies)
