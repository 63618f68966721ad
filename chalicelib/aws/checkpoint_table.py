"""Checkpoints, metrics and id counters in DynamoDB."""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import dynamo
from chalicelib.domain import keys
from chalicelib.domain.records import Checkpoint, MetricReport


class DynamoCheckpoints:
    def __init__(self) -> None:
        self._table = dynamo.table("checkpoints")

    def put(self, checkpoint: Checkpoint) -> Checkpoint:
        """Store a checkpoint once; a repeated report of the same uuid returns the stored record."""
        item = checkpoint.to_item()
        item["resources"] = dynamo.dumps(item["resources"])
        item["metadata"] = dynamo.dumps(item["metadata"])
        item.pop("used_by", None)  # a number set, grown by `add_user` only
        try:
            self._table.put_item(
                Item=dynamo.to_dynamo(item),
                ConditionExpression="attribute_not_exists(#u)",
                ExpressionAttributeNames={"#u": "uuid"},
            )
        except ClientError as error:
            if not dynamo.is_condition_failure(error):
                raise
        stored = self.get(checkpoint.uuid)
        assert stored is not None
        return stored

    def get(self, uuid: str) -> Checkpoint | None:
        item = self._table.get_item(Key={"uuid": uuid}, ConsistentRead=True).get("Item")
        return _decode(dynamo.plain(item)) if item else None

    def mark_deleted(self, uuid: str) -> None:
        dynamo.update_fields(self._table, {"uuid": uuid}, {"state": "DELETED"}, pk="uuid")

    def delete(self, uuid: str) -> None:
        self._table.delete_item(Key={"uuid": uuid})

    def add_user(self, uuid: str, experiment_id: int) -> Checkpoint | None:
        # Lost: no such checkpoint (a stub is never created).
        record = dynamo.conditional_update(
            self._table,
            {"uuid": uuid},
            "ADD used_by :e",
            "attribute_exists(#u)",
            {"#u": "uuid"},
            {":e": {experiment_id}},
        )
        return _decode(record) if record is not None else None

    def for_trial(self, trial_id: int) -> list[Checkpoint]:
        items = dynamo.query_index(self._table, "by_trial", "trial_id", trial_id)
        return sorted((_decode(i) for i in items), key=lambda c: (c.steps_completed, c.report_time))


def _decode(item: dict[str, Any]) -> Checkpoint:
    item["resources"] = json.loads(item["resources"])
    item["metadata"] = json.loads(item["metadata"])
    if "used_by" in item:
        item["used_by"] = sorted(item["used_by"])
    return Checkpoint.from_item(item)


class DynamoMetrics:
    def __init__(self) -> None:
        self._table = dynamo.table("metrics")

    def put(self, trial_id: int, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> bool:
        """Store one report; False when that (group, steps_completed) was already reported."""
        try:
            self._table.put_item(
                Item={
                    "trial_id": trial_id,
                    "key": keys.metric_report_key(group, steps_completed),
                    "group": group,
                    "steps_completed": steps_completed,
                    "metrics": json.dumps(metrics, sort_keys=True),
                    "report_time": dynamo.now_iso(),
                },
                ConditionExpression="attribute_not_exists(#k)",
                ExpressionAttributeNames={"#k": "key"},
            )
        except ClientError as error:
            if dynamo.is_condition_failure(error):
                return False
            raise
        return True

    def list(self, trial_id: int, group: str) -> list[MetricReport]:
        """The reports of one group, by steps completed."""
        items = dynamo.query_all(
            self._table,
            KeyConditionExpression="trial_id = :t AND begins_with(#k, :g)",
            ExpressionAttributeNames={"#k": "key"},
            ExpressionAttributeValues={":t": trial_id, ":g": keys.metric_group_prefix(group)},
        )
        out = []
        for item in items:
            item["metrics"] = json.loads(item["metrics"])
            out.append(MetricReport.from_item(item))
        return out

    def groups(self, trial_id: int) -> builtins.list[str]:
        """The groups the trial reported metrics under: the built-in ones first, then by name."""
        items = dynamo.query_all(
            self._table,
            KeyConditionExpression="trial_id = :t",
            ProjectionExpression="#g",
            ExpressionAttributeNames={"#g": "group"},
            ExpressionAttributeValues={":t": trial_id},
        )
        return keys.ordered_metric_groups({str(item["group"]) for item in items})

    def delete_for_trial(self, trial_id: int) -> int:
        items = list(
            dynamo.query_all(
                self._table,
                KeyConditionExpression="trial_id = :t",
                ProjectionExpression="trial_id, #k",
                ExpressionAttributeNames={"#k": "key"},
                ExpressionAttributeValues={":t": trial_id},
            )
        )
        with self._table.batch_writer() as batch:  # 25 deletes a request, unprocessed ones retried
            for item in items:
                batch.delete_item(Key={"trial_id": item["trial_id"], "key": item["key"]})
        return len(items)


class DynamoIds:
    def __init__(self) -> None:
        self._table = dynamo.table("counters")

    def next(self, counter: str) -> int:
        return dynamo.next_id(counter)

    def claim(self, key: str, counter: str) -> int:
        """The id bound to `key`, drawing a new one from `counter` the first time (idempotent creation)."""
        existing = self._table.get_item(Key={"name": key}, ConsistentRead=True).get("Item")
        if existing:
            return int(existing["value"])
        candidate = dynamo.next_id(counter)
        try:
            self._table.put_item(
                Item={"name": key, "value": candidate},
                ConditionExpression="attribute_not_exists(#n)",
                ExpressionAttributeNames={"#n": "name"},
            )
        except ClientError as error:
            if not dynamo.is_condition_failure(error):
                raise
            stored = self._table.get_item(Key={"name": key}, ConsistentRead=True)["Item"]
            return int(stored["value"])
        return candidate

    def forget(self, key: str) -> None:
        self._table.delete_item(Key={"name": key})
