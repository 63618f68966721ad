"""The embedded local stack's AWS resources, made through the APIs on its moto server from the stack's
declarations (`infra/shape.py`): `create(...)` returns the environment the control plane needs."""

from __future__ import annotations

import json
from typing import Any

from chalicelib.settings import QUEUES
from chalicelib.workflow import WorkflowResources, compile_trial_workflow
from infra.shape import TABLES, StackNames, notify_submissions, queue_attributes, table_request


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
