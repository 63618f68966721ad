"""The embedded stack's state folder (`infra/local/persistence.py`) against a real moto server: every write that
moto answered, through boto3 or a presigned URL, is back after the server is gone, whether the state was
folded into a snapshot (a clean stop) or only journaled (a kill -9), and nothing else comes back.

A "restart" here is what a new stack process sees: the old server is stopped without any goodbye, the
stack's resources are deleted from moto (a new process's moto is empty), and a new server creates them
again and restores the folder into them.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from infra.local.persistence import StateClients, StateFolder, compact, journaling_moto_server, restore
from infra.local.resources import create
from infra.local.stack import free_port
from infra.shape import TABLES, StackNames

pytestmark = pytest.mark.aws

_stacks = itertools.count()


class Life:
    """One life of a stack: a journaling moto server on the state folder, and the stack's resources."""

    def __init__(self, folder: Path, names: StackNames, moto_url: str) -> None:
        self.moto_url = moto_url
        self.state = StateFolder(folder)
        self.names = names
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = journaling_moto_server(self.state, "127.0.0.1", port)
        self.server.start()
        self.env = create(boto3.session.Session(), names, endpoint_url=self.url, visibility_timeout=5)
        self.clients = StateClients(
            boto3.session.Session(), self.url, "us-east-1", f"{names.stack}-", names.log_group
        )

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.url, region_name="us-east-1")

    def table(self, name: str) -> str:
        return self.names.table(name)

    def crash(self) -> None:
        """The process ends: no snapshot, no goodbye; then its resources vanish (a new moto is empty)."""
        self.server.stop()
        self.state.close()
        _delete_resources(self.names, self.env, self.moto_url)


def _delete_resources(names: StackNames, env: dict[str, str], moto_url: str) -> None:
    # The servers of one process share moto's backends: delete what the next life creates again.
    def client(service: str) -> Any:
        return boto3.client(service, endpoint_url=moto_url, region_name="us-east-1")

    dynamodb, s3, logs = client("dynamodb"), client("s3"), client("logs")
    sqs, sfn, iam = client("sqs"), client("stepfunctions"), client("iam")
    for spec in TABLES:
        dynamodb.delete_table(TableName=names.table(spec.name))
    for item in s3.list_objects_v2(Bucket=names.bucket).get("Contents", []):
        s3.delete_object(Bucket=names.bucket, Key=item["Key"])
    s3.delete_bucket(Bucket=names.bucket)
    logs.delete_log_group(logGroupName=names.log_group)
    for url in sqs.list_queues(QueueNamePrefix=names.stack).get("QueueUrls", []):
        sqs.delete_queue(QueueUrl=url)
    sfn.delete_state_machine(stateMachineArn=env["STRATUS_STATE_MACHINE_ARN"])
    iam.delete_role(RoleName=f"{names.stack}-states")


@pytest.fixture
def lives(moto_url: str, tmp_path: Path) -> Iterator[list[Life]]:
    """Lives of one stack on one state folder (the moto_url fixture sets the credentials and the region)."""
    made: list[Life] = []
    yield made
    for life in made:
        life.server.stop()
        life.state.close()


def _start(lives: list[Life], folder: Path, moto_url: str) -> Life:
    names = lives[0].names if lives else StackNames(stack=f"persist{next(_stacks)}")
    life = Life(folder, names, moto_url)
    if life.state.exists():
        restore(life.state, life.clients)
    compact(life.state, life.clients)
    lives.append(life)
    return life


def _everything(life: Life) -> dict[str, Any]:
    dynamodb = life.client("dynamodb")
    tables = {}
    for table in life.clients.tables():
        items = dynamodb.scan(TableName=table)["Items"]
        tables[table] = sorted(items, key=repr)
    s3 = life.client("s3")
    objects = {
        item["Key"]: s3.get_object(Bucket=life.names.bucket, Key=item["Key"])["Body"].read()
        for item in s3.list_objects_v2(Bucket=life.names.bucket).get("Contents", [])
    }
    logs = life.client("logs")
    streams = {
        stream["logStreamName"]: [
            (e["timestamp"], e["message"])
            for e in logs.get_log_events(
                logGroupName=life.names.log_group, logStreamName=stream["logStreamName"], startFromHead=True
            )["events"]
        ]
        for stream in logs.describe_log_streams(logGroupName=life.names.log_group)["logStreams"]
    }
    return {"tables": tables, "objects": objects, "logs": streams}


