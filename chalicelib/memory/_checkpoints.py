"""Checkpoints, metrics and id counters in memory, with the semantics of
`chalicelib.aws.checkpoint_table`: a checkpoint or a metric report is stored once, the first one wins."""

from __future__ import annotations

import builtins
import copy
import json
from collections.abc import Mapping
from typing import Any

from chalicelib.domain import keys
from chalicelib.domain.records import Checkpoint, MetricReport
from chalicelib.memory._items import Record, as_json, stored
from chalicelib.services.ports import Clock


class MemoryCheckpoints:
    def __init__(self) -> None:
        self.items: dict[str, Record] = {}

    def put(self, checkpoint: Checkpoint) -> Checkpoint:
        """Store a checkpoint once; a repeated report of the same uuid returns the stored record."""
        if checkpoint.uuid not in self.items:
            item = stored(checkpoint.to_item())
            item["resources"] = as_json(checkpoint.resources)
            item["metadata"] = as_json(checkpoint.metadata)
            self.items[checkpoint.uuid] = item
        return _checkpoint(self.items[checkpoint.uuid])

    def get(self, uuid: str) -> Checkpoint | None:
        item = self.items.get(uuid)
        return _checkpoint(item) if item is not None else None

    def mark_deleted(self, uuid: str) -> None:
        if uuid in self.items:
            self.items[uuid]["state"] = "DELETED"

    def delete(self, uuid: str) -> None:
        self.items.pop(uuid, None)

    def add_user(self, uuid: str, experiment_id: int) -> Checkpoint | None:
        item = self.items.get(uuid)
        if item is None:
            return None
        item["used_by"] = sorted({*item.get("used_by", []), experiment_id})
        return _checkpoint(item)

    def for_trial(self, trial_id: int) -> list[Checkpoint]:
        found = [_checkpoint(c) for c in self.items.values() if c["trial_id"] == trial_id]
        return sorted(found, key=lambda c: (c.steps_completed, c.report_time))


def _checkpoint(item: Record) -> Checkpoint:
    return Checkpoint.from_item(copy.deepcopy(item))


class MemoryMetrics:
    def __init__(self, clock: Clock) -> None:
        self.items: dict[tuple[int, str], Record] = {}
        self._clock = clock

    def put(self, trial_id: int, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> bool:
        """Store one report; False when that (group, steps_completed) was already reported."""
        key = (trial_id, keys.metric_report_key(group, steps_completed))
        if key in self.items:
            return False
        self.items[key] = {
            "trial_id": trial_id,
            "group": group,
            "steps_completed": steps_completed,
            # As the adapter does: JSON that lets NaN through (a diverged loss is still a report).
            "metrics": json.dumps(metrics, sort_keys=True),
            "report_time": self._clock.now_iso(),
        }
        return True

    def list(self, trial_id: int, group: str) -> list[MetricReport]:
        """The reports of one group, by steps completed."""
        prefix = keys.metric_group_prefix(group)
        rows = []
        for (trial, key), item in sorted(self.items.items()):
            if trial == trial_id and key.startswith(prefix):
                rows.append(MetricReport.from_item({**item, "metrics": json.loads(item["metrics"])}))
        return rows

    def groups(self, trial_id: int) -> builtins.list[str]:
        """The groups the trial reported metrics under: the built-in ones first, then by name."""
        return keys.ordered_metric_groups(
            str(item["group"]) for (trial, _), item in self.items.items() if trial == trial_id
        )

    def delete_for_trial(self, trial_id: int) -> int:
        gone = [key for key in self.items if key[0] == trial_id]
        for key in gone:
            del self.items[key]
        return len(gone)


class MemoryIds:
    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.claims: dict[str, int] = {}

    def next(self, counter: str) -> int:
        self.counters[counter] = self.counters.get(counter, 0) + 1
        return self.counters[counter]

    def claim(self, key: str, counter: str) -> int:
        """The id bound to `key`, drawing a new one from `counter` the first time (idempotent creation)."""
        if key not in self.claims:
            self.claims[key] = self.next(counter)
        return self.claims[key]

    def forget(self, key: str) -> None:
        self.claims.pop(key, None)
