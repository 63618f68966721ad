"""SQS queues and Step Functions in memory: every message and every answered task token is recorded,
so a test reads what the services sent (and can deliver it to their consumers)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.memory._items import Record, as_json


@dataclass(frozen=True)
class SchedulerMessage:
    pool: str
    body: Record
    dedup_id: str


class MemoryQueues:
    """The scheduler queue deduplicates by id, as SQS FIFO does (within its window: here, forever)."""

    def __init__(self) -> None:
        self.scheduler: list[SchedulerMessage] = []
        self.events: list[Record] = []
        self._dedup_ids: set[str] = set()

    def to_scheduler(self, pool: str, body: Mapping[str, Any], dedup_id: str) -> None:
        if dedup_id[:128] in self._dedup_ids:
            return
        self._dedup_ids.add(dedup_id[:128])
        self.scheduler.append(SchedulerMessage(pool, as_json(body), dedup_id[:128]))

    def to_events(self, body: Mapping[str, Any]) -> None:
        self.events.append(as_json(body))

    def take_scheduler(self) -> list[SchedulerMessage]:
        """The scheduler messages sent since the last take (a consumer's receive and delete)."""
        taken, self.scheduler = self.scheduler, []
        return taken

    def take_events(self) -> list[Record]:
        taken, self.events = self.events, []
        return taken


class MemoryWorkflows:
    """Executions started by name (a second start of the same name is a no-op, as in Step Functions) and
    task tokens answered. A token answered already, or one whose execution ended (`end`), is refused
    with False, as `chalicelib.aws.messaging.StepFunctions.succeed` refuses a token that is gone."""

    def __init__(self, state_machine_arn: str) -> None:
        self.executions: dict[str, Record] = {}
        self.answers: dict[str, Record] = {}
        #: Task heartbeats sent per token.
        self.beats: dict[str, int] = {}
        self._ended: set[str] = set()
        self._arn = state_machine_arn.replace(":stateMachine:", ":execution:")

    def start(self, name: str, payload: Mapping[str, Any]) -> str:
        self.executions.setdefault(name, copy.deepcopy(dict(payload)))
        return f"{self._arn}:{name}"

    def succeed(self, token: str, output: Mapping[str, Any]) -> bool:
        if token in self.answers or token in self._ended:
            return False
        self.answers[token] = as_json(output)
        return True

    def heartbeat(self, token: str) -> bool:
        self.beats[token] = self.beats.get(token, 0) + 1
        return token not in self.answers and token not in self._ended

    def end(self, token: str) -> None:
        """The execution waiting on `token` stopped or timed out: answering it now is refused."""
        self._ended.add(token)
