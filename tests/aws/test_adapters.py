"""S3, SQS, Step Functions and CloudWatch Logs adapters against moto; the log tests run on the in-memory
twin (`chalicelib.memory`) too."""

from __future__ import annotations

import json
import time

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from chalicelib.domain.records import LogLine

pytestmark = pytest.mark.aws


def test_presigned_urls_move_bytes_without_the_api(stack):
    blobs = stack.ports.blobs
    key = "contexts/" + "a" * 64 + ".tar.zst"
    assert not blobs.exists(key)
    httpx.put(blobs.presign_put(key), content=b"payload").raise_for_status()
    assert blobs.exists(key)
    assert httpx.get(blobs.presign_get(key)).content == b"payload"
    assert blobs.uri(key) == f"s3://{stack.names.bucket}/{key}"


def test_an_empty_line_is_stored_and_read_back_empty(ports):
    logs = ports.logs
    now = int(time.time() * 1000)
    logs.put(6, [LogLine(now, ""), LogLine(now + 1, "x")])
    lines, _ = logs.get(6, 100, None, None)
    assert [(line.message, line.rank) for line in lines] == [("", None), ("x", None)]


def test_a_line_that_looks_like_a_stored_one_keeps_its_text_and_no_rank(ports):
    """Issue 11: a trial printing `{"r": 7, ...}` showed up as `[rank=7]`."""
    now = int(time.time() * 1000)
    forged = '{"r": 7, "m": "forged"}'
    ports.logs.put(7, [LogLine(now, forged), LogLine(now + 1, forged, 2)])
    lines, _ = ports.logs.get(7, 100, None, None)
    assert [(line.message, line.rank) for line in lines] == [(forged, None), (forged, 2)]


def test_logs_keep_order_ranks_and_tail(ports):
    logs = ports.logs
    assert logs.get(5, 100, None, None) == ([], None)  # no stream yet is not an error
    now = int(time.time() * 1000)  # CloudWatch refuses events older than 14 days
    logs.put(
        5,
        [
            LogLine(now + 2, "second", 1),
            LogLine(now + 1, "first"),
        ],
    )
    logs.put(5, [LogLine(now + 3, "third", 0)])
    lines, token = logs.get(5, 100, None, None)
    assert [(line.message, line.rank) for line in lines] == [
        ("first", None),
        ("second", 1),
        ("third", 0),
    ]
    more, _ = logs.get(5, 100, token, None)
    assert more == []  # following from the token gives only new lines
    tail, _ = logs.get(5, 100, None, 1)
    assert [line.message for line in tail] == ["third"]


def test_scheduler_queue_is_fifo_per_pool_and_deduplicated(stack):
    queues = stack.ports.queues
    queues.to_scheduler("default", {"type": "capacity", "pool": "default"}, dedup_id="same")
    queues.to_scheduler("default", {"type": "capacity", "pool": "default"}, dedup_id="same")
    queues.to_events({"type": "trial_exited", "experiment_id": 3})
    sqs = stack.client("sqs")
    got = sqs.receive_message(
        QueueUrl=stack.env["STRATUS_SCHEDULER_QUEUE_URL"],
        MaxNumberOfMessages=10,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )["Messages"]
    assert len(got) == 1
    assert got[0]["Attributes"]["MessageGroupId"] == "default"
    event = sqs.receive_message(
        QueueUrl=stack.env["STRATUS_EVENTS_QUEUE_URL"], MessageAttributeNames=["All"]
    )["Messages"][0]
    assert json.loads(event["Body"])["experiment_id"] == 3
    assert event["MessageAttributes"]["experiment"]["StringValue"] == "3"


def test_answering_an_unknown_task_token_is_not_an_error(stack):
    assert stack.ports.workflows.succeed("not-a-token", {"agent_id": "a"}) is False


def test_starting_the_same_execution_twice_is_a_no_op(stack):
    payload = {
        "trial_id": 999,
        "experiment_id": 1,
        "pool": "default",
        "slots": 1,
        "priority": 42,
        "max_restarts": 0,
    }
    first = stack.ports.workflows.start("trial-999-0", payload)
    assert stack.ports.workflows.start("trial-999-0", payload) == first


def test_the_moto_server_refuses_an_empty_expression_map_as_dynamodb_does(moto_url):
    """`infra.local.moto_compat.DynamoDbStrictness`: moto accepts `ExpressionAttributeNames={}`, DynamoDB answers a
    ValidationException (a searcher result report sent one, issue 28); the tests meet DynamoDB's answer."""
    dynamo = boto3.client(
        "dynamodb",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id="t",
        aws_secret_access_key="t",
    )
    dynamo.create_table(
        TableName="strict",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "N"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with pytest.raises(ClientError, match="ValidationException.*ExpressionAttributeNames must not be empty"):
        dynamo.update_item(
            TableName="strict",
            Key={"id": {"N": "1"}},
            UpdateExpression="SET v = :v",
            ExpressionAttributeNames={},
            ExpressionAttributeValues={":v": {"N": "1"}},
        )
    dynamo.update_item(
        TableName="strict", Key={"id": {"N": "1"}}, UpdateExpression="SET v = :v",
        ExpressionAttributeValues={":v": {"N": "1"}},
    )  # fmt: skip
    assert dynamo.get_item(TableName="strict", Key={"id": {"N": "1"}})["Item"]["v"] == {"N": "1"}
