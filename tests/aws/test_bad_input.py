"""Inputs an outside tester sent that ended in a 500 (issue 11): each is now a 400 that names the field
and the limit, and changes nothing; over real HTTP to the Chalice app on a moto stack with live records
(the `api` fixture of tests/aws/conftest.py)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

pytestmark = pytest.mark.aws

HUGE = 10**40  # 41 digits: DynamoDB stores 38
BIG = 10**20  # storable, but beyond the 64 bits clients hold
TOO_MANY_DIGITS = (
    "1000000000…000000 (41 digits) has more than 38 digits; DynamoDB stores numbers of at most 38"
)
INT64 = "Input should be less than or equal to 9223372036854775807"


def _send(api, method: str, path: str, credential: str, body: object) -> tuple[int, str]:
    answer = api.call(method, path, credential, json.dumps(body).encode())
    return answer.status_code, answer.json().get("message", "") if answer.status_code >= 400 else answer.text


def _metrics(api) -> list:
    page = api.http.get(f"/trials/{api.trial_id}/metrics", params={"group": "validation"}).json()
    return page["metrics"]


@pytest.mark.parametrize(
    ("method", "path", "credential", "body", "words"),
    [
        (
            "POST",
            "/trials/{t}/metrics",
            "run",
            {"group": "validation", "steps_completed": HUGE, "metrics": {}},
            f"steps_completed: {TOO_MANY_DIGITS}",
        ),
        (
            "POST",
            "/trials/{t}/metrics",
            "run",
            {"group": "validation", "steps_completed": 5, "metrics": {"loss": 5e-324}},
            "metrics.loss: 5e-324 is out of range; DynamoDB stores numbers of at most 38 digits, between 1E-130",
        ),
        (
            "POST",
            "/trials/{t}/metrics",
            "run",
            {"group": "validation", "steps_completed": 5, "metrics": {"loss": 1e200}},
            "metrics.loss: 1e+200 is out of range",
        ),
        (
            "POST",
            "/trials/{t}/metrics",
            "run",
            {"group": "validation", "steps_completed": 5, "metrics": {"n": {"deep": [1, HUGE]}}},
            "metrics.n.deep[1]: 1000000000…000000 (41 digits) has more than 38 digits",
        ),
        (
            "POST",
            "/trials/{t}/checkpoints",
            "run",
            {"uuid": str(uuid.uuid4()), "steps_completed": HUGE},
            f"steps_completed: {TOO_MANY_DIGITS}",
        ),
        (
            "POST",
            "/trials/{t}/searcher/completed",
            "run",
            {"length": 1, "metric": 1e200},
            "metric: 1e+200 is out of range",
        ),
        (
            "POST",
            "/trials/{t}/searcher/completed",
            "run",
            {"length": HUGE, "metric": 1.0},
            f"length: {TOO_MANY_DIGITS}",
        ),
        ("POST", "/agents/local-0/runs/{r}/started", "agent", {"pid": HUGE}, f"pid: {TOO_MANY_DIGITS}"),
        ("POST", "/agents/local-0/runs/{r}/started", "agent", {"pid": BIG}, f"pid: {INT64}"),
        (
            "POST",
            "/agents/local-0/runs/{r}/exit",
            "agent",
            {"exit_code": HUGE},
            f"exit_code: {TOO_MANY_DIGITS}",
        ),
        ("POST", "/contexts", "user", {"sha256": "a" * 64, "size": HUGE}, f"size: {TOO_MANY_DIGITS}"),
        ("PATCH", "/jobs/{e}", "user", {"priority": HUGE}, f"priority: {TOO_MANY_DIGITS}"),
        (
            "POST",
            "/experiments",
            "user",
            {"config": {"entrypoint": "x", "hyperparameters": {"lr": {"type": "const", "val": HUGE}}}},
            "config.hyperparameters.lr.val: 1000000000…000000 (41 digits) has more than 38 digits",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith(("/", "P", "G")) else None,
)
def test_numbers_dynamodb_cannot_store_are_a_400_naming_the_field(api, method, path, credential, body, words):
    before = _metrics(api)
    concrete = path.format(t=api.trial_id, r=api.run_id, e=api.experiment_id)

    status, message = _send(api, method, concrete, credential, body)

    assert status == 400, message
    assert words in message
    assert _metrics(api) == before


def test_a_39_digit_id_in_the_path_is_a_400_naming_the_limit(api):
    answer = api.http.get(f"/experiments/{'9' * 39}")
    assert answer.status_code == 400
    assert (
        answer.json()["message"]
        == f"experiment id '{'9' * 39}' must be a positive integer of at most 9223372036854775807"
    )
    answer = api.http.get(f"/trials/{'9' * 39}")
    assert answer.status_code == 400


def test_a_metrics_map_over_an_item_is_a_400_and_stores_nothing(api):
    before = _metrics(api)
    body = {"group": "validation", "steps_completed": 7, "metrics": {"blob": "x" * 400_000}}

    status, message = _send(api, "POST", f"/trials/{api.trial_id}/metrics", "run", body)

    assert status == 400
    assert message.startswith(
        "invalid request body: metrics: Value error, is 400,011 bytes as JSON; at most 300,000"
    )
    assert _metrics(api) == before


def test_a_config_over_an_item_is_refused_before_an_id_is_spent(api):
    config = {**api.config, "name": "big", "description": "x" * 400_000}
    first = api.http.post(
        "/experiments", json={"config": {**api.config, "name": "before"}, "activate": False}
    )

    status, message = _send(api, "POST", "/experiments", "user", {"config": config})
    after = api.http.post("/experiments", json={"config": {**api.config, "name": "after"}, "activate": False})

    assert status == 400 and "config: Value error, is 400," in message and "at most 300,000" in message
    assert after.json()["experiment"]["id"] == first.json()["experiment"]["id"] + 1


def test_log_lines_outside_cloudwatchs_window_are_kept_at_their_arrival(api):
    now = int(time.time() * 1000)
    lines = [
        {"timestamp": 978_307_200_000, "message": "from a machine that lost its clock", "rank": 0},
        {"timestamp": now + 30 * 24 * 3600 * 1000, "message": "from the future", "rank": 0},
        {"timestamp": now, "message": "on time", "rank": 0},
    ]
    status, _ = _send(
        api, "POST", f"/trials/{api.trial_id}/logs", "agent", {"run_id": api.run_id, "lines": lines}
    )
    assert status == 200

    page = api.http.get(f"/trials/{api.trial_id}/logs", params={"limit": 10_000}).json()
    kept = {line["message"]: line["timestamp"] for line in page["logs"]}
    assert "[its clock said 2001-01-01T00:00:00.000+00:00] from a machine that lost its clock" in kept
    future = next(message for message in kept if message.endswith("] from the future"))
    assert abs(kept[future] - now) < 3600 * 1000  # stamped on arrival
    assert kept["on time"] == now
