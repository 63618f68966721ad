"""An `ec2` pool on the in-memory twin: the scheduler grows its Auto Scaling group for what waits, the
sweep lets idle instances go, and an instance about to be reclaimed drains (its runs preempted, nothing
more placed on it); a run lost with a reclaimed instance goes back to the queue without a restart."""

from __future__ import annotations

import pytest

from chalicelib.domain.states import RunState
from chalicelib.handlers.events import handle_events_message
from chalicelib.memory import MemoryPorts, memory_ports, memory_settings
from chalicelib.services import draining, runs, scheduler
from chalicelib.services.agent_store import Host
from stratus.contract import messages
from stratus.contract.pools import DEFAULT_POOL, PoolSpec, Provider

GROUP = "memory-default"
EC2_POOL = PoolSpec(
    DEFAULT_POOL,
    backend="ec2",
    slots_per_agent=1,
    max_agents=3,
    provider=Provider(
        instance_types=("g5.xlarge",), max_instances=3, max_idle_agent_period_s=600, group=GROUP
    ),
)


@pytest.fixture
def ports() -> MemoryPorts:
    stack = memory_ports(settings=memory_settings(pools=(EC2_POOL,)))
    stack.autoscaling.add_group(GROUP, min_size=0, max_size=3)
    return stack


def _join(ports: MemoryPorts, *running: str) -> None:
    """Every instance of the group heartbeats as its agent (agent id = instance id)."""
    for instance_id in ports.autoscaling.instance_ids(GROUP):
        held = [r for r in running if r.startswith(instance_id + ":")]
        runs.heartbeat(ports, instance_id, DEFAULT_POOL, 1, [r.split(":", 1)[1] for r in held])


def test_the_group_grows_from_zero_for_what_waits_and_no_more(ports, flow) -> None:
    experiment = flow.submit(flow.TWO_AT_ONCE)
    first, second = flow.trial_ids(experiment.id)[:2]
    flow.request_slots(first)
    flow.request_slots(second)
    assert ports.autoscaling.groups[GROUP].desired == 2  # two one-slot requests, one-slot instances
    calls = len(ports.autoscaling.calls)
    scheduler.schedule_pool(ports, DEFAULT_POOL)
    assert ports.autoscaling.groups[GROUP].desired == 2  # the instances are coming: not asked again
    assert [c for c in ports.autoscaling.calls[calls:] if c[0] == "set_desired"] == []
    _join(ports)
    granted = scheduler.schedule_pool(ports, DEFAULT_POOL)
    assert sorted(agent for _, agent in granted) == ports.autoscaling.instance_ids(GROUP)
    calls = len(ports.autoscaling.calls)
    scheduler.schedule_pool(ports, DEFAULT_POOL)
    assert ports.autoscaling.calls[calls:] == []  # everything placed: no AWS call at all


def test_idle_instances_go_after_the_idle_period_and_the_group_returns_to_zero(ports, flow) -> None:
    (trial_id,) = flow.trial_ids(flow.submit().id)
    run_id = flow.request_slots(trial_id)
    _join(ports)
    (instance,) = ports.autoscaling.instance_ids(GROUP)
    assert scheduler.schedule_pool(ports, DEFAULT_POOL) == [(run_id, instance)]
    flow.launch(run_id)
    _join(ports, f"{instance}:{run_id}")
    runs.exited(ports, instance, run_id, 0, "done")
    ports.clock.advance(30)
    _join(ports)  # idle from here
    scheduler.handle_message(ports, messages.Sweep(DEFAULT_POOL))
    assert ports.autoscaling.instance_ids(GROUP) == [instance]  # not idle long enough
    ports.clock.advance(601)
    _join(ports)
    scheduler.handle_message(ports, messages.Sweep(DEFAULT_POOL))
    assert ports.autoscaling.instance_ids(GROUP) == [] and ports.autoscaling.groups[GROUP].desired == 0
    assert ports.agents.get(instance).draining  # nothing is placed on it while it goes


def test_a_sweep_for_every_pool_fans_out_one_per_pool(ports) -> None:
    scheduler.handle_message(ports, messages.Sweep("*", at="2026-01-01T00:00:00Z"))
    assert [m.body for m in ports.queues.scheduler] == [
        messages.Sweep(DEFAULT_POOL, "2026-01-01T00:00:00Z").to_body()
    ]


def _running_on_an_instance(ports: MemoryPorts, flow) -> tuple[int, str, str]:
    """A trial's run launched on the group's one instance: the trial, the run, the instance."""
    (trial_id,) = flow.trial_ids(flow.submit().id)
    run_id = flow.request_slots(trial_id)
    _join(ports)
    (instance,) = ports.autoscaling.instance_ids(GROUP)
    scheduler.schedule_pool(ports, DEFAULT_POOL)
    flow.launch(run_id)
    _join(ports, f"{instance}:{run_id}")
    return trial_id, run_id, instance


