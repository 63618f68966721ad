"""Trial logs in CloudWatch Logs: a log group for the stack, a stream per trial."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import clients
from chalicelib.domain.keys import log_stream
from chalicelib.domain.records import LogLine
from chalicelib.settings import get_settings

# CloudWatch Logs limits: 10,000 events and ~1 MiB per PutLogEvents call, 256 KiB per event.
_MAX_EVENTS = 10_000
_MAX_BATCH_BYTES = 1_000_000
_MAX_EVENT_BYTES = 200_000
#: The events of one PutLogEvents call span less than 24 hours.
_MAX_BATCH_SPAN_MS = 24 * 3600 * 1000


class CloudWatchLogs:
    def __init__(self) -> None:
        self._logs = clients.client("logs")
        self._group = get_settings().log_group

    def put(self, trial_id: int, lines: Sequence[LogLine]) -> None:
        stream = log_stream(trial_id)
        events = sorted(((line.timestamp, _encode(line)) for line in lines), key=lambda e: e[0])
        batch: list[dict[str, Any]] = []
        size = 0
        for timestamp, message in events:
            event = {"timestamp": timestamp, "message": message}
            event_size = len(message.encode()) + 26
            spans_a_day = bool(batch) and timestamp - batch[0]["timestamp"] >= _MAX_BATCH_SPAN_MS
            if batch and (len(batch) >= _MAX_EVENTS or size + event_size > _MAX_BATCH_BYTES or spans_a_day):
                self._send(stream, batch)
                batch, size = [], 0
            batch.append(event)
            size += event_size
        if batch:
            self._send(stream, batch)

    def _send(self, stream: str, events: list[dict[str, Any]]) -> None:
        try:
            self._logs.put_log_events(logGroupName=self._group, logStreamName=stream, logEvents=events)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            try:
                self._logs.create_log_stream(logGroupName=self._group, logStreamName=stream)
            except ClientError as create_error:
                if create_error.response.get("Error", {}).get("Code") != "ResourceAlreadyExistsException":
                    raise
            self._logs.put_log_events(logGroupName=self._group, logStreamName=stream, logEvents=events)

    def get(
        self, trial_id: int, limit: int, next_token: str | None, tail: int | None
    ) -> tuple[list[LogLine], str | None]:
        kwargs: dict[str, Any] = {
            "logGroupName": self._group,
            "logStreamName": log_stream(trial_id),
            "limit": min(tail or limit, 10_000),
            "startFromHead": tail is None,
        }
        if next_token:
            kwargs["nextToken"] = next_token
        try:
            answer = self._logs.get_log_events(**kwargs)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return [], next_token  # no line yet
            raise
        lines = [_decode(e) for e in answer.get("events", [])]
        return lines, answer.get("nextForwardToken") or next_token

    def delete(self, trial_id: int) -> None:
        try:
            self._logs.delete_log_stream(logGroupName=self._group, logStreamName=log_stream(trial_id))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise


def _encode(line: LogLine) -> str:
    """Every line travels as `{"r": rank, "m": message}`: the rank inside the event keeps one stream for
    all ranks, in time order; an empty message is not refused by CloudWatch; and a line that looks like
    an encoded one (a trial printing `{"r": 7, ...}`) is the message of its wrapper, never a rank."""
    return json.dumps({"r": line.rank, "m": line.message[:_MAX_EVENT_BYTES]})


def _decode(event: Mapping[str, Any]) -> LogLine:
    message = str(event.get("message", ""))
    rank = None
    try:
        decoded = json.loads(message) if message.startswith('{"r": ') else None
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and set(decoded) == {"r", "m"} and isinstance(decoded["m"], str):
        rank = decoded["r"] if isinstance(decoded["r"], int) and not isinstance(decoded["r"], bool) else None
        message = decoded["m"]
    return LogLine(int(event.get("timestamp", 0)), message, rank)
