"""Shared DynamoDB plumbing: tables by logical name, value conversion, conditional-write errors."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import clients
from chalicelib.services.clock import SystemClock
from chalicelib.settings import get_settings

_CLOCK = SystemClock()


def table(name: str) -> Any:
    return clients.resource("dynamodb").Table(get_settings().table(name))


def now_iso() -> str:
    return _CLOCK.now_iso()


def now_epoch() -> float:
    return _CLOCK.now()


def plain(value: Any) -> Any:
    """DynamoDB's Decimals to ints and floats, recursively."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | set | tuple):
        return [plain(v) for v in value]
    return value


def number(value: float | int) -> Decimal:
    """A float for DynamoDB, which refuses Python floats (NaN and inf are stored as null by callers)."""
    return Decimal(str(value))


def to_dynamo(value: Any) -> Any:
    """Python floats to Decimals, recursively (boto3 refuses floats)."""
    if isinstance(value, float):
        return number(value)
    if isinstance(value, Mapping):
        return {k: to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_dynamo(v) for v in value]
    return value


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def is_condition_failure(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") in (
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
    )


def query_all(tbl: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Every item the query answers, all pages read."""
    yield from _all_pages(tbl.query, kwargs)


def scan_all(tbl: Any) -> Iterator[dict[str, Any]]:
    """Every item of a small table (the agents), all pages read."""
    yield from _all_pages(tbl.scan, {})


def _all_pages(read: Callable[..., Mapping[str, Any]], kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The items of every page `read` (a table's query or scan) answers: DynamoDB ends a page at 1 MB and
    names the key to go on from (`LastEvaluatedKey`), which the next call starts after."""
    while True:
        page = read(**kwargs)
        for item in page.get("Items", []):
            yield plain(item)
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def query_index(tbl: Any, index: str, attribute: str, value: Any) -> Iterator[dict[str, Any]]:
    """Every item of the secondary index `index` whose key `attribute` equals `value`, all pages read.
    The attribute goes by a placeholder name, so reserved words (`pool`) need no care."""
    return query_all(
        tbl,
        IndexName=index,
        KeyConditionExpression="#k = :v",
        ExpressionAttributeNames={"#k": attribute},
        ExpressionAttributeValues={":v": value},
    )


def next_id(counter: str) -> int:
    """A monotonically increasing integer id (Determined's ids are small integers)."""
    answer = table("counters").update_item(
        Key={"name": counter},
        UpdateExpression="ADD #v :one",
        ExpressionAttributeNames={"#v": "value"},
        ExpressionAttributeValues={":one": 1},
        ReturnValues="UPDATED_NEW",
    )
    return int(answer["Attributes"]["value"])


def transition_update(
    target: str,
    sources: list[str],
    sets: Mapping[str, Any] | None = None,
    removes: tuple[str, ...] = (),
    extra_condition: str = "",
    extra_values: Mapping[str, Any] | None = None,
) -> tuple[str, str, dict[str, str], dict[str, Any]]:
    """The UpdateItem that moves a record to `target` if it is in one of `sources` and bumps its version:
    (update expression, condition, names, values), for `conditional_update` or a transaction.

    Through `conditional_update`, a failed condition (a stale or illegal update) answers None, so callers
    decide whether that is idempotent success (already there) or a conflict.
    """
    names: dict[str, str] = {"#state": "state", "#version": "version"}
    values: dict[str, Any] = {":target": target, ":one": 1}
    assignments = ["#state = :target", "#version = if_not_exists(#version, :zero) + :one"]
    values[":zero"] = 0
    for i, (field, value) in enumerate((sets or {}).items()):
        names[f"#f{i}"] = field
        values[f":v{i}"] = to_dynamo(value)
        assignments.append(f"#f{i} = :v{i}")
    placeholders = []
    for i, source in enumerate(sources):
        values[f":s{i}"] = source
        placeholders.append(f":s{i}")
    condition = f"#state IN ({', '.join(placeholders)})"
    if extra_condition:
        condition = f"({condition}) AND ({extra_condition})"
        values.update(extra_values or {})
    expression = "SET " + ", ".join(assignments)
    if removes:
        for i, field in enumerate(removes):
            names[f"#r{i}"] = field
        expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(removes)))
    return expression, condition, names, values


def conditional_update(
    tbl: Any,
    key: Mapping[str, Any],
    expression: str,
    condition: str,
    names: Mapping[str, str],
    values: Mapping[str, Any],
) -> dict[str, Any] | None:
    """One conditional UpdateItem; the whole new record, or None when the condition failed."""
    # DynamoDB refuses an empty ExpressionAttributeNames (moto accepts it): sent only when there are names.
    placeholders = {"ExpressionAttributeNames": dict(names)} if names else {}
    try:
        answer = tbl.update_item(
            Key=dict(key),
            UpdateExpression=expression,
            ConditionExpression=condition,
            ExpressionAttributeValues=dict(values),
            ReturnValues="ALL_NEW",
            **placeholders,
        )
    except ClientError as error:
        if is_condition_failure(error):
            return None
        raise
    record: dict[str, Any] = plain(answer["Attributes"])
    return record


def update_map_entry(
    tbl: Any,
    key: Mapping[str, Any],
    attribute: str,
    entry: str,
    value: Any,
    condition: tuple[str, Mapping[str, Any]],
) -> dict[str, Any] | None:
    """Set ``attribute[entry] = value`` (the map must exist) if ``condition`` holds (it may use ``#state``);
    the whole new record, or None when the condition failed."""
    expression, values = condition
    return conditional_update(
        tbl,
        key,
        "SET #m.#e = :value",
        f"attribute_exists(#m) AND ({expression})",
        {"#m": attribute, "#e": entry, "#state": "state"},
        {":value": to_dynamo(value), **values},
    )


def update_fields(
    tbl: Any,
    key: Mapping[str, Any],
    sets: Mapping[str, Any],
    condition: str = "attribute_exists(#pk)",
    condition_values: Mapping[str, Any] | None = None,
    pk: str = "id",
) -> dict[str, Any] | None:
    """Set fields on an existing record; None when the condition failed. `sets` must not be empty."""
    names = {"#pk": pk}
    values: dict[str, Any] = dict(condition_values or {})
    assignments = []
    for i, (field, value) in enumerate(sets.items()):
        names[f"#f{i}"] = field
        values[f":v{i}"] = to_dynamo(value)
        assignments.append(f"#f{i} = :v{i}")
    return conditional_update(tbl, key, "SET " + ", ".join(assignments), condition, names, values)
