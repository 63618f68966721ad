"""Partial batch responses on a moto server with real boto3: the local stack's pump (`infra/local/pump.py`,
Lambda's event source mapping with `ReportBatchItemFailures`) delivers the launch queue's batches to the
real Chalice handler on the queues `infra.local.resources.create` makes (redrive policy included). A batch
holding one poison message and healthy launches launches each healthy run once; the poison message alone
comes back, and after the queue's `maxReceiveCount` receives it alone is in the dead-letter queue."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.handlers import events
from chalicelib.services import runs, scheduler, searching
from infra.local.pump import QueuePump
from stratus.contract import messages

pytestmark = pytest.mark.aws


def _visible(sqs: Any, url: str) -> tuple[int, int]:
    """The queue's (visible, in flight) message counts."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def _dead_letter_queue(sqs: Any, url: str) -> tuple[str, int]:
    """The queue's dead-letter queue (its URL) and `maxReceiveCount`, from its RedrivePolicy."""
    policy = json.loads(
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"][
            "RedrivePolicy"
        ]
    )
    name = policy["deadLetterTargetArn"].rsplit(":", 1)[-1]
    return sqs.get_queue_url(QueueName=name)["QueueUrl"], int(policy["maxReceiveCount"])


def _launches_waiting(stack: Any, count: int, timeout: float = 30.0) -> None:
    """Deliver the scheduler and events queues (not the launch queue) until `count` launches wait on it."""
    p, sqs = stack.ports, stack.client("sqs")
    consumers: dict[str, Callable[[str], object]] = {
        stack.env["STRATUS_SCHEDULER_QUEUE_URL"]: lambda body: scheduler.handle_message(
            p, messages.parse_scheduler(body)
        ),
        stack.env["STRATUS_EVENTS_QUEUE_URL"]: lambda body: searching.handle_event(
            p, messages.parse_event(body)
        ),
    }
    deadline = time.monotonic() + timeout
    while _visible(sqs, stack.env["STRATUS_LAUNCH_QUEUE_URL"])[0] < count:
        assert time.monotonic() < deadline, f"{count} launches not queued within {timeout} s"
        for url, consume in consumers.items():
            for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
                "Messages", []
            ):
                consume(message["Body"])
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def test_a_poison_launch_alone_ends_in_the_dead_letter_queue_and_its_batch_is_launched_once(
    stack: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, sqs = stack.ports, stack.client("sqs")
    url = stack.env["STRATUS_LAUNCH_QUEUE_URL"]
    dlq, max_receives = _dead_letter_queue(sqs, url)
    assert max_receives == 5
    for name in ("first", "second", "third"):
        stack.submit_experiment(name=name)
    runs.heartbeat(p, "agent-1", "default", 3, [])
    _launches_waiting(stack, 3)
    assert [r.state for r in p.runs.allocated("default")] == ["ASSIGNED"] * 3
    # A launch no run answers: `handle_launch` raises NotFoundError on every delivery.
    poison = messages.Launch(token="poison", run_id="99.1", trial_id=99, experiment_id=99, agent_id="agent-1")
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(poison.to_body()))
    # A failed message is visible again at once (not after the stack's 1 s): each pump is one more receive.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "0"})

    handled: Counter[str] = Counter()
    real_handle_launch = runs.handle_launch

    def counted(ports: Any, message: messages.Launch) -> None:
        handled[message.run_id] += 1
        real_handle_launch(ports, message)

    monkeypatch.setattr(runs, "handle_launch", counted)
    batches: list[int] = []

    def handler(event: dict[str, Any], context: Any) -> Any:
        batches.append(len(event["Records"]))
        return events.on_launch_message(event, context)

    pump = QueuePump(sqs, url, handler, batch_size=10, wait_seconds=0)

    assert pump.pump_once() == 3  # one batch of four: the three healthy launches deleted
    assert batches == [4] and (pump.delivered, pump.failures) == (3, 1)
    assert _visible(sqs, dlq) == (0, 0)
    for _ in range(max_receives):  # receives 2 to maxReceiveCount + 1 of the poison
        assert pump.pump_once() == 0
    # It came back alone and failed until its maxReceiveCount-th receive; the next moved it to the DLQ.
    assert batches == [4] + [1] * (max_receives - 1)
    assert (pump.delivered, pump.failures) == (3, max_receives)

    healthy = [r.run_id for r in p.runs.allocated("default")]
    assert handled == Counter({**dict.fromkeys(healthy, 1), "99.1": max_receives})
    assert [r.state for r in p.runs.allocated("default")] == ["LAUNCHING"] * 3
    assert _visible(sqs, url) == (0, 0)
    (dead,) = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10).get("Messages", [])
    assert messages.parse_launch(dead["Body"]) == poison


def _raises(event: dict[str, Any], context: Any) -> Any:
    raise RuntimeError("the function crashed")


def _not_of_the_batch(event: dict[str, Any], context: Any) -> Any:
    return {"batchItemFailures": [{"itemIdentifier": "not-of-this-batch"}]}


def _empty_identifier(event: dict[str, Any], context: Any) -> Any:
    return {"batchItemFailures": [{"itemIdentifier": ""}]}


@pytest.mark.parametrize(
    "handler", [_raises, _not_of_the_batch, _empty_identifier], ids=["raises", "unknown-id", "empty-id"]
)
def test_a_batch_lambda_would_fail_whole_is_left_on_the_queue_whole(
    stack: Any, handler: Callable[[dict[str, Any], Any], Any]
) -> None:
    sqs = stack.client("sqs")
    url = stack.env["STRATUS_EVENTS_QUEUE_URL"]
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"n": n}))
    pump = QueuePump(sqs, url, handler, batch_size=10, wait_seconds=0)

    assert pump.pump_once() == 0
    assert (pump.delivered, pump.failures) == (0, 3)
    assert _visible(sqs, url) == (0, 3)  # none deleted: all three come back after the visibility timeout
