"""Agents' doorbells: one SQS queue per agent, rung when the control plane has something for it (a launch,
a kill, a stop request), so an agent learns of it within a long poll's round trip instead of at its next
heartbeat. The agent needs no AWS credentials: each heartbeat answer carries a presigned `ReceiveMessage`
URL (SQS's query protocol, signed by the control plane, valid for that queue and those parameters only).

A ring is a wake-up, not the work: the agent then heartbeats and gets its instructions as before. So a
ring lost, late or repeated changes nothing but latency, and messages are never deleted: a queue keeps
them 60 s (SQS's least), and a message received stays invisible for those 60 s, so it is seen once.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from typing import Any
from urllib.parse import urlencode

from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import ClientError

from chalicelib.aws import clients
from chalicelib.settings import get_settings

log = logging.getLogger(__name__)

#: The long poll's wait (SQS allows 20 s at most); the agent's request outlives it by a few seconds.
WAIT_S = 20
RETENTION_S = 60
#: How long a bell URL is good for (at most what the signing credentials allow).
URL_EXPIRY_S = 3600
_NAME = re.compile(r"[^A-Za-z0-9_-]")


def queue_name(stack: str, agent_id: str) -> str:
    """`<stack>-agent-<id>`; an id SQS would not take (other characters, too long) is hashed."""
    clean = _NAME.sub("_", agent_id)
    name = f"{stack}-agent-{clean}"
    if clean != agent_id or len(name) > 80:
        name = f"{stack}-agent-{hashlib.sha256(agent_id.encode()).hexdigest()[:32]}"
    return name


class SqsBells:
    def __init__(self) -> None:
        self._sqs = clients.client("sqs")
        self._settings = get_settings()
        self._urls: dict[str, str] = {}

    def ring(self, agent_id: str) -> None:
        """Wake the agent's long poll; nothing when it never asked for a bell (it heartbeats anyway)."""
        url = self._queue_url(agent_id, create=False)
        if url is None:
            return
        try:
            self._sqs.send_message(QueueUrl=url, MessageBody="ring")
        except ClientError as error:  # a deleted queue, a throttle: the agent's heartbeat still comes
            log.warning("could not ring agent %s: %s", agent_id, error)
            self._urls.pop(agent_id, None)

    def url(self, agent_id: str) -> dict[str, Any] | None:
        """The agent's presigned long-poll URL and when it expires (epoch s); the queue is made if new."""
        queue = self._queue_url(agent_id, create=True)
        if queue is None:
            return None
        params = {
            "Action": "ReceiveMessage",
            "Version": "2012-11-05",
            "MaxNumberOfMessages": "10",
            "WaitTimeSeconds": str(WAIT_S),
            "VisibilityTimeout": str(RETENTION_S),
        }
        request = AWSRequest(method="GET", url=f"{queue}?{urlencode(params)}")
        SigV4QueryAuth(
            clients.frozen_credentials(), "sqs", self._settings.region, expires=URL_EXPIRY_S
        ).add_auth(request)
        return {"url": request.url, "expires_at": int(time.time()) + URL_EXPIRY_S, "wait_s": WAIT_S}

    def forget(self, agent_id: str) -> None:
        """The agent stopped for good: its queue goes."""
        url = self._queue_url(agent_id, create=False)
        self._urls.pop(agent_id, None)
        if url is not None:
            try:
                self._sqs.delete_queue(QueueUrl=url)
            except ClientError as error:
                log.warning("could not delete the bell of agent %s: %s", agent_id, error)

    def _queue_url(self, agent_id: str, *, create: bool) -> str | None:
        if agent_id in self._urls:
            return self._urls[agent_id]
        name = queue_name(self._settings.stack, agent_id)
        try:
            url: str
            if create:
                url = self._sqs.create_queue(
                    QueueName=name,
                    Attributes={
                        "MessageRetentionPeriod": str(RETENTION_S),
                        "VisibilityTimeout": str(RETENTION_S),
                    },
                    tags={"stratus:agent": agent_id[:256]},
                )["QueueUrl"]
            else:
                url = self._sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in (
                "AWS.SimpleQueueService.NonExistentQueue",
                "QueueDoesNotExist",
            ):
                return None
            raise
        self._urls[agent_id] = url
        return url
