"""The AWS resources of one Stratus stack, declared once as data.

`create(...)` makes them through the APIs (used by the embedded local stack, where a state machine made by
CloudFormation cannot execute), and `infra/template.py` renders the same declarations as CloudFormation
for a real account. Names derive from the stack name; the control plane learns them from environment
variables (`stack_environment`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from chalicelib.settings import QUEUES
from chalicelib.workflow import WorkflowResources, compile_trial_workflow
from infra.template_submissions import notify_submissions


@dataclass(frozen=True)
class Index:
    name: str
    hash_key: tuple[str, str]  # (attribute, "S" | "N")
    range_key: tuple[str, str] | None = None
    projection: str = "ALL"  # or "KEYS_ONLY": an index read only for keys costs the keys' size


@dataclass(frozen=True)
class TableSpec:
    name: str
    hash_key: tuple[str, str]
    range_key: tuple[str, str] | None = None
    indexes: tuple[Index, ...] = field(default_factory=tuple)


TABLES: tuple[TableSpec, ...] = (
    # `newest`: every experiment under one key (`listed`), by id: listing pages by the last id seen.
    # `watched`: sparse, the experiments the searcher sweep should look at, by when
    # (`chalicelib.services.searcher_watch`).
    TableSpec(
        "experiments",
        ("id", "N"),
        indexes=(
            Index("newest", ("listed", "S"), ("id", "N")),
            Index("watched", ("watched", "S"), ("check_at", "N"), projection="KEYS_ONLY"),
        ),
    ),
    TableSpec("trials", ("id", "N"), indexes=(Index("by_experiment", ("experiment_id", "N"), ("id", "N")),)),
    TableSpec(
        "runs",
        ("run_id", "S"),
        indexes=(
            # A pool's queue and one job's part of it, head first (`queue_head.queue_sort_key`).
            Index("pending", ("pending_pool", "S"), ("queue_key", "S")),
            Index("pending_job", ("pending_job", "S"), ("queue_key", "S")),
            Index("allocated", ("alloc_pool", "S"), ("run_id", "S")),
            Index("by_agent", ("active_agent", "S"), ("run_id", "S")),
        ),
    ),
    TableSpec("agents", ("agent_id", "S"), indexes=(Index("by_pool", ("pool", "S"), ("agent_id", "S")),)),
    TableSpec(
        "checkpoints",
        ("uuid", "S"),
        indexes=(Index("by_trial", ("trial_id", "N"), ("steps_completed", "N")),),
    ),
    TableSpec("metrics", ("trial_id", "N"), ("key", "S")),
    TableSpec("counters", ("name", "S")),
    # One item per pool: what waits in its queue (`chalicelib.aws.queue_table`).
    TableSpec("pools", ("pool", "S")),
)


@dataclass(frozen=True)
class StackNames:
    stack: str
    account: str = "123456789012"
    region: str = "us-east-1"

    @property
    def bucket(self) -> str:
        return f"{self.stack}-{self.account}-{self.region}"

    def table(self, name: str) -> str:
        return f"{self.stack}-{name}"

    def queue(self, kind: str) -> str:
        return f"{self.stack}-{QUEUES[kind]}"

    @property
    def log_group(self) -> str:
        return f"/{self.stack}/trials"

    @property
    def state_machine(self) -> str:
        return f"{self.stack}-trial-run"


def table_request(names: StackNames, spec: TableSpec) -> dict[str, Any]:
    """The CreateTable request of a table (on-demand billing: no cost when idle)."""
    attributes = {spec.hash_key}
    keys = [{"AttributeName": spec.hash_key[0], "KeyType": "HASH"}]
    if spec.range_key:
        attributes.add(spec.range_key)
        keys.append({"AttributeName": spec.range_key[0], "KeyType": "RANGE"})
    indexes = []
    for index in spec.indexes:
        attributes.add(index.hash_key)
        index_keys = [{"AttributeName": index.hash_key[0], "KeyType": "HASH"}]
        if index.range_key:
            attributes.add(index.range_key)
            index_keys.append({"AttributeName": index.range_key[0], "KeyType": "RANGE"})
        indexes.append(
            {
                "IndexName": index.name,
                "KeySchema": index_keys,
                "Projection": {"ProjectionType": index.projection},
            }
        )
    request: dict[str, Any] = {
        "TableName": names.table(spec.name),
        "KeySchema": keys,
        "AttributeDefinitions": [{"AttributeName": a, "AttributeType": t} for a, t in sorted(attributes)],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if indexes:
        request["GlobalSecondaryIndexes"] = indexes
    return request


def queue_attributes(kind: str, visibility_timeout: int) -> dict[str, str]:
    attributes = {"VisibilityTimeout": str(visibility_timeout), "MessageRetentionPeriod": str(14 * 24 * 3600)}
    if QUEUES[kind].endswith(".fifo"):
        attributes["FifoQueue"] = "true"
        attributes["ContentBasedDeduplication"] = "true"  # as in the template (the EventBridge sweep)
    return attributes


def create(
    session: Any, names: StackNames, *, endpoint_url: str | None, visibility_timeout: int = 30
) -> dict[str, str]:
    """Create every resource of the stack; returns the environment the control plane needs."""
    kwargs = {"endpoint_url": endpoint_url, "region_name": names.region}
    s3 = session.client("s3", **kwargs)
    dynamodb = session.client("dynamodb", **kwargs)
    sqs = session.client("sqs", **kwargs)
    logs = session.client("logs", **kwargs)
    sfn = session.client("stepfunctions", **kwargs)
    iam = session.client("iam", **kwargs)

    s3.create_bucket(Bucket=names.bucket)
    for spec in TABLES:
        dynamodb.create_table(**table_request(names, spec))
    urls = {}
    for kind in QUEUES:
        dlq_name = (
            names.queue(kind).replace(".fifo", "-dlq.fifo")
            if QUEUES[kind].endswith(".fifo")
            else names.queue(kind) + "-dlq"
        )
        dlq = sqs.create_queue(QueueName=dlq_name, Attributes=queue_attributes(kind, visibility_timeout))[
            "QueueUrl"
        ]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        attributes = queue_attributes(kind, visibility_timeout)
        attributes["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"})
        urls[kind] = sqs.create_queue(QueueName=names.queue(kind), Attributes=attributes)["QueueUrl"]
    notify_submissions(s3, sqs, names.bucket, urls["submissions"])  # submissions/<name>/submit markers
    logs.create_log_group(logGroupName=names.log_group)
    role = iam.create_role(
        RoleName=f"{names.stack}-states",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "states.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    definition = compile_trial_workflow(
        WorkflowResources(
            trials_table=names.table("trials"),
            scheduler_queue_url=urls["scheduler"],
            launch_queue_url=urls["launch"],
            events_queue_url=urls["events"],
        )
    )
    machine = sfn.create_state_machine(
        name=names.state_machine, definition=json.dumps(definition), roleArn=role, type="STANDARD"
    )["stateMachineArn"]
    return {
        "STRATUS_STACK": names.stack,
        "STRATUS_BUCKET": names.bucket,
        "STRATUS_TABLE_PREFIX": f"{names.stack}-",
        "STRATUS_SCHEDULER_QUEUE_URL": urls["scheduler"],
        "STRATUS_LAUNCH_QUEUE_URL": urls["launch"],
        "STRATUS_EVENTS_QUEUE_URL": urls["events"],
        # Only the local stack's pump reads it (in AWS, S3 sends to the queue and Lambda reads it).
        "STRATUS_SUBMISSIONS_QUEUE_URL": urls["submissions"],
        "STRATUS_STATE_MACHINE_ARN": machine,
        "STRATUS_LOG_GROUP": names.log_group,
    }
