"""The shape of one Stratus stack, declared once as data and read by both products of `infra`: its tables
and their indexes, its resources' names, its queues' attributes, and the bucket's notification of
submission markers.

`infra/aws/` renders these declarations as CloudFormation for an account; `infra/local/resources.py`
creates the same resources through the AWS APIs on the embedded moto server (where a state machine
made by CloudFormation cannot execute). Names derive from the stack name; the control plane learns them
from environment variables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from chalicelib.domain.submissions import FILTER_PREFIX, FILTER_SUFFIX
from chalicelib.settings import QUEUES
from stratus.contract.pools import PoolSpec, traits

#: The account moto plays (the local stack's, and its twins').
MOTO_ACCOUNT = "123456789012"


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
    account: str = MOTO_ACCOUNT
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


#: The bucket's notification of submission markers (`chalicelib.handlers.submissions` consumes them).
EVENTS = "s3:ObjectCreated:*"
CONFIGURATION_ID = "stratus-submissions"


def notification_configuration(queue_arn: str) -> dict[str, Any]:
    """`PutBucketNotificationConfiguration`'s `NotificationConfiguration`: markers to the queue."""
    rules = [{"Name": "prefix", "Value": FILTER_PREFIX}, {"Name": "suffix", "Value": FILTER_SUFFIX}]
    return {
        "QueueConfigurations": [
            {
                "Id": CONFIGURATION_ID,
                "QueueArn": queue_arn,
                "Events": [EVENTS],
                "Filter": {"Key": {"FilterRules": rules}},
            }
        ]
    }


def notify_submissions(s3: Any, sqs: Any, bucket: str, queue_url: str) -> None:
    """Point the bucket's marker notifications at the queue (S3 sends an `s3:TestEvent` to it at once)."""
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(
        Bucket=bucket, NotificationConfiguration=notification_configuration(arn)
    )


def group_name(pool: str, stack: str = "${AWS::StackName}") -> str:
    """What the stack names after a grouped pool (`traits(backend).grouped`: an EC2 pool's Auto Scaling
    group, a Batch pool's job queue), which the pool's `provider.group` records: `<stack>-<pool>`. In the
    template the stack's name is CloudFormation's (an `Fn::Sub` string); the IAM policy allows
    `<stack>-*`."""
    return f"{stack}-{pool}"


def with_groups(pools: Sequence[PoolSpec], stack: str = "${AWS::StackName}") -> list[PoolSpec]:
    """The pools with each grouped pool's `provider.group` named as the stack names it (`group_name`)."""
    return [
        replace(pool, provider=replace(pool.provider, group=group_name(pool.name, stack)))
        if traits(pool.backend).grouped and pool.provider is not None
        else pool
        for pool in pools
    ]
