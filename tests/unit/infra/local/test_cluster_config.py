"""The local stack's resource pools from `--pool` options and a cluster config file in the shape of
Determined's master config (`infra.local.cluster_config`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.local.cluster_config import ClusterConfigError, LocalPool, local_pools, parse_pool_option
from stratus.contract.pools import PoolSpec


def test_without_pools_the_stack_has_its_default_pool_of_its_agents_shape():
    (default,) = local_pools([], None, slots=2, agents=3)
    assert default == LocalPool(PoolSpec("default", slots_per_agent=2, max_agents=3), agents=3, slots=2)
    assert default.spec.max_slots == 6  # a bigger trial is refused at submission
    assert default.agent_ids() == ["local-0", "local-1", "local-2"]  # the names they always had


def test_pool_options_add_pools_with_their_shape_and_agents():
    default, gpu, cpu = local_pools(
        ["gpu:scheduler=fair_share:slots=4:agents=2", "cpu:preemption=off:priority=50"],
        None,
        slots=1,
        agents=1,
    )
    assert default.spec == PoolSpec("default", slots_per_agent=1, max_agents=1)
    assert gpu.spec == PoolSpec(
        "gpu", scheduler="fair_share", preemption=False, slots_per_agent=4, max_agents=2
    )
    assert gpu.agent_ids() == ["gpu-0", "gpu-1"]
    assert cpu.spec == PoolSpec("cpu", preemption=False, default_priority=50, slots_per_agent=1, max_agents=1)


def test_a_default_pool_given_replaces_the_implicit_one():
    (default,) = local_pools(["default:preemption=off:agents=2"], None, slots=2, agents=1)
    assert default.spec == PoolSpec("default", preemption=False, slots_per_agent=2, max_agents=2)
    assert default.agent_ids() == ["local-0", "local-1"]


def test_a_cluster_config_in_determineds_shape(tmp_path: Path):
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "resource_pools:\n"
        "  - pool_name: default\n"
        "    scheduler: {type: priority, preemption: true, default_priority: 30}\n"
        "    agents: 2\n"
        "  - pool_name: shared\n"
        "    description: fair share\n"
        "    scheduler: {type: fair_share}\n"
        "    slots_per_agent: 4\n"
    )
    default, shared, extra = local_pools(["extra"], path, slots=1, agents=1)
    assert default.spec == PoolSpec("default", default_priority=30, slots_per_agent=1, max_agents=2)
    assert shared.spec == PoolSpec(
        "shared",
        scheduler="fair_share",
        preemption=False,
        description="fair share",
        slots_per_agent=4,
        max_agents=1,
    )
    assert extra.spec.name == "extra"


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("gpu:slots", "'slots' is not KEY=VALUE"),
        ("gpu:colour=red", "unknown setting 'colour'"),
        ("gpu:scheduler=fifo", "scheduler 'fifo' is not one of priority, fair_share"),
        ("gpu:preemption=maybe", "preemption='maybe' must be on or off"),
        ("gpu:agents=0", "agents '0' must be a positive integer"),
        ("gpu:slots=two", "slots 'two' must be a positive integer"),
        ("gpu:priority=100", "default priority 100 must be 1 to 99"),
        ("g/pu", "pool name 'g/pu' must be letters, digits"),
    ],
)
def test_a_bad_pool_option_says_what_to_fix(option, said):
    with pytest.raises(ClusterConfigError) as raised:
        parse_pool_option(option, slots=1, agents=1)
    assert said in str(raised.value) and repr(option) in str(raised.value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("pools: []", "needs a non-empty `resource_pools:` list"),
        ("resource_pools: [{name: x}]", "resource_pools[0] needs a `pool_name`"),
        ("resource_pools: [{pool_name: x, gpus: 2}]", "pool 'x': key 'gpus' is not a key Stratus reads"),
        (
            "resource_pools: [{pool_name: x, scheduler: {type: priority, fitting: best}}]",
            "pool 'x': scheduler.fitting is not a key Stratus reads; use type, preemption, default_priority",
        ),
        ("resource_pools: [{pool_name: x, scheduler: {preemption: sometimes}}]", "must be true or false"),
        ("resource_pools: [{pool_name: x}, {pool_name: x}]", "pool 'x' is given twice"),
        ("resource_pools: [", "is not YAML"),
    ],
)
def test_a_bad_cluster_config_says_what_to_fix(tmp_path: Path, text, said):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(ClusterConfigError, match=None) as raised:
        local_pools([], path, slots=1, agents=1)
    assert said in str(raised.value)


def test_a_provider_block_makes_a_cloud_pool_played_here_with_the_local_periods(tmp_path: Path):
    """The same `provider:` block `det deploy aws up --pools-file` reads: one reader for both."""
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "resource_pools:\n"
        "  - pool_name: gpu\n"
        "    slots_per_agent: 2\n"
        "    provider: {type: ec2, max_instances: 3, spot: true}\n"
        "  - pool_name: jobs\n"
        "    scheduler: {type: fair_share}\n"
        "    provider: {type: sagemaker, max_instances: 2, max_idle_agent_period: 1m}\n"
    )
    default, gpu, jobs = local_pools([], path, slots=1, agents=1)
    assert default.spec.name == "default" and default.spec.backend == "local"
    assert gpu.agents == 0 and gpu.spec.backend == "ec2" and gpu.spec.slots_per_agent == 2
    assert gpu.spec.max_agents == 3 and gpu.spec.provider is not None
    assert gpu.spec.provider.spot and gpu.spec.provider.instance_types == ("g5.xlarge",)
    assert (gpu.spec.provider.max_idle_agent_period_s, gpu.spec.provider.max_agent_starting_period_s) == (
        20.0,
        60.0,
    )
    assert jobs.spec.backend == "sagemaker" and jobs.spec.provider is not None
    assert (
        jobs.spec.provider.instance_types == ("ml.g5.xlarge",) and jobs.spec.provider.image == "stratus/local"
    )
    assert jobs.spec.provider.max_idle_agent_period_s == 60.0 and not jobs.spec.preemption


def test_a_cloud_pool_with_agents_is_refused(tmp_path: Path):
    path = tmp_path / "cluster.yaml"
    path.write_text("resource_pools: [{pool_name: gpu, agents: 2, provider: {type: ec2}}]\n")
    with pytest.raises(ClusterConfigError, match="pool 'gpu': agents is for local pools"):
        local_pools([], path, slots=1, agents=1)


def test_a_missing_cluster_config_is_named(tmp_path: Path):
    with pytest.raises(ClusterConfigError, match="cannot read the cluster config"):
        local_pools([], tmp_path / "nope.yaml", slots=1, agents=1)


def test_an_ec2_pool_is_a_group_that_starts_no_agent():
    (default,) = local_pools([], None, slots=1, agents=3, backend="ec2")
    assert default.agents == 0 and default.agent_ids() == []  # its agents come with its instances
    assert default.spec.backend == "ec2" and default.spec.max_agents == 3
    provider = default.spec.provider
    assert provider is not None and (provider.min_instances, provider.max_instances) == (0, 3)
    assert not provider.spot and provider.max_idle_agent_period_s == 20.0
    gpu = parse_pool_option("gpu:backend=ec2:min=1:max=4:slots=2:spot=on:idle=5", slots=1, agents=1)
    assert gpu.spec.slots_per_agent == 2 and gpu.spec.provider is not None
    assert (gpu.spec.provider.min_instances, gpu.spec.provider.max_instances) == (1, 4)
    assert gpu.spec.provider.spot and gpu.spec.provider.max_idle_agent_period_s == 5.0


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (
            "gpu:backend=kubernetes",
            "backend 'kubernetes' is not available here; use local, ec2, batch or sagemaker",
        ),
        ("gpu:max=3", "'max' is for cloud pools"),
        ("gpu:backend=ec2:min=5:max=2", "min '5' must be a whole number from 0 to max (2)"),
        ("gpu:backend=ec2:spot=maybe", "spot='maybe' must be on or off"),
        ("gpu:backend=ec2:idle=-1", "idle '-1' must be a positive number of seconds"),
    ],
)
def test_a_bad_ec2_pool_option_says_what_to_fix(option, said):
    with pytest.raises(ClusterConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        parse_pool_option(option, slots=1, agents=1)


def test_batch_and_sagemaker_pools_are_lanes_that_start_no_agent():
    batch = parse_pool_option("cpu:backend=batch:max=3:slots=2", slots=1, agents=1)
    sagemaker = parse_pool_option("sm:backend=sagemaker:max=2", slots=1, agents=1)
    assert batch.agents == sagemaker.agents == 0
    assert (batch.spec.backend, batch.spec.max_agents, batch.spec.slots_per_agent) == ("batch", 3, 2)
    assert sagemaker.spec.provider is not None and sagemaker.spec.provider.instance_types == ("ml.g5.xlarge",)
    assert sagemaker.spec.provider.image  # a training job needs an image; the local runner ignores it
