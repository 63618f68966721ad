"""A pool's queue in DynamoDB: requests in the runs table's sparse indexes, sorted by their place in the
queue, and the pool's running summary in the pools table, kept in step by transactions.

Two sparse indexes hold a run while it waits, both sorted by `queue_key` (`queue_head.queue_sort_key`):
`pending` under `pending_pool` (the pool's whole queue, head first) and `pending_job` under
`"<pool> <job>"` (one job's requests, for the fair-share scheduler). A pass reads them a page at a time
(`page`), never the whole queue.

The summary (one item per pool: `requests`, `slots`, `size <n>`, `job <id> n`, `job <id> slots`, all
top-level numbers so that `ADD` can change them) moves in the same `TransactWriteItems` as the run record
that enters the queue (a conditional put: a redelivered request changes nothing), leaves it (a
conditional update on the version read) or moves to another pool. A job's counters stay at zero once it
has nothing queued; `prune` removes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from boto3.dynamodb.types import TypeSerializer
from botocore.exceptions import ClientError

from chalicelib.aws import clients, dynamo
from chalicelib.domain.queue_head import QueueSummary
from chalicelib.domain.run_records import Run
from chalicelib.settings import get_settings

_SERIALIZER = TypeSerializer()


def _typed(value: Any) -> Any:
    return _SERIALIZER.serialize(dynamo.to_dynamo(value))


def _table_name(name: str) -> str:
    return get_settings().table(name)


def count_change(run: Run, sign: int) -> dict[str, Any]:
    """The summary update of `run` entering (+1) or leaving (-1) its pool's queue."""
    names = {
        "#n": "requests",
        "#s": "slots",
        "#size": f"size {run.slots}",
        "#jn": f"job {run.experiment_id} n",
        "#js": f"job {run.experiment_id} slots",
    }
    values = {":one": _typed(sign), ":slots": _typed(sign * run.slots)}
    return {
        "Update": {
            "TableName": _table_name("pools"),
            "Key": {"pool": {"S": run.pool}},
            "UpdateExpression": "ADD #n :one, #s :slots, #size :one, #jn :one, #js :slots",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
    }


def run_update(run_id: str, update: tuple[str, str, Mapping[str, str], Mapping[str, Any]]) -> dict[str, Any]:
    expression, condition, names, values = update
    return {
        "Update": {
            "TableName": _table_name("runs"),
            "Key": {"run_id": {"S": run_id}},
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": dict(names),
            "ExpressionAttributeValues": {k: _typed(v) for k, v in values.items()},
        }
    }


def put_run(item: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "Put": {
            "TableName": _table_name("runs"),
            "Item": {k: _typed(v) for k, v in item.items()},
            "ConditionExpression": "attribute_not_exists(run_id)",
        }
    }


def delete_run(run_id: str, version: int) -> dict[str, Any]:
    return {
        "Delete": {
            "TableName": _table_name("runs"),
            "Key": {"run_id": {"S": run_id}},
            "ConditionExpression": "#version = :v",
            "ExpressionAttributeNames": {"#version": "version"},
            "ExpressionAttributeValues": {":v": _typed(version)},
        }
    }


def transact(items: list[dict[str, Any]]) -> bool:
    """One transaction; False when a condition failed or another transaction got in the way (the
    caller reads again and decides)."""
    try:
        clients.client("dynamodb").transact_write_items(TransactItems=items)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code")
        if code in ("TransactionCanceledException", "TransactionConflictException"):
            return False
        raise
    return True


def summary(pool: str) -> QueueSummary:
    item = dynamo.table("pools").get_item(Key={"pool": pool}, ConsistentRead=True).get("Item")
    return summary_of(dynamo.plain(item or {}))


def summary_of(item: Mapping[str, Any]) -> QueueSummary:
    sizes: dict[int, int] = {}
    jobs: dict[str, list[int]] = {}
    for name, value in item.items():
        parts = name.split(" ")
        if parts[0] == "size" and len(parts) == 2 and int(value) > 0:
            sizes[int(parts[1])] = int(value)
        elif parts[0] == "job" and len(parts) == 3:
            entry = jobs.setdefault(parts[1], [0, 0])
            entry[0 if parts[2] == "n" else 1] = int(value)
    return QueueSummary(
        requests=int(item.get("requests", 0)),
        slots=int(item.get("slots", 0)),
        sizes=sizes,
        jobs={job: (n, slots) for job, (n, slots) in jobs.items() if n > 0},
    )


def prune(pool: str) -> None:
    """Drop the counters of jobs with nothing queued (each only while it is still zero)."""
    tbl = dynamo.table("pools")
    item = dynamo.plain(tbl.get_item(Key={"pool": pool}).get("Item") or {})
    for name, value in item.items():
        parts = name.split(" ")
        if parts[0] != "job" or len(parts) != 3 or parts[2] != "n" or int(value) != 0:
            continue
        try:
            tbl.update_item(
                Key={"pool": pool},
                UpdateExpression="REMOVE #n, #s",
                ConditionExpression="#n = :zero",
                ExpressionAttributeNames={"#n": name, "#s": f"job {parts[1]} slots"},
                ExpressionAttributeValues={":zero": 0},
            )
        except ClientError as error:
            if not dynamo.is_condition_failure(error):
                raise


def page(
    index: str, attribute: str, value: str, after: str | None, limit: int
) -> tuple[list[Run], str | None]:
    """Up to ``limit`` waiting runs of one queue index from just after the sort key ``after`` (from
    the head when None), in queue order; and the sort key to go on from, None when the queue ends."""
    names = {"#k": attribute}
    values: dict[str, Any] = {":v": value}
    condition = "#k = :v"
    if after is not None:
        condition += " AND #q > :after"
        names["#q"] = "queue_key"
        values[":after"] = after
    answer = dynamo.table("runs").query(
        IndexName=index,
        KeyConditionExpression=condition,
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
        Limit=limit,
    )
    runs = [Run.from_item(dynamo.plain(item)) for item in answer.get("Items", [])]
    more = "LastEvaluatedKey" in answer and len(runs) == limit
    return runs, (str(answer["Items"][-1]["queue_key"]) if more and runs else None)
