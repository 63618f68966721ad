"""The queue handlers drop a message the contract refuses (logged with the typed error) instead of raising:
a raise would have SQS deliver it again and again until it lands in the dead-letter queue."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import app  # noqa: F401  (registers the handlers)
from chalicelib.handlers import events


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
