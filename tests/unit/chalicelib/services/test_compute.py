"""The compute backend port: the local agents' backend, and the recording twin driven by the scheduler
the way an EC2, Batch or SageMaker backend would be."""

from __future__ import annotations

import pytest

from chalicelib.domain import keys
from chalicelib.domain.run_records import Run
from chalicelib.memory import RecordingCompute, memory_ports
from chalicelib.services import runs, scheduler
from chalicelib.services.agent_store import Host
from chalicelib.services.ports import Demand
from stratus.contract import messages


def _request(run_id, slots, token=None, queued_at="2026-01-01T00:00:00.000Z"):
    """A slot request as the scheduler queues it (trial and attempt from the run id)."""
    trial_id, _ = keys.parse_run_id(run_id)
    return Run(
        run_id=run_id,
        trial_id=trial_id,
        experiment_id=1,
        pool="default",
        slots=slots,
        priority=42,
        state="PENDING",
        slot_token=token or f"slots-{run_id}",
        queued_at=queued_at,
    )


@pytest.fixture
def recorded():
    return memory_ports(compute=RecordingCompute)


def test_the_local_backends_hosts_are_the_agents_that_heartbeat(ports):
    runs.heartbeat(ports, "b", "default", 2, [])
    ports.clock.advance(ports.settings.agent_timeout_s)
    runs.heartbeat(ports, "a", "default", 1, [])
    runs.heartbeat(ports, "c", "gpu", 8, [])
    assert ports.compute.hosts("default") == [Host("a", 1), Host("b", 2)]
    ports.clock.advance(1)
    assert ports.compute.hosts("default") == [Host("a", 1)]  # b is silent past the timeout


def test_a_local_launch_is_handed_out_at_the_agents_next_heartbeat(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    run_id = flow.request_slots(trial_id)
    assert ports.compute.launch(run_id, "t").state == "LAUNCHING"
    assert ports.compute.launch(run_id, "t") is None  # launched already
    assert [s["run_id"] for s in runs.heartbeat(ports, "agent-1", "default", 1, [])["launch"]] == [run_id]


def test_the_scheduler_grants_on_the_backends_hosts_and_asks_for_what_it_needs(recorded):
    ports = recorded
    ports.compute.add_host("default", "i-1", 2)
    for run_id, slots in (("1.1", 2), ("2.1", 2)):
        ports.runs.put_request(_request(run_id, slots, queued_at=f"2026-01-01T00:00:0{run_id[0]}.000Z"))
    assert scheduler.schedule_pool(ports, "default") == [("1.1", "i-1")]
    assert ports.compute.demands == {"default": [Demand(blocked=(2,))]}  # 2.1 read and not placed
    runs.handle_launch(
        ports, messages.Launch(token="launch-1.1", run_id="1.1", trial_id=1, experiment_id=1, agent_id="i-1")
    )
    assert ports.compute.launched == ["1.1"]

    ports.compute.remove_host("default", "i-1")  # an interrupted instance
    ports.compute.add_host("default", "i-2", 2)
    assert scheduler.schedule_pool(ports, "default") == [("2.1", "i-2")]
    assert ports.runs.get("1.1").exit_code == runs.AGENT_LOST_EXIT_CODE
    assert ports.compute.stopped == ["1.1"]
    assert ports.workflows.answers["launch-1.1"]["exit_code"] == runs.AGENT_LOST_EXIT_CODE
    assert len(ports.compute.demands["default"]) == 1  # everything placed: nothing more asked for


def test_a_grant_whose_workflow_ended_is_stopped(recorded):
    ports = recorded
    ports.compute.add_host("default", "i-1", 1)
    ports.runs.put_request(_request("1.1", 1, token="gone"))
    ports.workflows.end("gone")
    assert scheduler.schedule_pool(ports, "default") == []
    assert ports.compute.stopped == ["1.1"]
    assert ports.compute.demands == {}  # it was placed: no demand, though its grant then failed
