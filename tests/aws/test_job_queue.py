"""The job queue against moto: the stores' job updates (conditional on the experiment's version; only live
runs, only a pending one moves pools; the agents with their last heartbeat), on the in-memory twin too;
and a `det job update` that changes what the next scheduling pass grants, through the real queues."""

from __future__ import annotations

import json

import pytest

from chalicelib.domain.records import Experiment
from chalicelib.domain.run_records import Run
from chalicelib.services import jobs, runs
from chalicelib.services.job_updates import JobUpdate, update_jobs

pytestmark = pytest.mark.aws


def _run(run_id: str, experiment_id: int = 1) -> Run:
    return Run(
        run_id=run_id,
        trial_id=int(run_id.split(".")[0]),
        experiment_id=experiment_id,
        pool="default",
        slots=1,
        state="PENDING",
        priority=42,
        weight=1.5,
        queue_position=1767225600.25,
        slot_token="token",
        queued_at="2026-01-01T00:00:00.000Z",
    )


def test_an_experiments_job_fields_are_written_only_at_the_version_read(ports):
    ports.experiments.create(Experiment(id=1, state="ACTIVE", config={}, queue_position=1767225600.5))
    assert ports.experiments.get(1).queue_position == 1767225600.5
    updated = ports.experiments.update_versioned(1, {"priority": 7, "weight": 2.5}, expected_version=0)
    assert (updated.priority, updated.weight, updated.version) == (7, 2.5, 1)
    assert (
        ports.experiments.update_versioned(1, {"priority": 9}, expected_version=0) is None
    )  # a stale writer
    assert ports.experiments.update_versioned(99, {"priority": 9}, expected_version=0) is None
    assert ports.experiments.get(1).priority == 7


def test_a_runs_job_fields_change_while_it_lives_and_only_a_pending_one_moves_pools(ports):
    assert ports.runs.put_request(_run("1.1"))
    assert ports.runs.put_request(_run("2.1"))
    assert (ports.runs.get("1.1").weight, ports.runs.get("1.1").queue_position) == (1.5, 1767225600.25)
    ports.runs.assign("2.1", "agent-1")
    moved = {"priority": 5, "pool": "gpu", "pending_pool": "gpu"}
    assert ports.runs.update_job("1.1", moved, only_pending=True).pool == "gpu"
    assert [r.run_id for r in ports.runs.pending("gpu")] == ["1.1"] and ports.runs.pending("default") == []
    assert ports.runs.update_job("2.1", moved, only_pending=True) is None  # holds slots: stays
    assert ports.runs.update_job("2.1", {"priority": 5}).priority == 5
    assert [r.run_id for r in ports.runs.allocated("default")] == ["2.1"]
    ports.runs.exit("2.1", 0, "done")
    assert ports.runs.update_job("2.1", {"priority": 6}) is None  # ended: left as it was
    assert ports.runs.update_job("9.9", {"priority": 6}) is None


def test_every_agent_is_listed_with_its_last_heartbeat(ports):
    assert ports.agents.every() == []
    ports.agents.heartbeat("b-agent", "gpu", 4)
    ports.agents.heartbeat("a-agent", "default", 2)
    agents = ports.agents.every()
    assert [(a.agent_id, a.pool, a.slots) for a in agents] == [
        ("a-agent", "default", 2),
        ("b-agent", "gpu", 4),
    ]
    assert all(a.last_seen > 0 for a in agents)


def test_a_raised_priority_is_granted_first_by_the_next_pass(stack):
    p = stack.ports
    first = stack.submit_experiment(name="first")
    second = stack.submit_experiment(name="second")
    stack.pump_until(lambda: len(jobs.list_jobs(p, "default")) == 2)
    assert [j.job_id for j in jobs.list_jobs(p, "default")] == [str(first.id), str(second.id)]

    update_jobs(p, [JobUpdate(str(second.id), priority=10)])

    assert [(j.job_id, j.priority) for j in jobs.list_jobs(p, "default")] == [
        (str(second.id), 10),
        (str(first.id), 42),
    ]
    runs.heartbeat(p, "agent-1", "default", 1, [])
    stack.pump_until(lambda: p.runs.allocated("default"))
    (granted,) = p.runs.allocated("default")
    assert granted.experiment_id == second.id and granted.priority == 10
    assert [r.experiment_id for r in p.runs.pending("default")] == [first.id]


@pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode")
def test_the_routes_update_jobs_and_list_the_cluster(stack):
    from chalice.test import Client

    import app

    p = stack.ports
    first = stack.submit_experiment(name="first")
    second = stack.submit_experiment(name="second")
    stack.pump_until(lambda: len(jobs.list_jobs(p, "default")) == 2)
    runs.heartbeat(p, "agent-1", "default", 1, [])
    stack.pump_until(lambda: p.runs.allocated("default"))
    headers = {"Content-Type": "application/json"}

    with Client(app.app) as client:
        moved = client.http.request(
            "PATCH", f"/jobs/{second.id}", body=json.dumps({"ahead_of": str(first.id)}), headers=headers
        )
        unknown = client.http.request("PATCH", "/jobs/999", body=json.dumps({"priority": 1}), headers=headers)
        batch = client.http.post(
            "/job-queue",
            body=json.dumps(
                {"updates": [{"job_id": str(first.id), "priority": 3}, {"job_id": "1", "weight": 2}]}
            ),
            headers=headers,
        )
        pools = client.http.get("/resource-pools").json_body["resource_pools"]
        agents = client.http.get("/agents").json_body["agents"]
        slots = client.http.get("/slots").json_body["slots"]

    assert moved.status_code == 200, moved.body
    assert moved.json_body["jobs"][0]["id"] == str(second.id) and moved.json_body["notes"] == []
    assert (unknown.status_code, unknown.json_body["message"]) == (
        404,
        "job '999' not found; `det job list` shows the job ids",
    )
    assert batch.status_code == 400 and "use --priority instead of --weight 2" in batch.json_body["message"]
    assert p.experiments.get(first.id).priority is None  # the batch wrote nothing
    ((pool,),) = [pools]
    assert (pool["name"], pool["scheduler_type"], pool["preemption"], pool["default_priority"]) == (
        "default",
        "priority",
        True,
        42,
    )
    assert (pool["num_agents"], pool["slots_available"], pool["slots_used"], pool["queued_jobs"]) == (
        1,
        1,
        1,
        1,
    )
    assert [(a["id"], a["slots_used"], a["alive"]) for a in agents] == [("agent-1", 1, True)]
    ((slot,),) = [slots]
    assert (slot["agent_id"], slot["slot_id"], slot["run_id"]) == (
        "agent-1",
        0,
        p.runs.allocated("default")[0].run_id,
    )
