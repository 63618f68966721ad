"""`det job list` against the fake API of tests/unit/det/fakes.py: Determined's columns, the API's order."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest


def _job(position: int, job_id: int, **fields: Any) -> dict[str, Any]:
    return {
        "position": position,
        "id": str(job_id),
        "type": "EXPERIMENT",
        "name": f"exp-{job_id}",
        "priority": 42,
        "submitted": "2024-05-01T12:00:00+00:00",
        "slots_acquired": 0,
        "slots_needed": 1,
        "status": "QUEUED",
        "user": "alice",
        "resource_pool": "default",
        **fields,
    }


def _seed(api) -> None:
    api.jobs = [
        _job(1, 4, name="urgent", priority=10, slots_needed=2),
        _job(2, 3, name="mnist", slots_acquired=2, slots_needed=4, status="SCHEDULED", user="bob"),
        _job(1, 9, resource_pool="gpu"),
    ]


def test_job_list_shows_determined_columns_in_scheduling_order(api, table_rows) -> None:
    _seed(api)

    result = api.run("job", "list")

    assert result.code == 0, result.err
    rows = table_rows(result.out)
    assert rows[0] == [
        "#",
        "ID",
        "Type",
        "Job Name",
        "Priority",
        "Submitted",
        "Slots (acquired/needed)",
        "State",
        "User",
    ]
    assert [r[:5] + r[6:] for r in rows[1:]] == [
        ["1", "4", "EXPERIMENT", "urgent", "10", "0/2", "QUEUED", "alice"],
        ["2", "3", "EXPERIMENT", "mnist", "42", "2/4", "SCHEDULED", "bob"],
    ]
    assert rows[1][5].startswith("2024-05-01")
    assert api.requests[-1][2] == {}  # the API picks the default pool


def test_why_a_jobs_trials_wait_is_printed_under_the_table_while_it_needs_more_slots(api) -> None:
    api.jobs = [
        _job(1, 4, reason="needs 2 slots on one agent; the most free on an agent is 1", slots_needed=2),
        _job(2, 3, slots_acquired=1, slots_needed=2, status="SCHEDULED",
             reason="needs 1 slot; its experiment may hold 1 at once (resources.max_slots)"),
        _job(3, 5, slots_acquired=2, slots_needed=2, status="SCHEDULED", reason="an old reason"),
    ]  # fmt: skip
    lines = api.run("job", "list").out.splitlines()
    assert "job 4 waits: needs 2 slots on one agent; the most free on an agent is 1" in lines
    assert "job 3 waits: needs 1 slot; its experiment may hold 1 at once (resources.max_slots)" in lines
    assert not any(line.startswith("job 5 waits") for line in lines)  # it holds all it needs


def test_job_ls_of_a_pool_as_json_and_csv(api, table_rows) -> None:
    _seed(api)

    raw = api.run("j", "ls", "--resource-pool", "gpu", "--json")
    csv = api.run("job", "ls", "--csv")

    assert api.requests[0][2] == {"resource_pool": "gpu"}
    assert [j["id"] for j in json.loads(raw.out)["jobs"]] == ["9"]
    lines = csv.out.splitlines()
    assert lines[0] == "#,ID,Type,Job Name,Priority,Submitted,Slots (acquired/needed),State,User"
    assert lines[2].startswith("2,3,EXPERIMENT,mnist,42,") and lines[2].endswith(",2/4,SCHEDULED,bob")


def test_an_empty_queue_prints_the_headers(api, table_rows) -> None:
    result = api.run("job")

    assert result.code == 0
    assert table_rows(result.out) == [
        ["#", "ID", "Type", "Job Name", "Priority", "Submitted", "Slots (acquired/needed)", "State", "User"]
    ]


def _updated(job_id: str, **fields: Any) -> dict[str, Any]:
    base = {"id": job_id, "name": f"exp-{job_id}", "state": "ACTIVE", "resource_pool": "default"}
    return {**base, "priority": 42, "weight": 1.0, "queue_position": 1.0, **fields}


def test_job_update_sends_one_change_and_prints_the_job(api) -> None:
    api.job_update = httpx.Response(200, json={"jobs": [_updated("3", priority=10)], "notes": []})

    result = api.run("job", "update", "3", "--priority", "10")

    assert result.code == 0, result.err
    assert api.bodies("PATCH", "/jobs/3") == [{"priority": 10}]
    assert result.out.strip() == "Updated job 3 (exp-3): priority 10, weight 1, resource pool default"


def test_job_update_prints_a_priority_taken_to_move(api) -> None:
    note = "job 4 took the priority of job 3 (10, was 42) to move ahead of it"
    api.job_update = httpx.Response(200, json={"jobs": [_updated("4", priority=10)], "notes": [note]})

    result = api.run("job", "update", "4", "--ahead-of", "3")

    assert api.bodies("PATCH", "/jobs/4") == [{"ahead_of": "3"}]
    assert result.out.splitlines()[-1] == f"Note: {note}"


def test_job_update_takes_exactly_one_change(api, capsys) -> None:
    both = api.run("job", "update", "3", "--priority", "1", "--weight", "2")
    assert both.code == 2 and "not allowed with argument" in capsys.readouterr().err
    none = api.run("job", "update", "3")
    assert none.code == 2 and "one of the arguments" in capsys.readouterr().err
    assert api.calls("PATCH") == []


def test_job_update_shows_the_apis_refusal(api) -> None:
    message = "job 3 is in pool 'shared', whose scheduler is fair_share: use --weight instead of --priority 5"
    api.job_update = httpx.Response(400, json={"error": "BadRequest", "message": message})

    result = api.run("job", "update", "3", "--priority", "5")

    assert result.code != 0 and message in result.err


def test_job_update_batch_sends_every_update_in_order(api) -> None:
    jobs = [_updated("3", priority=1), _updated("4", resource_pool="compute"), _updated("5")]
    api.job_update = httpx.Response(200, json={"jobs": jobs, "notes": []})

    result = api.run(
        "job", "update-batch", "3.priority=1", "4.resource-pool=compute", "5.ahead-of=3", "6.weight=2.5"
    )

    assert result.code == 0, result.err
    assert api.bodies("POST", "/job-queue") == [
        {
            "updates": [
                {"job_id": "3", "priority": 1},
                {"job_id": "4", "resource_pool": "compute"},
                {"job_id": "5", "ahead_of": "3"},
                {"job_id": "6", "weight": 2.5},
            ]
        }
    ]
    assert len(result.out.splitlines()) == 3


@pytest.mark.parametrize(
    ("update", "said"),
    [
        ("3priority=1", "is not JOB_ID.KEY=VALUE"),
        ("3.priority", "is not JOB_ID.KEY=VALUE"),
        ("3.colour=red", "use one of priority, weight, resource-pool, ahead-of, behind-of"),
        ("3.priority=high", "priority must be an integer"),
        ("3.weight=heavy", "weight must be a number"),
    ],
)
def test_job_update_batch_refuses_a_malformed_update_before_sending_anything(api, update, said) -> None:
    result = api.run("job", "update-batch", "4.priority=2", update)

    assert result.code != 0 and said in result.err and repr(update) in result.err
    assert api.calls("POST") == []


def test_resource_pool_list_in_determined_columns(api, table_rows) -> None:
    pool = {
        "name": "default",
        "description": "",
        "type": "static",
        "scheduler_type": "priority",
        "preemption": True,
        "default_priority": 42,
        "num_agents": 2,
        "max_agents": None,
        "slots_per_agent": 2,
        "slots_available": 4,
        "slots_used": 1,
        "queued_jobs": 3,
        "scheduled_jobs": 1,
    }
    shared = {**pool, "name": "shared", "scheduler_type": "fair_share", "preemption": False, "num_agents": 0}
    api.cluster["resource-pools"] = [pool, shared]

    rows = table_rows(api.run("rp", "list").out)
    raw = api.run("resource-pool", "ls", "--json")

    assert rows[0] == [
        "Name",
        "Description",
        "Type",
        "Scheduler Type",
        "Preemption",
        "Default Priority",
        "Agents",
        "Max Agents",
        "Slots per Agent",
        "Slots Used",
        "Slots Available",
        "Queued Jobs",
    ]
    assert rows[1] == ["default", "", "static", "priority", "True", "42", "2", "", "2", "1", "4", "3"]
    assert rows[2] == ["shared", "", "static", "fair_share", "False", "", "0", "", "2", "1", "4", "3"]
    assert json.loads(raw.out) == {"resource_pools": [pool, shared]}


def test_agent_and_slot_lists_in_determined_columns(api, table_rows) -> None:
    api.cluster["agents"] = [
        {
            "id": "agent-1",
            "resource_pool": "default",
            "slots": 2,
            "slots_used": 1,
            "containers": 1,
            "last_heartbeat": "2026-01-01T00:00:00.000Z",
            "alive": True,
            "draining": False,
        },
    ]
    api.cluster["slots"] = [
        {
            "agent_id": "agent-1",
            "resource_pool": "default",
            "slot_id": 0,
            "enabled": True,
            "run_id": "7.1",
            "trial_id": 7,
            "experiment_id": 3,
        },
        {
            "agent_id": "agent-1",
            "resource_pool": "default",
            "slot_id": 1,
            "enabled": True,
            "run_id": None,
            "trial_id": None,
            "experiment_id": None,
        },
    ]

    agents = table_rows(api.run("agent", "list").out)
    slots = table_rows(api.run("slot", "list").out)
    csv = api.run("a", "ls", "--csv").out.splitlines()

    assert agents[0] == [
        "ID",
        "Last Heartbeat",
        "Slots",
        "Slots Used",
        "Containers",
        "Resource Pool",
        "Enabled",
        "Draining",
    ]
    assert agents[1][0] == "agent-1" and agents[1][2:] == ["2", "1", "1", "default", "True", "False"]
    assert slots[0] == ["Agent ID", "Resource Pool", "Slot ID", "Enabled", "Allocation ID", "Task Name"]
    assert slots[1] == ["agent-1", "default", "0", "True", "7.1", "Trial 7 (Experiment 3)"]
    assert slots[2] == ["agent-1", "default", "1", "True", "", ""]
    assert csv[0] == "ID,Last Heartbeat,Slots,Slots Used,Containers,Resource Pool,Enabled,Draining"
    assert json.loads(api.run("s", "ls", "--json").out)["slots"][0]["trial_id"] == 7
