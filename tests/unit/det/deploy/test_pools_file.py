"""The pools file of `det deploy aws up --pools-file` (Determined's `resource_pools` with a `provider:`
block), read by the reader every side shares (`stratus.contract.resource_pools`) into the PoolSpecs the
control plane reads back from its environment; every refusal names the file, the pool, the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from det.deploy.pools_file import read_pools_file
from det.errors import UsageError
from stratus.contract.errors import InvalidPoolError
from stratus.contract.pools import PoolSpec, Provider, pools_from_json, pools_to_json
from stratus.contract.resource_pools import duration_s

FILE = """
resource_pools:
  - pool_name: default
    description: one GPU per agent
    scheduler: {type: priority, preemption: true, default_priority: 40}
    provider:
      type: ec2
      instance_type: g5.xlarge
      min_instances: 1
      max_instances: 4
      spot: true
      spot_max_price: "0.50"
      max_idle_agent_period: 1h30m
      max_agent_starting_period: 30s
  - pool_name: batch-cpu
    scheduler: {type: fair_share}
    provider:
      type: batch
      instance_type: [c6i.large, c6i.xlarge]
      image: python:3.11
  - pool_name: by-hand
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pools.yaml"
    path.write_text(text)
    return path


def test_a_file_reads_into_pool_specs_that_travel_to_the_control_plane_unchanged(tmp_path: Path) -> None:
    pools = read_pools_file(write(tmp_path, FILE))

    assert pools[0] == PoolSpec(
        name="default",
        description="one GPU per agent",
        scheduler="priority",
        preemption=True,
        default_priority=40,
        backend="ec2",
        max_agents=4,
        provider=Provider(("g5.xlarge",), 1, 4, True, "0.50", 5400.0, 30.0),
    )
    # Determined's defaults where the file says nothing; fair share has no preemption.
    assert pools[1].preemption is False and pools[1].max_agents == 5
    assert pools[1].provider == Provider(
        instance_types=("c6i.large", "c6i.xlarge"),
        min_instances=0,
        max_instances=5,
        spot=False,
        max_idle_agent_period_s=600.0,
        max_agent_starting_period_s=1200.0,
        image="python:3.11",
    )
    assert pools[2] == PoolSpec(name="by-hand")
    # The control plane reads the same records back from the stack's environment.
    assert pools_from_json(pools_to_json(pools)) == tuple(pools)


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30.0), ("10m", 600.0), ("1h", 3600.0), ("1h30m", 5400.0), ("1.5m", 90.0)]
)
def test_durations_are_read_as_determined_writes_them(text: str, seconds: float) -> None:
    assert duration_s(text, "x") == seconds


@pytest.mark.parametrize("text", ["10", "10x", "m", "1h 30m", "-5s", True])
def test_a_bad_duration_is_refused(text: object) -> None:
    with pytest.raises(InvalidPoolError, match="is not a duration; use one such as 30s, 10m or 1h"):
        duration_s(text, "x")


def _pool(provider: str, name: str = "default") -> str:
    return f"resource_pools:\n  - pool_name: {name}\n    provider: {provider}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_pool("{type: ec2, instance_type: g5.xlarge, max_instances: 2, region: x}"),
         "pool 'default': provider.region is not a key Stratus reads; use type, instance_type"),
        (_pool("{type: fargate, instance_type: g5.xlarge}"),
         "pool 'default': provider.type 'fargate' is not a backend; use ec2, batch, sagemaker"),
        (_pool("{type: ec2}"), "pool 'default': provider.instance_type None must be an instance type"),
        (_pool("{type: ec2, instance_type: g5.xlarge, max_idle_agent_period: 10 minutes}"),
         "pool 'default': provider.max_idle_agent_period '10 minutes' is not a duration; use one such as 30s"),
        (_pool("{type: ec2, instance_type: g5.xlarge, min_instances: 3, max_instances: 2}"),
         "pool 'default': provider.min_instances 3 and provider.max_instances 2 must satisfy"),
        (_pool("{type: ec2, instance_type: g5.xlarge, max_instances: 0}"), "max >= 1; fix them"),
        (_pool("{type: ec2, instance_type: g5.xlarge, min_instances: -1}"),
         "provider.min_instances -1 must be a whole number, 0 or more"),
        (_pool("{type: ec2, instance_type: g5.xlarge, spot_max_price: '0.5'}"),
         "pool 'default': provider.spot_max_price applies to spot instances only; set provider.spot too"),
        (_pool("{type: ec2, instance_type: g5.xlarge, spot: true, spot_max_price: cheap}"),
         "provider.spot_max_price 'cheap' must be a positive price in USD such as 0.50"),
        (_pool("{type: ec2, instance_type: g5.xlarge, spot: 'yes'}"), "provider.spot 'yes' must be true or false"),
        (_pool("{type: ec2, instance_type: g5.xlarge, image: my/image}"),
         "provider.image: ec2 pools run on the AMI (--agent-ami), not an image; drop it"),
        (_pool("{type: sagemaker, instance_type: g5.xlarge}"),
         "provider.instance_type 'g5.xlarge' is not a sagemaker instance type; sagemaker's start with ml."),
        (_pool("{type: sagemaker, instance_type: ml.g5.xlarge, min_instances: 1}"),
         "provider.min_instances 1: a sagemaker pool starts a job per trial and keeps no instance"),
        (_pool("{type: sagemaker, instance_type: ml.g5.xlarge, spot: true, spot_max_price: '1.5'}"),
         "provider.spot_max_price: a sagemaker pool's managed spot capacity takes no price cap"),
        (_pool("{type: batch, instance_type: ml.g5.xlarge}"),
         "provider.instance_type 'ml.g5.xlarge' is not a batch instance type; drop the ml. prefix"),
        (_pool("{type: ec2, instance_type: g5.xlarge}", name="gpu"),
         "no pool is named 'default'; experiments that name no resource_pool run there, so name one pool default"),
        (_pool("[ec2]"), "pool 'default': provider must be a mapping such as {type: ec2}"),
        ("resource_pools:\n  - pool_name: default\n  - pool_name: default\n",
         "pool 'default' is given twice; name each pool once"),
        ("resource_pools:\n  - pool_name: default\n    agents: 2\n",
         "pool 'default': key 'agents' is not a key Stratus reads; use pool_name, description, scheduler, provider"),
        ("resource_pools:\n  - pool_name: default\n    slots_per_agent: 2\n",
         "pool 'default': key 'slots_per_agent' is not a key Stratus reads"),
        ("resource_pools:\n  - pool_name: default\n    scheduler: {type: round_robin}\n",
         "pool 'default': scheduler.type 'round_robin' must be priority or fair_share"),
        ("resource_pools:\n  - pool_name: default\n    scheduler: {default_priority: 100}\n",
         "scheduler.default_priority 100 must be an integer from 1 to 99"),
        ("resource_pools:\n  - pool_name: a.b\n", "pool 'a.b': the name must be letters, digits"),
        ("resource_pools:\n  - description: x\n", "resource_pools[0] needs a `pool_name`; add one"),
        ("pools: []\n", "needs a non-empty `resource_pools:` list"),
        ("resource_pools: [\n", "is not YAML"),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_naming_the_file_the_pool_and_the_fix(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as caught:
        read_pools_file(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="pools.yaml: cannot read it"):
        read_pools_file(tmp_path / "pools.yaml")
