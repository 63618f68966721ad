"""Configured resource pools: read from their setting, a submission refused when its pool is not one or
its trials can never fit, and the pools, agents and slots as `det resource-pool | agent | slot list`
show them."""

from __future__ import annotations

import pytest

from chalicelib import config as cfg
from chalicelib.memory import MemoryPorts, memory_ports, memory_settings
from chalicelib.services import cluster, experiments, runs
from stratus.contract.errors import InvalidPoolError
from stratus.contract.pools import (
    DEFAULT_POOLS,
    PoolSpec,
    Provider,
    pools_from_json,
    pools_to_json,
    why_never_fits,
)

POOLS = (
    PoolSpec("default", slots_per_agent=2, max_agents=2),
    PoolSpec("gpu", scheduler="fair_share", slots_per_agent=4),
    PoolSpec("open"),
)


@pytest.fixture
def ports() -> MemoryPorts:
    return memory_ports(settings=memory_settings(pools=POOLS))


def test_pools_come_from_json_and_default_to_one_priority_pool_with_preemption():
    assert pools_from_json("") == DEFAULT_POOLS
    (default,) = DEFAULT_POOLS
    assert (default.name, default.scheduler, default.preemption, default.default_priority) == (
        "default",
        "priority",
        True,
        42,
    )
    pools = pools_from_json('[{"name": "a"}, {"name": "b", "scheduler": "fair_share", "max_agents": 3}]')
    assert [(p.name, p.scheduler, p.max_agents) for p in pools] == [
        ("a", "priority", None),
        ("b", "fair_share", 3),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not JSON"),
        ("[]", "must be a non-empty JSON list"),
        ('[{"name": "a"}, {"name": "a"}]', "a is configured twice"),
        ('[{"name": "a", "scheduler": "fifo"}]', "use one of priority, fair_share"),
        ('[{"name": "a", "slots": 2}]', "unknown fields ['slots']"),
        ('[{"name": "a", "default_priority": 0}]', "use 1 to 99"),
        ('[{"name": "a", "preemption": "yes"}]', "use true or false"),
        ('[{"name": "a", "max_agents": 0}]', "use a positive integer"),
        ('[{"scheduler": "priority"}]', "needs a non-empty string 'name'"),
    ],
)
def test_a_pools_setting_that_cannot_be_read_says_why(text, message):
    with pytest.raises(InvalidPoolError, match=message.replace("[", r"\[").replace("]", r"\]")):
        pools_from_json(text)


def test_a_request_fits_one_agent_or_whole_agents_up_to_the_pools_slots():
    pool = PoolSpec("p", slots_per_agent=4, max_agents=2)
    assert [why_never_fits(pool, n) is None for n in (1, 3, 4, 8)] == [True] * 4
    assert "not a multiple of it" in (why_never_fits(pool, 6) or "")
    assert "more than pool 'p' can ever offer (8 slots)" in (why_never_fits(pool, 12) or "")
    assert why_never_fits(PoolSpec("unknown shape"), 1000) is None


def _submit(flow, pool: str, slots: int, *, validate_only: bool = False):
    flow.ports.blobs.put(f"contexts/{flow.SHA}.tar.zst", b"ctx")
    config = {**flow.SINGLE, "resources": {"resource_pool": pool, "slots_per_trial": slots}}
    return experiments.create(flow.ports, config, flow.SHA, validate_only=validate_only)


def test_a_submission_to_a_pool_that_is_not_configured_is_refused(ports, flow):
    with pytest.raises(cfg.ConfigInvalidError) as raised:
        _submit(flow, "a100", 1)
    (problem,) = raised.value.problems
    assert problem.path == "resources.resource_pool"
    assert problem.message == (
        "resource pool 'a100' is not configured; use one of default, gpu, open (`det resource-pool list` shows them)"
    )
    assert ports.experiments.items == {}


