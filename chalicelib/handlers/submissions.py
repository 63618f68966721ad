"""The submissions queue's handler: the bucket's notifications of `submissions/<name>/submit` markers
(S3 → SQS → this Lambda), each answered by `chalicelib.services.submissions`. An `s3:TestEvent` (S3 sends
one when the notification is configured) announces nothing; a body that is no S3 notification is logged
and dropped, as every handler drops a message that could never succeed, and a record that fails is
reported alone in the partial batch response (`chalicelib.handlers.events`)."""

from __future__ import annotations

import logging

from chalice.app import Blueprint, SQSEvent

from chalicelib.aws.submission_files import S3SubmissionFiles
from chalicelib.domain.submissions import Notification, parse_notification
from chalicelib.handlers.events import BatchResponse, _consume
from chalicelib.services import submissions
from chalicelib.services.ports import Ports
from chalicelib.settings import queue_name

bp = Blueprint(__name__)
log = logging.getLogger(__name__)


def _handle(ports: Ports, notification: Notification) -> None:
    if notification.uploads:
        submissions.handle(ports, S3SubmissionFiles(), notification)


@bp.on_sqs_message(queue=queue_name("submissions"), batch_size=1)
def on_submission(event: SQSEvent) -> BatchResponse:
    return _consume(event, "submissions", parse_notification, _handle)
