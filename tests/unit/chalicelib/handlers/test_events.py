"""The queue handlers drop a message the contract refuses (logged with the typed error) instead of raising:
a raise would have SQS deliver it again and again until it lands in the dead-letter queue. A record that
fails is logged and reported alone in Lambda's partial batch response; its neighbours are not retried."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import app  # noqa: F401  (registers the handlers)
from chalicelib.errors import NotFoundError
from chalicelib.handlers import events, submissions
from chalicelib.services import runs, scheduler
from stratus.contract.messages import Launch


def _event(*bodies: Any) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": f"m{i}",
                "receiptHandle": f"r{i}",
                "body": body if isinstance(body, str) else json.dumps(body),
                "attributes": {},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:stratus-q",
                "awsRegion": "us-east-1",
            }
            for i, body in enumerate(bodies)
        ]
    }


@pytest.mark.parametrize(
    ("handler", "body", "logged"),
    [
        (events.on_scheduler_message, {"type": "resize", "pool": "default"}, "unknown message type 'resize'"),
        (
            events.on_scheduler_message,
            {"type": "request", "pool": "default"},
            "'request' message needs 'token'",
        ),
        (events.on_launch_message, {"type": "trial_exited"}, "'trial_exited' message does not belong"),
        (events.on_launch_message, "{not json", "a queue message is not JSON"),
        (
            events.on_trial_event,
            {"type": "validation", "trial_id": 1},
            "'validation' message needs 'event_id'",
        ),
        (events.on_trial_event, [1, 2], "a JSON object with a 'type', not list"),
    ],
    ids=["unknown-type", "missing-field", "wrong-queue", "not-json", "event-missing-field", "not-an-object"],
)
def test_a_message_that_can_never_succeed_is_logged_and_dropped(
    handler: Any, body: Any, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger=events.__name__):
        handler(_event(body), None)  # returns: the message is deleted, never retried
    [record] = caplog.records
    assert "InvalidMessageError" in record.getMessage() and logged in record.getMessage()


# ---- partial batch responses --------------------------------------------------------------------------

SCHEDULER_ARN = "arn:aws:sqs:us-east-1:123456789012:stratus-scheduler.fifo"


def _launch(run_id: str) -> dict[str, Any]:
    return Launch(
        token=f"task-token-of-{run_id}", run_id=run_id, trial_id=1, experiment_id=1, agent_id="a"
    ).to_body()


class _Handled:
    """A stand-in for a queue's service call: records each message and raises on the `poison` ones."""

    def __init__(self, *poison: str) -> None:
        self.poison = set(poison)
        self.seen: list[Any] = []

    def __call__(self, ports: Any, message: Any) -> None:
        self.seen.append(message)
        key = getattr(message, "run_id", None) or getattr(message, "pool", None)
        if key in self.poison:
            raise NotFoundError(f"{key} not found")


@pytest.fixture
def no_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "ports", lambda: None)  # the stand-ins below read none


def test_a_failing_record_alone_is_reported_and_its_neighbours_are_handled_once(
    monkeypatch: pytest.MonkeyPatch, no_ports: None, caplog: pytest.LogCaptureFixture
) -> None:
    handled = _Handled("2.1")
    monkeypatch.setattr(runs, "handle_launch", handled)
    batch = _event(_launch("1.1"), _launch("2.1"), {"type": "launch"}, _launch("3.1"), _launch("4.1"))

    with caplog.at_level(logging.ERROR, logger=events.__name__):
        response = events.on_launch_message(batch, None)

    # m1 is the poison; m2 (refused by the contract) is dropped, never retried.
    assert response == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    assert [m.run_id for m in handled.seen] == ["1.1", "2.1", "3.1", "4.1"]
    failed, dropped = caplog.records  # in the batch's order
    assert "message m2 " in dropped.getMessage() and "InvalidMessageError" in dropped.getMessage()
    assert "message m1 of the launch queue failed" in failed.getMessage()
    assert "NotFoundError: 2.1 not found" in failed.getMessage() and failed.exc_info is not None
    assert "task-token" not in caplog.text  # the body (a task token) is never logged


def test_a_batch_that_succeeds_reports_no_failure(monkeypatch: pytest.MonkeyPatch, no_ports: None) -> None:
    handled = _Handled()
    monkeypatch.setattr(runs, "handle_launch", handled)
    assert events.on_launch_message(_event(_launch("1.1"), _launch("2.1")), None) == {"batchItemFailures": []}
    assert len(handled.seen) == 2


def test_on_a_fifo_queue_the_records_after_a_failed_one_are_reported_unhandled(
    monkeypatch: pytest.MonkeyPatch, no_ports: None
) -> None:
    handled = _Handled("gpu")
    monkeypatch.setattr(scheduler, "handle_message", handled)
    batch = _event(*({"type": "capacity", "pool": pool} for pool in ("cpu", "gpu", "cpu", "tpu")))
    for record in batch["Records"]:
        record["eventSourceARN"] = SCHEDULER_ARN

    response = events.on_scheduler_message(batch, None)

    # Lambda's rule for FIFO queues: stop at the first failure, so the group's order holds on redelivery.
    assert response == {"batchItemFailures": [{"itemIdentifier": f"m{i}"} for i in (1, 2, 3)]}
    assert [m.pool for m in handled.seen] == ["cpu", "gpu"]


def test_the_submissions_handler_reports_its_failing_record(
    monkeypatch: pytest.MonkeyPatch, no_ports: None
) -> None:
    def failing(ports: Any, notification: Any) -> None:
        raise RuntimeError("the bucket is gone")

    monkeypatch.setattr(submissions, "_handle", failing)
    notification = {
        "Records": [
            {
                "eventName": "ObjectCreated:Put",
                "s3": {"bucket": {"name": "b"}, "object": {"key": "submissions/x/submit"}},
            }
        ]
    }
    assert submissions.on_submission(_event(notification), None) == {
        "batchItemFailures": [{"itemIdentifier": "m0"}]
    }
