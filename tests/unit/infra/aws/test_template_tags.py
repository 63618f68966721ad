"""The user's tags in the template (`template(pools, tags=...)`, from `det deploy aws up --add-tag`): after
Stratus's own on every pool resource that tags what it starts (the EC2 pools' launch templates and groups,
the Batch pools' environments and their instances, queues, fair-share policies and job definitions), and in
the functions' `STRATUS_TAGS`, which tag the jobs the control plane starts; without tags the template is the
one it always was. Pure: templates are rendered and read, nothing is deployed."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infra.aws.template import template
from infra.aws.template_app import ENVIRONMENT_LIMIT, STACK_NAME_CHARS, environment_bytes
from stratus.contract.errors import InvalidTagError
from stratus.contract.pools import PoolSpec, Provider
from stratus.contract.tags import TAGS_ENV

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/stratus:1"
POOLS = (
    PoolSpec(name="default"),
    PoolSpec(name="gpu-a", backend="ec2", provider=Provider(instance_types=("g5.xlarge",), spot=True)),
    PoolSpec(
        name="gpu-b",
        backend="batch",
        provider=Provider(instance_types=("g5.xlarge",), max_instances=2, spot=True, gpus=1, image=IMAGE),
    ),
    PoolSpec(
        name="gpu-sm",
        backend="sagemaker",
        provider=Provider(instance_types=("ml.g5.xlarge",), max_instances=2, gpus=1, image=IMAGE),
    ),
)
TAGS = {"team": "vision", "cost-center": "4711"}
#: Stratus's own tags of a pool's resources, first, then the user's by key.
OURS = ["stratus:cluster-id", "stratus:pool", "Name"]
#: Every resource of POOLS that carries the pool's tags, and where.
TAGGED = {
    "GpuAPoolLaunchTemplate": ("LaunchTemplateData", "TagSpecifications"),
    "GpuAPoolGroup": ("Tags",),
    "GpuBPoolOnDemandEnvironment": ("Tags", "ComputeResources"),
    "GpuBPoolSpotEnvironment": ("Tags", "ComputeResources"),
    "GpuBPoolFairShare": ("Tags",),
    "GpuBPoolQueue": ("Tags",),
    "GpuBPoolMultiNodeQueue": ("Tags",),
    "GpuBPoolJobDefinition": ("Tags",),
    "GpuBPoolMultiNodeJobDefinition": ("Tags",),
}


def _keys(tags: Any) -> list[str]:
    """Tag keys in order, of a list of {Key, Value} or of a map."""
    return [tag["Key"] for tag in tags] if isinstance(tags, list) else list(tags)


def _values(tags: Any) -> dict[str, Any]:
    return {tag["Key"]: tag["Value"] for tag in tags} if isinstance(tags, list) else dict(tags)


def _without_user_tags(rendered: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """The template less the user's tags wherever they are, and less STRATUS_TAGS."""
    stripped = copy.deepcopy(rendered)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                if name == "Tags" and isinstance(value, dict):
                    node[name] = {k: v for k, v in value.items() if k not in keys}
                elif name == "Tags" and isinstance(value, list):
                    node[name] = [tag for tag in value if tag.get("Key") not in keys]
                else:
                    walk(value)
            if "Variables" in node:
                node["Variables"].pop(TAGS_ENV, None)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(stripped)
    return stripped


def test_every_pool_resource_that_tags_what_it_starts_carries_the_users_tags_after_stratuss() -> None:
    resources = template(POOLS, tags=TAGS)["Resources"]
    expected = [*OURS, "cost-center", "team"]  # the user's sorted by key
    places = 0
    for logical, (first, *rest) in TAGGED.items():
        properties = resources[logical]["Properties"]
        if first == "LaunchTemplateData":  # its instances' and volumes' tags
            specifications = properties[first]["TagSpecifications"]
            assert [s["ResourceType"] for s in specifications] == ["instance", "volume"]
            tag_lists = [s["Tags"] for s in specifications]
        else:
            tag_lists = [properties["Tags"], *(properties[part]["Tags"] for part in rest)]
        for tags in tag_lists:
            assert _keys(tags) == expected, logical
            assert {k: v for k, v in _values(tags).items() if k in TAGS} == TAGS
            places += 1
    assert places == 2 + 1 + 2 * 2 + 5  # the environments' instances too (ComputeResources.Tags)
    # The group hands every tag to the instances it launches.
    group_tags = resources["GpuAPoolGroup"]["Properties"]["Tags"]
    assert all(tag["PropagateAtLaunch"] is True for tag in group_tags)
    assert {"Key": "team", "Value": "vision", "PropagateAtLaunch": True} in group_tags