@pytest.mark.parametrize(
    ("pool", "slots", "said"),
    [
        (
            "default",
            6,
            "slots_per_trial 6 is more than pool 'default' can ever offer (4 slots); the pool has 2 agents of 2 slots",
        ),
        ("default", 3, "not a multiple of it"),
        ("gpu", 6, "the pool has agents of 4 slots: lower slots_per_trial or use another pool"),
    ],
)
def test_a_submission_that_can_never_fit_is_refused(ports, flow, pool, slots, said):
    for validate_only in (True, False):
        with pytest.raises(cfg.ConfigInvalidError) as raised:
            _submit(flow, pool, slots, validate_only=validate_only)
        (problem,) = raised.value.problems
        assert problem.path == "resources.slots_per_trial" and said in problem.message


def test_submissions_that_may_fit_are_accepted(ports, flow):
    for pool, slots in (("default", 4), ("gpu", 8), ("open", 64)):
        created = _submit(flow, pool, slots).experiment
        assert created is not None and created.job_pool == pool
        assert created.queue_position == ports.clock.now() and created.priority is None


def test_pools_agents_and_slots_as_the_cluster_lists_show_them(ports, flow):
    runs.heartbeat(ports, "agent-1", "default", 2, [])
    runs.heartbeat(ports, "agent-2", "default", 2, [])
    runs.heartbeat(ports, "gpu-1", "gpu", 4, [])
    experiment = _submit(flow, "default", 1).experiment
    (trial_id,) = flow.trial_ids(experiment.id)
    run_id = flow.request_slots(trial_id)
    queued = _submit(flow, "default", 4).experiment
    (waiting,) = flow.trial_ids(queued.id)
    flow.request_slots(waiting)

    pools = {p.spec.name: p for p in cluster.list_pools(ports)}
    default = pools["default"]
    assert (default.agents, default.slots_total, default.slots_used) == (2, 4, 1)
    assert (default.queued_jobs, default.scheduled_jobs) == (1, 1)
    assert (pools["gpu"].agents, pools["gpu"].slots_total, pools["open"].agents) == (1, 4, 0)

    holder = ports.runs.get(run_id).agent_id
    agents = {a.agent_id: a for a in cluster.list_agents(ports)}
    assert sorted(agents) == ["agent-1", "agent-2", "gpu-1"]
    assert (agents[holder].slots_used, agents[holder].runs, agents[holder].alive) == (1, 1, True)
    assert agents[holder].last_heartbeat == ports.clock.now_iso()

    slots = cluster.list_slots(ports)
    assert len(slots) == 8
    held = [s for s in slots if s.run_id is not None]
    assert [(s.agent_id, s.slot_id, s.trial_id, s.experiment_id) for s in held] == [
        (holder, 0, trial_id, experiment.id)
    ]
    ports.clock.advance(ports.settings.agent_timeout_s + 1)
    assert not any(a.alive for a in cluster.list_agents(ports))
    assert not any(s.alive for s in cluster.list_slots(ports))


def test_the_pools_json_round_trips_and_carries_only_what_differs_from_the_defaults() -> None:
    """It travels in the functions' environment (4 KB with everything else): these ten pools take 1.9 KB
    (3.8 KB with every field, as before)."""
    pools = (
        PoolSpec(name="default"),
        PoolSpec(name="cpu", scheduler="fair_share", preemption=False, description="CPU jobs"),
        *(
            PoolSpec(
                name=f"gpu-{i}", backend="ec2", slots_per_agent=8, max_agents=4,
                provider=Provider(instance_types=("p4d.24xlarge", "p5.48xlarge"), min_instances=1,
                                  max_instances=4, spot=True, spot_max_price="12.50", gpus=8, group=f"lab-gpu-{i}"),
            )
            for i in range(8)
        ),
    )  # fmt: skip
    text = pools_to_json(pools)
    assert pools_from_json(text) == pools
    assert '{"name":"default"}' in text and "max_idle_agent_period_s" not in text  # defaults left out
    assert len(text) < 2000
