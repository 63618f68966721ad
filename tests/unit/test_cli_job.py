"""`det job list` against the fake API of tests/unit/conftest.py: Determined's columns, the API's order."""

from __future__ import annotations

import json
from typing import Any


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
        "Status",
        "User",
    ]
    assert [r[:5] + r[6:] for r in rows[1:]] == [
        ["1", "4", "EXPERIMENT", "urgent", "10", "0/2", "QUEUED", "alice"],
        ["2", "3", "EXPERIMENT", "mnist", "42", "2/4", "SCHEDULED", "bob"],
    ]
    assert rows[1][5].startswith("2024-05-01")
    assert api.requests[-1][2] == {}  # the API picks the default pool


def test_job_ls_of_a_pool_as_json_and_csv(api, table_rows) -> None:
    _seed(api)

    raw = api.run("j", "ls", "--resource-pool", "gpu", "--json")
    csv = api.run("job", "ls", "--csv")

    assert api.requests[0][2] == {"resource_pool": "gpu"}
    assert [j["id"] for j in json.loads(raw.out)["jobs"]] == ["9"]
    lines = csv.out.splitlines()
    assert lines[0] == "#,ID,Type,Job Name,Priority,Submitted,Slots (acquired/needed),Status,User"
    assert lines[2].startswith("2,3,EXPERIMENT,mnist,42,") and lines[2].endswith(",2/4,SCHEDULED,bob")


def test_an_empty_queue_prints_the_headers(api, table_rows) -> None:
    result = api.run("job")

    assert result.code == 0
    assert table_rows(result.out) == [
        ["#", "ID", "Type", "Job Name", "Priority", "Submitted", "Slots (acquired/needed)", "Status", "User"]
    ]
