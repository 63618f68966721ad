"""Event handlers: one Lambda per queue, each an idempotent consumer (SQS delivers at least once).

A handler that raises leaves the message on the queue to be delivered again (the pump does the same
locally); a message that can never succeed ends in the queue's dead-letter queue after a few tries.
"""

from __future__ import annotations

import json
import logging

from chalice.app import Blueprint, SQSEvent

from chalicelib.services import runs, scheduler, searching
from chalicelib.settings import queue_name
from chalicelib.wiring import ports

bp = Blueprint(__name__)
log = logging.getLogger(__name__)


@bp.on_sqs_message(queue=queue_name("scheduler"), batch_size=1)
def on_scheduler_message(event: SQSEvent) -> None:
    for record in event:
        scheduler.handle_message(ports(), json.loads(record.body))


@bp.on_sqs_message(queue=queue_name("launch"), batch_size=10)
def on_launch_message(event: SQSEvent) -> None:
    for record in event:
        runs.handle_launch(ports(), json.loads(record.body))


@bp.on_sqs_message(queue=queue_name("events"), batch_size=1)
def on_trial_event(event: SQSEvent) -> None:
    for record in event:
        searching.handle_event(ports(), json.loads(record.body))
