"""Event handlers: one Lambda per queue, each an idempotent consumer (SQS delivers at least once).

Each record of a batch is handled on its own. A record whose handling raises is logged with its message id
and listed in the answer's `batchItemFailures` (Lambda's partial batch response, turned on by the event
source mapping's `ReportBatchItemFailures`): only that record is delivered again; the others of its batch
are deleted. A message that keeps failing ends in the queue's dead-letter queue after the queue's
`maxReceiveCount` receives; the pump does the same locally (`infra/local/pump.py`). On a FIFO queue the
records after a failed one are reported failed unhandled, so a message group keeps its order.
A message the contract refuses (an unknown type, a missing field: `stratus.contract.messages`) could never
succeed, so it is logged with the typed error and dropped instead of being retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from chalice.app import Blueprint, SQSEvent

from chalicelib.services import compute_events, deleting, runs, scheduler, searching
from chalicelib.services.ports import Ports
from chalicelib.settings import queue_name
from chalicelib.wiring import ports
from stratus.contract import messages
from stratus.contract.errors import InvalidMessageError

bp = Blueprint(__name__)
log = logging.getLogger(__name__)

M = TypeVar("M")

#: Lambda's partial batch response: `{"batchItemFailures": [{"itemIdentifier": <messageId>}, ...]}`.
BatchResponse = dict[str, list[dict[str, str]]]


def _consume(
    event: SQSEvent, queue: str, parse: Callable[[str], M], handle: Callable[[Ports, M], None]
) -> BatchResponse:
    """Hands each record's message to `handle`; one the contract refuses is logged and dropped. Returns
    the records that failed (logged once each, with the error but not the body), to be delivered again."""
    failed: list[dict[str, str]] = []
    for record in event:
        raw = record.to_dict()
        message_id = str(raw["messageId"])
        if failed and str(raw.get("eventSourceARN", "")).endswith(".fifo"):
            failed.append({"itemIdentifier": message_id})  # after its group's failure: kept in order
            continue
        try:
            message = parse(record.body)
        except InvalidMessageError as e:
            log.error("dropping message %s of the %s queue: %s: %s", message_id, queue, type(e).__name__, e)
            continue
        try:
            handle(ports(), message)
        except Exception as e:  # reported to SQS below; its neighbours are not retried with it
            log.error(
                "message %s of the %s queue failed; it will be delivered again: %s: %s",
                message_id,
                queue,
                type(e).__name__,
                e,
                exc_info=True,
            )
            failed.append({"itemIdentifier": message_id})
    return {"batchItemFailures": failed}


@bp.on_sqs_message(queue=queue_name("scheduler"), batch_size=1)
def on_scheduler_message(event: SQSEvent) -> BatchResponse:
    return _consume(event, "scheduler", messages.parse_scheduler, scheduler.handle_message)


@bp.on_sqs_message(queue=queue_name("launch"), batch_size=10)
def on_launch_message(event: SQSEvent) -> BatchResponse:
    return _consume(event, "launch", messages.parse_launch, runs.handle_launch)


@bp.on_sqs_message(queue=queue_name("events"), batch_size=1)
def on_trial_event(event: SQSEvent) -> BatchResponse:
    return _consume(event, "events", messages.parse_events_queue, handle_events_message)


def handle_events_message(ports: Ports, message: messages.EventsQueueMessage) -> None:
    """The events queue: trial events go to the searcher; a `DeleteExperiment` goes on deleting; a
    `SearcherWork` carries on a searcher's outbox; an AWS compute event (a spot interruption warning) drains its instance's agent."""
    if isinstance(message, messages.DeleteExperiment):
        deleting.carry_on(ports, message.experiment_id)
    elif isinstance(message, messages.SearcherWork):
        searching.on_searcher_work(ports, message)
    elif isinstance(message, messages.ComputeEvent):
        compute_events.handle(ports, message.event)
    else:
        searching.handle_event(ports, message)  # it ignores a late event of an experiment being deleted