def _write_some(life: Life, n: int) -> None:
    """Writes of every kind the stack makes, through boto3 and through presigned URLs."""
    dynamodb = life.client("dynamodb")
    counters, runs = life.table("counters"), life.table("runs")
    dynamodb.put_item(TableName=runs, Item={"run_id": {"S": f"r{n}"}, "blob": {"B": bytes([n, 0, 255])}})
    for _ in range(3):  # a counter: replayed in order it reaches the same value
        dynamodb.update_item(
            TableName=counters,
            Key={"name": {"S": "experiments"}},
            UpdateExpression="ADD next_id :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
    with pytest.raises(dynamodb.exceptions.ConditionalCheckFailedException):  # refused: not journaled
        dynamodb.put_item(
            TableName=runs,
            Item={"run_id": {"S": f"r{n}"}},
            ConditionExpression="attribute_not_exists(run_id)",
        )
    dynamodb.batch_write_item(
        RequestItems={runs: [{"PutRequest": {"Item": {"run_id": {"S": f"batch{n}-{i}"}}}} for i in range(3)]}
    )
    dynamodb.transact_write_items(
        TransactItems=[
            {"Delete": {"TableName": runs, "Key": {"run_id": {"S": f"batch{n}-0"}}}},
            {
                "Update": {
                    "TableName": runs,
                    "Key": {"run_id": {"S": f"batch{n}-1"}},
                    "UpdateExpression": "SET #s = :s",
                    "ExpressionAttributeNames": {"#s": "state"},
                    "ExpressionAttributeValues": {":s": {"S": "EXITED"}},
                }
            },
        ]
    )
    dynamodb.delete_item(TableName=runs, Key={"run_id": {"S": f"batch{n}-2"}})
    logs = life.client("logs")
    stream = f"trial-{n}"
    logs.create_log_stream(logGroupName=life.names.log_group, logStreamName=stream)
    logs.put_log_events(
        logGroupName=life.names.log_group,
        logStreamName=stream,
        logEvents=[
            {"timestamp": int(time.time() * 1000) - 1000 + i, "message": f"line {i} of {n}"} for i in range(5)
        ],
    )
    s3, bucket = life.client("s3"), life.names.bucket
    s3.put_object(Bucket=bucket, Key=f"checkpoints/{n}/state.pt", Body=b"weights" * (n + 1))
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": f"contexts/{n}.tar.zst"})
    httpx.put(url, content=b"context bytes %d" % n).raise_for_status()  # what `det` and the harness do
    s3.copy_object(
        Bucket=bucket, Key=f"copies/{n}", CopySource={"Bucket": bucket, "Key": f"contexts/{n}.tar.zst"}
    )
    s3.put_object(Bucket=bucket, Key=f"gone/{n}/a", Body=b"a")
    s3.put_object(Bucket=bucket, Key=f"gone/{n}/b", Body=b"b")
    s3.delete_object(Bucket=bucket, Key=f"gone/{n}/a")
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"gone/{n}/b"}]})


def test_a_kill_loses_no_answered_write(lives: list[Life], tmp_path: Path, moto_url: str) -> None:
    first = _start(lives, tmp_path, moto_url)
    _write_some(first, 1)
    before = _everything(first)
    first.crash()  # nothing folded: everything is in the journal and the object files

    second = _start(lives, tmp_path, moto_url)

    assert _everything(second) == before
    assert before["tables"][first.table("counters")][0]["next_id"] == {"N": "3"}
    assert before["objects"]["copies/1"] == b"context bytes 1"
    assert [message for _, message in before["logs"]["trial-1"]] == [f"line {i} of 1" for i in range(5)]
    assert not any(key.startswith("gone/") for key in before["objects"])


def test_snapshot_then_journal_then_a_torn_line(lives: list[Life], tmp_path: Path, moto_url: str) -> None:
    first = _start(lives, tmp_path, moto_url)
    _write_some(first, 1)
    compact(first.state, first.clients)  # what a clean stop does
    _write_some(first, 2)
    before = _everything(first)
    journal = first.state.db / f"journal.{first.state.journal_number}.jsonl"
    first.crash()
    with journal.open("a") as torn:  # the process died in the middle of a line
        torn.write('{"target": "DynamoDB_20120810.PutItem", "body": "{\\"Tab')

    second = _start(lives, tmp_path, moto_url)

    assert _everything(second) == before
    # The restart folded everything into a new snapshot: the old journals are gone.
    assert [number for number, _ in second.state.journals(0)] == [second.state.journal_number]
    second.crash()
    third = _start(lives, tmp_path, moto_url)
    assert _everything(third) == before


def test_a_restored_object_carries_the_checksum_of_its_bytes(
    lives: list[Life], tmp_path: Path, moto_url: str
) -> None:
    first = _start(lives, tmp_path, moto_url)
    _write_some(first, 1)
    first.crash()

    second = _start(lives, tmp_path, moto_url)

    head = second.client("s3").head_object(
        Bucket=second.names.bucket, Key="contexts/1.tar.zst", ChecksumMode="ENABLED"
    )
    assert head["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"context bytes 1").digest()).decode()


def test_delete_db_forgets_everything(lives: list[Life], tmp_path: Path, moto_url: str) -> None:
    first = _start(lives, tmp_path, moto_url)
    _write_some(first, 1)
    first.crash()
    StateFolder(tmp_path).delete()

    second = _start(lives, tmp_path, moto_url)

    state = _everything(second)
    assert all(items == [] for items in state["tables"].values())
    assert state["objects"] == {} and state["logs"] == {}


def test_a_long_journal_asks_to_be_folded(lives: list[Life], tmp_path: Path, moto_url: str) -> None:
    first = _start(lives, tmp_path, moto_url)
    first.state.compact_after = 5
    assert not first.state.compaction_due.is_set()
    _write_some(first, 1)  # nine journaled writes
    assert first.state.compaction_due.is_set()
    compact(first.state, first.clients)  # what the stack's compactor then does
    assert not first.state.compaction_due.is_set()
    assert (first.state.db / f"journal.{first.state.journal_number}.jsonl").read_text() == ""
