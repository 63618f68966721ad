"""The local stand-in for Lambda's SQS event source mapping with `ReportBatchItemFailures`: long-poll a
queue, hand each batch to its Chalice handler, and honour its partial batch response as Lambda does. The
messages the handler answered for are deleted; those it lists in `batchItemFailures` are left alone, to be
delivered again after the visibility timeout, and the queue's redrive policy moves one to the dead-letter
queue after `maxReceiveCount` receives. A handler that raises, or an answer Lambda would refuse (an
`itemIdentifier` missing, empty or not of the batch), fails the whole batch: nothing is deleted."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from stratus.contract.messages import Sweep

log = logging.getLogger("stratus.pump")


class _QueueThread(threading.Thread):
    """A daemon thread working on one SQS queue until `stop()`."""

    def __init__(self, name: str, sqs: Any, queue_url: str) -> None:
        super().__init__(name=name, daemon=True)
        self._sqs = sqs
        self._url = queue_url
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()


class QueuePump(_QueueThread):
    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        handler: Callable[[dict[str, Any], Any], Any],
        *,
        batch_size: int = 1,
        wait_seconds: int = 1,
    ) -> None:
        super().__init__(f"pump-{queue_url.rsplit('/', 1)[-1]}", sqs, queue_url)
        self._handler = handler
        self._batch = batch_size
        self._wait = wait_seconds
        self.delivered = 0  # messages handled and deleted
        self.failures = 0  # messages left to be delivered again (a failed record, or its whole batch)

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.pump_once()
            except Exception:  # the pump must outlive any one bad batch
                log.exception("pump %s: receive failed", self.name)
                self._stop_event.wait(1.0)

    def pump_once(self) -> int:
        """Receive one batch and deliver it; how many of its messages were handled and deleted."""
        answer = self._sqs.receive_message(
            QueueUrl=self._url,
            MaxNumberOfMessages=self._batch,
            WaitTimeSeconds=self._wait,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = answer.get("Messages", [])
        if not messages:
            return 0
        event = {"Records": [_record(m, self._url) for m in messages]}
        try:
            response = self._handler(event, None)
        except Exception:
            self.failures += len(messages)
            log.exception("pump %s: handler failed; the messages will be delivered again", self.name)
            return 0
        failed = failed_ids(response, {m["MessageId"] for m in messages})
        if failed is None:
            self.failures += len(messages)
            log.error(
                "pump %s: an answer Lambda refuses, %r; the messages will be delivered again",
                self.name,
                response,
            )
            return 0
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            self._sqs.delete_message_batch(
                QueueUrl=self._url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
        self.failures += len(failed)
        self.delivered += len(done)
        return len(done)


def failed_ids(answer: object, batch: set[str]) -> set[str] | None:
    """The message ids a handler's answer reports failed, as Lambda reads a partial batch response:
    nothing (`None`, no `batchItemFailures`, an empty list) is a batch that succeeded; `None` back when
    Lambda would fail the whole batch (an item without an `itemIdentifier` of the batch)."""
    if not isinstance(answer, dict) or not answer.get("batchItemFailures"):
        return set()
    items = answer["batchItemFailures"]
    if not isinstance(items, list):
        return None
    failed = set()
    for item in items:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or identifier not in batch:
            return None
        failed.add(identifier)
    return failed


def _record(message: dict[str, Any], queue_url: str) -> dict[str, Any]:
    # The shape Lambda gives an SQS-triggered function.
    attributes = {
        name: {"stringValue": value.get("StringValue"), "dataType": value.get("DataType")}
        for name, value in message.get("MessageAttributes", {}).items()
    }
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes", {}),
        "messageAttributes": attributes,
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:" + queue_url.rsplit("/", 1)[-1],
        "awsRegion": "us-east-1",
    }


#: How often the stack-wide sweep runs (the template's EventBridge schedule: every minute).
STACK_SWEEP_S = 60.0


class SweepTicker(_QueueThread):
    """The local stand-in for the EventBridge schedule of the template: a `sweep` message to the scheduler
    queue every ``interval`` seconds, so a pass runs (and ends the runs of lost agents) even when nothing
    else happens in the pool."""

    def __init__(self, sqs: Any, queue_url: str, pool: str, interval: float) -> None:
        super().__init__(f"sweep-{pool}", sqs, queue_url)
        self._pool = pool
        self._interval = interval
        self.sent = 0

    def run(self) -> None:
        while not self._stop_event.wait(self._interval):
            try:
                self._sqs.send_message(
                    QueueUrl=self._url,
                    MessageBody=json.dumps(Sweep(self._pool).to_body()),
                    MessageGroupId=self._pool,
                    MessageDeduplicationId=f"sweep-{self._pool}-{time.time():.3f}",
                )
                self.sent += 1
            except Exception:  # the ticker must outlive a moto hiccup
                log.exception("sweep ticker: sending failed")
