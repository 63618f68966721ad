"""SQS queues and Step Functions task tokens."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import clients
from chalicelib.settings import get_settings

log = logging.getLogger(__name__)

# Answering a token whose execution already moved on (a redelivered message, a stopped execution) is
# not an error for an idempotent consumer.
_GONE = {"TaskTimedOut", "InvalidToken", "TaskDoesNotExist", "ExecutionDoesNotExist"}


class SqsQueues:
    def __init__(self) -> None:
        self._sqs = clients.client("sqs")
        self._settings = get_settings()

    def to_scheduler(self, pool: str, body: Mapping[str, Any], dedup_id: str) -> None:
        # FIFO with the pool as the message group: each pool is scheduled by one consumer at a time.
        self._sqs.send_message(
            QueueUrl=self._settings.scheduler_queue_url,
            MessageBody=json.dumps(body, sort_keys=True),
            MessageGroupId=pool,
            MessageDeduplicationId=dedup_id[:128],
            MessageAttributes={"pool": {"DataType": "String", "StringValue": pool}},
        )

    def to_events(self, body: Mapping[str, Any]) -> None:
        attributes = {}
        if "experiment_id" in body:
            attributes["experiment"] = {"DataType": "Number", "StringValue": str(body["experiment_id"])}
        self._sqs.send_message(
            QueueUrl=self._settings.events_queue_url,
            MessageBody=json.dumps(body, sort_keys=True),
            MessageAttributes=attributes,
        )


class StepFunctions:
    def __init__(self) -> None:
        self._sfn = clients.client("stepfunctions")
        self._settings = get_settings()

    def start(self, name: str, payload: Mapping[str, Any]) -> str:
        try:
            answer = self._sfn.start_execution(
                stateMachineArn=self._settings.state_machine_arn,
                name=name,
                input=json.dumps(payload, sort_keys=True),
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
                arn = self._settings.state_machine_arn.replace(":stateMachine:", ":execution:")
                return f"{arn}:{name}"
            raise
        return str(answer["executionArn"])

    def heartbeat(self, token: str) -> bool:
        try:
            self._sfn.send_task_heartbeat(taskToken=token)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in _GONE:
                return False
            raise
        return True

    def succeed(self, token: str, output: Mapping[str, Any]) -> bool:
        try:
            self._sfn.send_task_success(taskToken=token, output=json.dumps(output, sort_keys=True))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in _GONE:
                log.info("task token already answered or expired; ignoring")
                return False
            raise
        return True
