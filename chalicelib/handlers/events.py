"""Event handlers: one Lambda per queue, each an idempotent consumer (SQS delivers at least once).

A handler that raises leaves the message on the queue to be delivered again (the pump does the same
locally); a message that can never succeed ends in the queue's dead-letter queue after a few tries.
A message the contract refuses (an unknown type, a missing field: `contract.messages`) could never
succeed, so it is logged with the typed error and dropped instead of being retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from chalice.app import Blueprint, SQSEvent, SQSRecord

from chalicelib.services import runs, scheduler, searching
from chalicelib.settings import queue_name
from chalicelib.wiring import ports
from contract import messages
from contract.errors import InvalidMessageError

bp = Blueprint(__name__)
log = logging.getLogger(__name__)

M = TypeVar("M")


def _parsed(record: SQSRecord, parse: Callable[[str], M], queue: str) -> M | None:
    """The record's message, or None (logged) when it can never be handled."""
    try:
        return parse(record.body)
    except InvalidMessageError as e:
        log.error("dropping a message from the %s queue: %s: %s", queue, type(e).__name__, e)
        return None


@bp.on_sqs_message(queue=queue_name("scheduler"), batch_size=1)
def on_scheduler_message(event: SQSEvent) -> None:
    for record in event:
        message = _parsed(record, messages.parse_scheduler, "scheduler")
        if message is not None:
            scheduler.handle_message(ports(), message)


@bp.on_sqs_message(queue=queue_name("launch"), batch_size=10)
def on_launch_message(event: SQSEvent) -> None:
    for record in event:
        message = _parsed(record, messages.parse_launch, "launch")
        if message is not None:
            runs.handle_launch(ports(), message)


@bp.on_sqs_message(queue=queue_name("events"), batch_size=1)
def on_trial_event(event: SQSEvent) -> None:
    for record in event:
        message = _parsed(record, messages.parse_event, "events")
        if message is not None:
            searching.handle_event(ports(), message)
