"""Experiments in DynamoDB. Each record holds the validated config and the searcher's snapshot."""

from __future__ import annotations

import builtins
import json
import zlib
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import dynamo
from chalicelib.domain.records import Experiment
from chalicelib.domain.states import EXPERIMENT_TRANSITIONS, ExperimentState, allowed_sources
from chalicelib.domain.updates import ExperimentUpdates
from chalicelib.errors import ConflictError

#: The `listed` attribute of every experiment: the one key of the `newest` index.
LISTED = "experiment"
#: The `watched` attribute of an experiment the sweep should look at (`check_at`: from when): the key
#: of the sparse `watched` index, removed once a check finds nothing to do.
WATCHED = "1"


class DynamoExperiments(ExperimentUpdates):
    def __init__(self) -> None:
        self._table = dynamo.table("experiments")

    def create(self, experiment: Experiment) -> None:
        item = experiment.to_item()
        item.pop("searcher", None)  # saved by save_searcher, under its version
        item.pop("searcher_version", None)
        item["config"] = dynamo.dumps(item["config"])
        item["state"] = str(experiment.state)
        item.setdefault("version", 0)
        item["listed"] = LISTED  # the key of the `newest` index, which `list` pages through
        try:
            self._table.put_item(Item=dynamo.to_dynamo(item), ConditionExpression="attribute_not_exists(id)")
        except ClientError as error:
            if dynamo.is_condition_failure(error):
                # As the twin says it (a 409, not a 500): ids are never reused.
                raise ConflictError(
                    f"experiment {experiment.id} exists already; draw a new id from ids.next"
                ) from error
            raise

    def get(self, experiment_id: int) -> Experiment | None:
        item = self._table.get_item(Key={"id": experiment_id}, ConsistentRead=True).get("Item")
        return _decode(dynamo.plain(item)) if item else None

    def list(
        self, limit: int, before: int | None = None, *, archived: bool | None = None
    ) -> tuple[list[Experiment], int | None]:
        """Up to `limit` experiments, newest first, with ids below `before` (None: from the newest), and the
        id to pass as `before` for the next page (None: this was the last). A query of the `newest` index
        by key: an experiment created meanwhile has a higher id and never shifts a later page."""
        kwargs: dict[str, Any] = {
            "IndexName": "newest",
            "KeyConditionExpression": "listed = :listed"
            + (" AND id < :before" if before is not None else ""),
            "ExpressionAttributeValues": {
                ":listed": LISTED,
                **({":before": before} if before is not None else {}),
            },
            "ScanIndexForward": False,
        }
        if archived is not None:
            # Items written before `archived` existed have no attribute: they are not archived.
            kwargs["FilterExpression"] = (
                "#archived = :yes" if archived else "attribute_not_exists(#archived) OR #archived = :no"
            )
            kwargs["ExpressionAttributeNames"] = {"#archived": "archived"}
            kwargs["ExpressionAttributeValues"].update({":yes": True} if archived else {":no": False})
        found: list[Experiment] = []
        while True:
            page = self._table.query(Limit=limit - len(found), **kwargs)
            found += [_decode(dynamo.plain(i)) for i in page.get("Items", [])]
            last = page.get("LastEvaluatedKey")
            if last is None:
                return found, None
            if len(found) >= limit:
                return found, int(last["id"])
            kwargs["ExclusiveStartKey"] = last

    def transition(
        self, experiment_id: int, target: ExperimentState, *, end_time: str | None = None
    ) -> Experiment | None:
        sources = allowed_sources(EXPERIMENT_TRANSITIONS, target)
        sets = {"end_time": end_time} if end_time is not None else {}
        update = dynamo.transition_update(str(target), [str(s) for s in sources], sets)
        record = dynamo.conditional_update(self._table, {"id": experiment_id}, *update)
        return _decode(record) if record else None

    def set_archived(self, experiment_id: int, archived: bool) -> Experiment | None:
        terminal = [str(s) for s in ExperimentState if s.terminal]
        values = {f":t{i}": state for i, state in enumerate(terminal)}
        record = dynamo.conditional_update(
            self._table,
            {"id": experiment_id},
            "SET #archived = :archived",
            f"#state IN ({', '.join(values)})",
            {"#archived": "archived", "#state": "state"},
            {":archived": archived, **values},
        )
        return _decode(record) if record else None

    def save_searcher(self, experiment_id: int, snapshot: Mapping[str, Any], expected_version: int) -> bool:
        try:
            self._table.update_item(
                Key={"id": experiment_id},
                # zlib-compressed: an ASHA snapshot grows ~300 bytes a trial, and an item is capped at
                # 400 KB; compressed, thousands of trials fit.
                UpdateExpression="SET searcher = :s, searcher_version = :next",
                # attribute_exists(id): an UpdateItem would otherwise create a stub of a missing experiment
                # (no config: every later read of it would fail).
                ConditionExpression=(
                    "attribute_exists(id) AND "
                    "(attribute_not_exists(searcher_version) OR searcher_version = :expected)"
                ),
                ExpressionAttributeValues={
                    ":s": zlib.compress(dynamo.dumps(snapshot).encode(), 6),
                    ":next": expected_version + 1,
                    ":expected": expected_version,
                },
            )
        except ClientError as error:
            if not dynamo.is_condition_failure(error):
                raise
            found = self._table.get_item(
                Key={"id": experiment_id}, ConsistentRead=True, ProjectionExpression="id"
            )
            if "Item" not in found:
                raise ConflictError(
                    f"experiment {experiment_id} not found; create it before its searcher"
                ) from error
            return False
        return True

    def update_versioned(
        self, experiment_id: int, fields: Mapping[str, Any], expected_version: int
    ) -> Experiment | None:
        names = {"#version": "version"}
        values: dict[str, Any] = {":expected": expected_version, ":one": 1}
        assignments = ["#version = #version + :one"]
        for i, (name, value) in enumerate(fields.items()):
            names[f"#f{i}"] = name
            values[f":v{i}"] = dynamo.to_dynamo(value)
            assignments.append(f"#f{i} = :v{i}")
        record = dynamo.conditional_update(
            self._table,
            {"id": experiment_id},
            "SET " + ", ".join(assignments),
            "#version = :expected",
            names,
            values,
        )
        return _decode(record) if record else None

    def _set_experiment(self, experiment_id: int, fields: Mapping[str, Any]) -> None:
        dynamo.update_fields(self._table, {"id": experiment_id}, fields)

    def raise_progress(self, experiment_id: int, progress: float) -> None:
        # Lost: the experiment is at `progress` or beyond already (a report that raced this one), or gone.
        dynamo.update_fields(
            self._table,
            {"id": experiment_id},
            {"progress": progress},
            "attribute_exists(#pk) AND (attribute_not_exists(progress) OR progress < :p)",
            {":p": dynamo.number(progress)},
        )

    def watch(self, experiment_id: int, check_at: int) -> None:
        # Unconditional but for the record's existence: a later mark moves the check later.
        dynamo.update_fields(self._table, {"id": experiment_id}, {"watched": WATCHED, "check_at": check_at})

    def unwatch(self, experiment_id: int, check_at: int) -> bool:
        # Lost: the experiment was marked again since `check_at` was read; that newer mark stands.
        removed = dynamo.conditional_update(
            self._table,
            {"id": experiment_id},
            "REMOVE watched, check_at",
            "check_at = :seen",
            {},
            {":seen": check_at},
        )
        return removed is not None

    def due_for_check(self, now: float, limit: int) -> builtins.list[tuple[int, int]]:
        answer = self._table.query(
            IndexName="watched",
            KeyConditionExpression="watched = :w AND check_at <= :now",
            ExpressionAttributeValues={":w": WATCHED, ":now": dynamo.number(now)},
            Limit=limit,
        )
        return [(int(i["id"]), int(i["check_at"])) for i in answer.get("Items", [])]

    def delete(self, experiment_id: int) -> None:
        try:
            self._table.delete_item(
                Key={"id": experiment_id},
                ConditionExpression="#state = :deleting",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={":deleting": str(ExperimentState.DELETING)},
            )
        except ClientError as error:
            if not dynamo.is_condition_failure(error):
                raise


def _decode(item: dict[str, Any]) -> Experiment:
    item["config"] = json.loads(item["config"])
    if "searcher" in item:
        raw = item["searcher"]
        raw = bytes(raw.value if hasattr(raw, "value") else raw)
        item["searcher"] = json.loads(zlib.decompress(raw))
    return Experiment.from_item(item)
