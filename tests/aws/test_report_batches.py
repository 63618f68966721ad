"""`POST /trials/{id}/reports`: the batches the harness's report sender makes, over real HTTP to the Chalice
app on a moto stack with a live run (the `api` fixture of tests/aws/conftest.py). A batch is applied in
its order, a retried batch changes nothing, and a batch with one bad report is refused whole."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.aws


def _post(api, body: object) -> tuple[int, str]:
    answer = api.call("POST", f"/trials/{api.trial_id}/reports", "run", json.dumps(body).encode())
    return answer.status_code, answer.json().get("message", "")


def _metrics(api, group: str) -> list[tuple[int, dict]]:
    page = api.http.get(f"/trials/{api.trial_id}/metrics", params={"group": group}).json()
    return [(row["steps_completed"], row["metrics"]) for row in page["metrics"]]


def _trial(api) -> dict:
    return api.http.get(f"/trials/{api.trial_id}").json()["trial"]


BATCH = {
    "reports": [
        {"kind": "metrics", "group": "training", "steps_completed": 10, "metrics": {"loss": 0.9}},
        {"kind": "progress", "progress": 0.1},
        {"kind": "metrics", "group": "training", "steps_completed": 20, "metrics": {"loss": 0.7}},
        {"kind": "metrics", "group": "validation", "steps_completed": 20, "metrics": {"accuracy": 0.5}},
        {"kind": "metrics", "group": "inference", "steps_completed": 20, "metrics": {"latency": 3}},
        {"kind": "progress", "progress": 0.2},
    ]
}


def test_a_batch_is_stored_as_its_reports_would_be_one_by_one_and_a_retry_changes_nothing(api):
    assert _post(api, BATCH) == (200, "")

    assert _metrics(api, "training") == [(10, {"loss": 0.9}), (20, {"loss": 0.7})]
    assert _metrics(api, "validation") == [(20, {"accuracy": 0.5})]
    assert _metrics(api, "inference") == [(20, {"latency": 3})]
    trial = _trial(api)
    assert trial["total_batches"] == 20 and trial["progress"] == 0.2

    assert _post(api, BATCH) == (200, "")  # at least once: the sender retries a batch it got no answer to
    assert _metrics(api, "training") == [(10, {"loss": 0.9}), (20, {"loss": 0.7})]
    assert _metrics(api, "validation") == [(20, {"accuracy": 0.5})]
    assert _trial(api)["total_batches"] == 20


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (
            {"kind": "metrics", "group": "a.b", "steps_completed": 30, "metrics": {}},
            "reports[1].group: metric group 'a.b' contains '.'",
        ),
        (
            {"kind": "weather", "progress": 0.5},
            "reports.1: Input tag 'weather' found using 'kind' does not match",
        ),
        (
            {"kind": "progress", "progress": 1.5},
            "reports.1.progress.progress: Input should be less than or equal to 1",
        ),
        (
            {"kind": "metrics", "group": "training", "steps_completed": 10**40, "metrics": {}},
            "reports[1].steps_completed: 1000000000…000000 (41 digits) has more than 38 digits",
        ),
    ],
)
def test_a_batch_with_one_bad_report_is_a_400_naming_it_and_stores_none_of_it(api, bad, words):
    good = {"kind": "metrics", "group": "training", "steps_completed": 40, "metrics": {"loss": 0.1}}
    before = _metrics(api, "training")

    status, message = _post(api, {"reports": [good, bad]})

    assert status == 400 and words in message, message
    assert _metrics(api, "training") == before


def test_an_empty_or_oversized_batch_is_a_400(api):
    assert _post(api, {"reports": []})[0] == 400
    many = [{"kind": "progress", "progress": 0.5}] * 1001
    status, message = _post(api, {"reports": many})
    assert status == 400 and "at most 1000 items" in message
