"""The environment's flavour and image by pool: a GPU pool's runs get the GPU variables; an image that an
agent on a machine cannot use is named at the head of the trial's log, once per launch."""

from __future__ import annotations

import pytest

from chalicelib.memory import MemoryPorts, memory_ports, memory_settings
from chalicelib.services import runs
from stratus.contract.pools import DEFAULT_POOL, PoolSpec, Provider

ENVIRONMENT = {
    "image": {"cpu": "example/cpu:1", "cuda": "example/cuda:1"},
    "environment_variables": {"cpu": ["FLAVOUR=cpu"], "cuda": ["FLAVOUR=cuda"]},
}
GPU_POOL = PoolSpec(
    DEFAULT_POOL,
    backend="ec2",
    slots_per_agent=1,
    max_agents=2,
    provider=Provider(instance_types=("g5.xlarge",), gpus=1, max_instances=2, group="memory-default"),
)


@pytest.fixture
def ports() -> MemoryPorts:
    stack = memory_ports(settings=memory_settings(pools=(GPU_POOL,)))
    stack.autoscaling.add_group("memory-default", max_size=2)
    return stack


def test_a_gpu_pool_runs_the_gpu_flavour_and_says_its_image_is_not_used(ports, flow) -> None:
    (trial_id,) = flow.trial_ids(flow.submit(environment=ENVIRONMENT).id)
    spec = flow.place(trial_id, agent="i-1")
    assert spec["environment"]["FLAVOUR"] == "cuda"
    (line,) = [logged.message for logged in ports.logs.streams[trial_id]]
    assert "environment.image 'example/cuda:1' is not used on pool 'default' (backend ec2)" in line
    assert "Deep Learning AMI" in line


def test_a_cpu_pool_runs_the_cpu_flavour(flow_on) -> None:
    flow = flow_on(memory_ports())
    (trial_id,) = flow.trial_ids(flow.submit(environment=ENVIRONMENT).id)
    spec = flow.place(trial_id)
    assert spec["environment"]["FLAVOUR"] == "cpu"
    (line,) = [logged.message for logged in flow.ports.logs.streams[trial_id]]
    assert "'example/cpu:1' is not used on pool 'default' (backend local)" in line
    runs.heartbeat(flow.ports, "agent-1", DEFAULT_POOL, 1, [])
    assert len(flow.ports.logs.streams[trial_id]) == 1  # said once, not at every heartbeat


def test_without_an_image_nothing_is_said(flow_on) -> None:
    flow = flow_on(memory_ports())
    (trial_id,) = flow.trial_ids(flow.submit().id)
    flow.place(trial_id)
    assert flow.ports.logs.streams.get(trial_id, []) == []
