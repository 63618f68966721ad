"""The stack's CloudFormation template passes cfn-lint (AWS's own linter: resource schemas, IAM policy
shapes, intrinsic functions, unused parameters), as `det deploy aws up` renders it, with and without
EC2, Batch and SageMaker pools, each alone too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from infra.aws.template import template
from stratus.contract.pools import PoolSpec, Provider

#: cfn-lint's command line, as its console script runs it.
CFN_LINT = [sys.executable, "-c", "import sys; from cfnlint.runner import main; sys.exit(main())"]


def _assert_lint_clean(path: Path, rendered: dict) -> None:
    """cfn-lint's exit code 0: no error and no warning (an unused parameter is W2001, and CloudFormation
    refuses it)."""
    path.write_text(json.dumps(rendered, indent=2, sort_keys=True))
    linted = subprocess.run([*CFN_LINT, str(path)], capture_output=True, text=True)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def _sagemaker_pool(image: str) -> PoolSpec:
    provider = Provider(instance_types=("ml.g5.xlarge",), max_instances=4, spot=True, gpus=1, image=image)
    return PoolSpec(name="gpu-sm", slots_per_agent=1, max_agents=4, backend="sagemaker", provider=provider)


def test_the_rendered_template_is_cfn_lint_clean(tmp_path: Path) -> None:
    path = tmp_path / "stratus.cfn.json"
    path.write_text(json.dumps(template(), indent=2, sort_keys=True))
    linted = subprocess.run([*CFN_LINT, str(path)], capture_output=True, text=True)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_a_template_with_a_spot_and_an_on_demand_ec2_pool_is_cfn_lint_clean(tmp_path: Path) -> None:
    pools = [
        PoolSpec(name="default"),
        PoolSpec(
            name="gpu-spot",
            slots_per_agent=1,
            backend="ec2",
            provider=Provider(instance_types=("g5.xlarge", "g6.xlarge"), spot=True, spot_max_price="0.60"),
        ),
        PoolSpec(
            name="cpu",
            backend="ec2",
            provider=Provider(instance_types=("m5.xlarge",), min_instances=1, max_instances=3),
        ),
    ]
    rendered = template(pools)
    assert {"GpuSpotPoolGroup", "CpuPoolGroup", "SpotWarningRule"} <= set(rendered["Resources"])
    _assert_lint_clean(tmp_path / "pools.cfn.json", rendered)


def test_a_template_with_an_ec2_pool_and_a_spot_batch_pool_is_cfn_lint_clean(tmp_path: Path) -> None:
    pools = [
        PoolSpec(name="default"),
        PoolSpec(
            name="cpu",
            backend="ec2",
            provider=Provider(instance_types=("m5.xlarge",), max_instances=2),
        ),
        PoolSpec(
            name="gpu-batch",
            slots_per_agent=1,
            max_agents=4,
            backend="batch",
            provider=Provider(
                instance_types=("g5.xlarge", "g6.xlarge"),
                max_instances=4,
                spot=True,
                gpus=1,
                image="123456789012.dkr.ecr.us-east-1.amazonaws.com/stratus:latest",
            ),
        ),
    ]
    rendered = template(pools)
    assert {
        "CpuPoolGroup",
        "GpuBatchPoolSpotEnvironment",
        "GpuBatchPoolQueue",
        "GpuBatchPoolMultiNodeJobDefinition",
        "BatchStateRule",
    } <= set(rendered["Resources"])
    _assert_lint_clean(tmp_path / "batch.cfn.json", rendered)


def test_a_template_with_an_ec2_a_batch_and_a_spot_sagemaker_pool_is_cfn_lint_clean(tmp_path: Path) -> None:
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/stratus:latest"
    pools = [
        PoolSpec(name="default"),
        PoolSpec(
            name="cpu", backend="ec2", provider=Provider(instance_types=("m5.xlarge",), max_instances=2)
        ),
        PoolSpec(
            name="gpu-batch",
            backend="batch",
            provider=Provider(instance_types=("g5.xlarge",), max_instances=2, gpus=1, image=image),
        ),
        _sagemaker_pool(image),
    ]
    rendered = template(pools)
    assert {
        "CpuPoolGroup",
        "GpuBatchPoolQueue",
        "SageMakerExecutionRole",
        "SageMakerExecutionPolicy",
        "SageMakerStateRule",
    } <= set(rendered["Resources"])
    _assert_lint_clean(tmp_path / "sagemaker.cfn.json", rendered)


def test_a_template_with_sagemaker_pools_only_is_cfn_lint_clean(tmp_path: Path) -> None:
    """No EC2 or Batch pool: no agent network, so none of its parameters (an unused one is W2001, and
    CloudFormation refuses it), and STRATUS_POOLS names no group, so it is a plain string (W1020)."""
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/stratus:latest"
    pools = [
        PoolSpec(name="default"),
        _sagemaker_pool(image),
    ]
    rendered = template(pools)
    assert {"SageMakerExecutionRole", "SageMakerStateRule"} <= set(rendered["Resources"])
    assert "AgentSecurityGroup" not in rendered["Resources"]
    assert not {"AgentSubnetIds", "AgentVpcId", "InboundCidr", "KeyName"} & set(rendered["Parameters"])
    _assert_lint_clean(tmp_path / "sagemaker-only.cfn.json", rendered)


def test_a_template_with_a_batch_pool_only_of_a_type_outside_the_default_table_is_cfn_lint_clean(
    tmp_path: Path,
) -> None:
    """No EC2 pool: the agents' network and the compute package (the jobs install it) without the AMI;
    g4dn.xlarge sized by the vCPUs `det deploy aws up` reads from EC2."""
    pools = [
        PoolSpec(name="default"),
        PoolSpec(
            name="t4",
            slots_per_agent=1,
            max_agents=3,
            backend="batch",
            provider=Provider(
                instance_types=("g4dn.xlarge",),
                max_instances=3,
                spot=True,
                gpus=1,
                image="123456789012.dkr.ecr.us-east-1.amazonaws.com/stratus:latest",
            ),
        ),
    ]
    rendered = template(pools, vcpus={"g4dn.xlarge": 4})
    assert {"T4PoolSpotEnvironment", "T4PoolQueue", "AgentSecurityGroup"} <= set(rendered["Resources"])
    assert "AgentAmiId" not in rendered["Parameters"] and "ComputeKey" in rendered["Parameters"]
    _assert_lint_clean(tmp_path / "batch-only.cfn.json", rendered)


def test_a_template_with_the_users_tags_on_ec2_and_batch_pools_is_cfn_lint_clean(tmp_path: Path) -> None:
    """`--add-tag`: 40 tags (the most; one of the longest key, one with every punctuation AWS takes), after
    Stratus's own on the launch template's instances and volumes, the group (propagated at launch), the
    Batch environments and their instances, queues, fair-share policy and job definitions; and
    `STRATUS_TAGS` in the functions."""
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/stratus:latest"
    pools = [
        PoolSpec(name="default"),
        PoolSpec(name="gpu-spot", backend="ec2", provider=Provider(instance_types=("g5.xlarge",), spot=True)),
        PoolSpec(
            name="gpu-batch",
            backend="batch",
            provider=Provider(instance_types=("g5.xlarge",), max_instances=2, spot=True, gpus=1, image=image),
        ),
        PoolSpec(
            name="gpu-sm",
            backend="sagemaker",
            provider=Provider(instance_types=("ml.g5.xlarge",), max_instances=2, gpus=1, image=image),
        ),
    ]
    tags = {f"team-{i:02}": "vision" for i in range(38)} | {
        "k" * 128: "",
        "cost center": "a b:c/d@e.f+g=h-i_j",
    }
    rendered = template(pools, tags=tags)
    spot = rendered["Resources"]["GpuBatchPoolSpotEnvironment"]["Properties"]["ComputeResources"]["Tags"]
    assert len(spot) == 43 and spot["team-00"] == "vision"
    _assert_lint_clean(tmp_path / "tagged.cfn.json", rendered)


def test_cfn_lint_finds_a_broken_template(tmp_path: Path) -> None:
    broken = template()
    broken["Resources"]["TrialsTable"]["Properties"]["BillingMode"] = "FREE"  # not a billing mode
    path = tmp_path / "broken.cfn.json"
    path.write_text(json.dumps(broken))
    linted = subprocess.run([*CFN_LINT, str(path)], capture_output=True, text=True)
    assert linted.returncode != 0 and "FREE" in linted.stdout
