"""The stack's DynamoDB tables as `det deploy aws up` keeps them (a part of `det.deploy.aws_calls.AwsCalls`):
made outside the stack, as the bucket is, so that the experiments' records (experiments, trials, metrics,
checkpoints) outlive `det deploy aws down` and the next stack of the same name finds them.

Why outside the stack: a table kept by `DeletionPolicy: Retain` still has its name, and CloudFormation
cannot create a table whose name exists; taking it back into a new stack needs a resource import (an
IMPORT change set per table), which moto does not play. So `up` makes the tables that are missing
(`infra.shape.TABLES`: encrypted, on demand, tagged like the stack, point-in-time recovery on), adds an
index a newer version declares to a kept table, and deploys the template with `CreateTables=false`, which
then names the tables (`<stack>-<name>`) instead of making them. `down --delete-data` deletes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from det.errors import StackError

#: How long `up` waits for a table, or a kept table's new index, to be ACTIVE (DynamoDB backfills an index
#: in minutes for a small table).
ACTIVE_WAIT_S = 1800.0


@dataclass(frozen=True)
class TablesKept:
    made: tuple[str, ...]
    kept: tuple[str, ...]
    indexes_added: tuple[str, ...]


class TableCalls:
    """Needs the `AwsCalls` attributes below."""

    _session: Any
    _errors: Any

    def stack_tables(self, stack: str) -> list[str]:
        """The names of the stack's tables (`<stack>-<name>`) that exist."""
        from infra.shape import TABLES, StackNames

        names = StackNames(stack=stack)
        return [names.table(spec.name) for spec in TABLES if self._table(names.table(spec.name)) is not None]

    def keep_tables(
        self, stack: str, tags: Sequence[dict[str, str]], sleep: Callable[[float], None], poll_s: float
    ) -> TablesKept:
        """Make the stack's missing tables and the missing indexes of its kept ones, wait for them to be
        ACTIVE, and turn point-in-time recovery on where it is off."""
        from infra.shape import TABLES, StackNames, table_request

        dynamodb = self._session.client("dynamodb")
        names = StackNames(stack=stack)
        made, kept, added = [], [], []
        for spec in TABLES:
            request = table_request(names, spec)
            found = self._table(request["TableName"])
            if found is None:
                dynamodb.create_table(**request, SSESpecification={"Enabled": True}, Tags=list(tags))
                made.append(request["TableName"])
                continue
            kept.append(request["TableName"])
            if found.get("KeySchema") != request["KeySchema"]:
                raise StackError(
                    f"table {request['TableName']} has the keys {found.get('KeySchema')}, not those of this "
                    f"version ({request['KeySchema']}); move its items to a table of the new keys, or delete it "
                    "(`det deploy aws down --delete-data` deletes every table of the stack)"
                )
            have = {index["IndexName"] for index in found.get("GlobalSecondaryIndexes", [])}
            for index in request.get("GlobalSecondaryIndexes", []):
                if index["IndexName"] in have:
                    continue
                # One index a request, each backfilled before the next (DynamoDB's rule).
                dynamodb.update_table(
                    TableName=request["TableName"],
                    AttributeDefinitions=request["AttributeDefinitions"],
                    GlobalSecondaryIndexUpdates=[{"Create": index}],
                )
                added.append(f"{request['TableName']}/{index['IndexName']}")
                self._wait_active(request["TableName"], sleep, poll_s)
        for table in made + kept:
            self._wait_active(table, sleep, poll_s)
            backups = dynamodb.describe_continuous_backups(TableName=table)["ContinuousBackupsDescription"]
            recovery = backups.get("PointInTimeRecoveryDescription", {}).get("PointInTimeRecoveryStatus")
            if recovery != "ENABLED":
                dynamodb.update_continuous_backups(
                    TableName=table, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
                )
        return TablesKept(tuple(made), tuple(kept), tuple(added))

    def delete_tables(self, stack: str) -> list[str]:
        """Delete the stack's tables (those that exist); their names."""
        dynamodb = self._session.client("dynamodb")
        deleted = []
        for table in self.stack_tables(stack):
            try:
                dynamodb.delete_table(TableName=table)
            except dynamodb.exceptions.ResourceNotFoundException:
                continue
            deleted.append(table)
        return deleted

    def _table(self, name: str) -> dict[str, Any] | None:
        dynamodb = self._session.client("dynamodb")
        try:
            return dict(dynamodb.describe_table(TableName=name)["Table"])
        except dynamodb.exceptions.ResourceNotFoundException:
            return None

    def _wait_active(self, name: str, sleep: Callable[[float], None], poll_s: float) -> None:
        waited = 0.0
        while True:
            found = self._table(name) or {}
            states = [found.get("TableStatus")] + [
                i.get("IndexStatus") for i in found.get("GlobalSecondaryIndexes", [])
            ]
            if all(state == "ACTIVE" for state in states):
                return
            if waited >= ACTIVE_WAIT_S:
                raise StackError(
                    f"table {name} is not ACTIVE after {ACTIVE_WAIT_S:.0f} s ({', '.join(map(str, states))}); "
                    "run `det deploy aws up` again once it is"
                )
            sleep(poll_s)
            waited += poll_s