def test_a_spot_warning_drains_the_agent_and_preempts_its_run(ports, flow) -> None:
    trial_id, run_id, instance = _running_on_an_instance(ports, flow)
    warning = {
        "source": "aws.ec2",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "time": "2026-01-01T00:01:00Z",
        "detail": {"instance-id": instance, "instance-action": "terminate"},
    }
    for _ in range(2):  # SQS delivers at least once
        handle_events_message(ports, messages.ComputeEvent(warning))
    assert ports.runs.get(run_id).preempt
    assert ports.compute.hosts(DEFAULT_POOL) == [Host(instance, 1, accepting=False, draining=True)]
    answer = runs.heartbeat(ports, instance, DEFAULT_POOL, 1, [run_id])
    assert answer["preempt"] == [run_id]  # the agent passes it on: the trial checkpoints and exits

    runs.exited(ports, instance, run_id, 0, "preempted")
    assert flow.exit_answer(run_id)["requeue"] is True
    flow.request_slots(trial_id, attempt=2)  # the workflow requeues it
    assert ("terminate", instance, False) in ports.autoscaling.calls  # replaced before its reclaim
    (replacement,) = ports.autoscaling.instance_ids(GROUP)
    assert replacement != instance and ports.autoscaling.groups[GROUP].desired == 1


def test_a_run_lost_with_a_reclaimed_instance_is_requeued_not_restarted(ports, flow) -> None:
    (trial_id,) = flow.trial_ids(flow.submit().id)
    run_id = flow.request_slots(trial_id)
    _join(ports)
    (instance,) = ports.autoscaling.instance_ids(GROUP)
    scheduler.schedule_pool(ports, DEFAULT_POOL)
    flow.launch(run_id)
    runs.started(ports, instance, run_id, pid=4242)
    _join(ports, f"{instance}:{run_id}")
    draining.drain_agent(ports, instance, "test: reclaimed")
    ports.autoscaling.lose(instance)  # gone before the trial could exit; the group replaces it
    ports.clock.advance(ports.settings.agent_timeout_s + 1)
    scheduler.schedule_pool(ports, DEFAULT_POOL)
    run = ports.runs.get(run_id)
    assert run.state == RunState.EXITED and "reclaimed" in (run.reason or "")
    answer = ports.workflows.answers[f"launch-{run_id}"]
    assert answer["requeue"] is True


class FakeQuotas:
    def __init__(self, value: float | None) -> None:
        self.value = value
        self.asked: list[str] = []

    def vcpus(self, instance_type: str) -> int | None:
        return {"g5.xlarge": 4}.get(instance_type)

    def quota(self, code: str) -> float | None:
        self.asked.append(code)
        return self.value


@pytest.mark.parametrize(("quota", "desired"), [(8.0, 2), (4.0, 1), (None, 3)])
def test_the_accounts_vcpu_quota_caps_the_group(flow, quota, desired) -> None:
    from chalicelib.compute.ec2 import Ec2Scaler
    from chalicelib.services.ports import Demand

    ports = flow.ports
    quotas = FakeQuotas(quota)
    scaler = Ec2Scaler(ports.autoscaling, ports.agents, ports.runs, ports.clock, 30.0, quotas)
    held = scaler.set_demand(EC2_POOL, Demand(blocked=(1, 1, 1)))  # three one-slot requests, 4 vCPUs each
    assert ports.autoscaling.groups[GROUP].desired == desired  # 8 vCPUs hold 2; unknown: not held back
    assert quotas.asked == ["L-DB2E81BA"]  # on-demand G and VT
    if quota is None:
        assert held is None
    else:
        assert held is not None and held.startswith(
            f"pool default stays at {desired} instance(s) of g5.xlarge"
        )
        assert "the account's quota L-DB2E81BA (" in held and f"of {quota:g} vCPUs holds no more" in held


def test_requests_the_quota_keeps_waiting_say_so_in_det_job_list(flow_on) -> None:
    """The scheduler adds the backend's reason to the wait reasons of what it could not place."""
    from chalicelib.services import jobs

    ports = memory_ports(settings=memory_settings(pools=(EC2_POOL,)), quotas=FakeQuotas(4.0))
    ports.autoscaling.add_group(GROUP, min_size=0, max_size=3)
    flow = flow_on(ports)
    experiment = flow.submit(flow.TWO_AT_ONCE)
    first, second = flow.trial_ids(experiment.id)[:2]
    flow.request_slots(first)
    waiting = flow.request_slots(second)
    assert ports.autoscaling.groups[GROUP].desired == 1  # 4 vCPUs: one g5.xlarge
    _join(ports)
    scheduler.schedule_pool(ports, DEFAULT_POOL)
    reason = ports.runs.get(waiting).wait_reason
    assert reason is not None and "the account's quota L-DB2E81BA" in reason and "ask for more at" in reason
    (job,) = jobs.list_jobs(ports, DEFAULT_POOL)
    assert "L-DB2E81BA" in (job.reason or "")


def test_a_disabled_instance_is_replaced_for_its_moved_run_but_not_terminated(ports, flow) -> None:
    """`det agent disable` on an EC2 agent: its run moves to a new instance; the disabled one is not
    terminated early as a draining one (about to be reclaimed) is."""
    from chalicelib.services import cluster

    trial_id, run_id, instance = _running_on_an_instance(ports, flow)
    assert cluster.set_enabled(ports, instance, enabled=False).moved == [run_id]
    runs.exited(ports, instance, run_id, 0, "preempted")
    flow.request_slots(trial_id, attempt=2)
    assert ports.autoscaling.groups[GROUP].desired == 2  # a new instance for the moved run
    assert not [c for c in ports.autoscaling.calls if c[0] == "terminate"]
    assert instance in ports.autoscaling.instance_ids(GROUP)
