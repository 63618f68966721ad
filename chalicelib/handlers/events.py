"""Event handlers: one Lambda per queue, each an idempotent consumer (SQS delivers at least once).

A handler that raises leaves the message on the queue to be delivered again (the pump does the same
locally); a message that can never succeed ends in the queue's dead-letter queue after a few tries.
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


def _consume(
    event: SQSEvent, queue: str, parse: Callable[[str], M], handle: Callable[[Ports, M], None]
) -> None:
    """Hands each record's message to `handle`; one the contract refuses is logged and dropped."""
    for record in event:
        try:
            message = parse(record.body)
        except InvalidMessageError as e:
            log.error("dropping a message from the %s queue: %s: %s", queue, type(e).__name__, e)
            continue
        handle(ports(), message)


@bp.on_sqs_message(queue=queue_name("scheduler"), batch_size=1)
def on_scheduler_message(event: SQSEvent) -> None:
    _consume(event, "scheduler", messages.parse_scheduler, scheduler.handle_message)


@bp.on_sqs_message(queue=queue_name("launch"), batch_size=10)
def on_launch_message(event: SQSEvent) -> None:
    _consume(event, "launch", messages.parse_launch, runs.handle_launch)


@bp.on_sqs_message(queue=queue_name("events"), batch_size=1)
def on_trial_event(event: SQSEvent) -> None:
    _consume(event, "events", messages.parse_events_queue, handle_events_message)


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