def test_the_functions_learn_the_tags_for_the_jobs_they_start() -> None:
    resources = template(POOLS, tags=TAGS)["Resources"]
    functions = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    assert functions
    for function in functions:
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables[TAGS_ENV] == '{"cost-center":"4711","team":"vision"}'  # compact, sorted


@pytest.mark.parametrize("pools", [POOLS, (PoolSpec(name="default"),)])
def test_without_tags_the_template_is_the_one_it_always_was(pools: tuple[PoolSpec, ...]) -> None:
    untagged = template(pools)
    assert template(pools, tags={}) == template(pools, tags=None) == untagged
    assert TAGS_ENV not in json.dumps(untagged)
    # With tags, only the tags are added: nothing else of the template changes.
    tagged = template(pools, tags=TAGS)
    assert tagged != untagged
    assert _without_user_tags(tagged, set(TAGS)) == untagged


def test_the_pools_tags_stay_within_what_batch_and_ec2_take() -> None:
    """40 user tags and Stratus's 3: 43 on an instance, under Batch's 50 on its compute resources."""
    many = {f"tag-{i:02}": "v" for i in range(40)}
    resources = template(POOLS, tags=many)["Resources"]
    compute = resources["GpuBPoolSpotEnvironment"]["Properties"]["ComputeResources"]["Tags"]
    assert len(compute) == 43
    with pytest.raises(InvalidTagError, match="41 tags: at most 40"):
        template(POOLS, tags={f"tag-{i:02}": "v" for i in range(41)})


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ({"aws:team": "x"}, "keys starting with 'aws:' are AWS's own"),
        ({"team": "v" * 257}, "a value has at most 256 characters"),
    ],
)
def test_a_tag_aws_would_refuse_is_refused_by_the_template_too(tags: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidTagError, match=message):
        template(POOLS, tags=tags)


def test_tags_that_would_take_the_functions_environment_over_lambdas_4_kb_are_refused() -> None:
    # 40 tags of 10 + 20 characters fit beside these pools (the environment is estimated, not measured).
    fitting = {f"key-{i:06}": "v" * 20 for i in range(40)}
    variables = template(POOLS, tags=fitting)["Resources"]["ApiFunction"]["Properties"]["Environment"]
    assert environment_bytes(variables["Variables"]) <= ENVIRONMENT_LIMIT
    too_long = {f"key-{i:02}": "v" * 256 for i in range(20)}
    with pytest.raises(InvalidTagError) as caught:
        template(POOLS, tags=too_long)
    assert "the tags take 5" in str(caught.value) and "of Lambda's 4096; use fewer or shorter tags" in str(
        caught.value
    )


def test_the_environments_size_counts_what_cloudformation_fills_in_at_most() -> None:
    assert environment_bytes({"A": "xyz"}) == 4
    assert environment_bytes({"A": {"Fn::Sub": "${AWS::StackName}-q"}}) == 1 + STACK_NAME_CHARS + 2
    assert environment_bytes({"A": {"Fn::Sub": "{${!x}}"}}) == 1 + len("{${x}}")  # escaped: literal
    assert environment_bytes({"A": {"Ref": "SchedulerQueue"}}) == 1 + 100 + STACK_NAME_CHARS  # its URL
    assert environment_bytes({"A": {"Ref": "AWS::StackName"}}) == 1 + STACK_NAME_CHARS
