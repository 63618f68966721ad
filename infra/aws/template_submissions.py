"""S3-triggered submissions in the stack: the bucket announces every `submissions/<name>/submit` marker
to the submissions queue (`chalicelib.handlers.submissions` consumes it; its Lambda's event source mapping
comes with the others from `infra/aws/template_app.py`).

One declaration, rendered twice: `notification_configuration` is the bucket's notification as the S3 API
takes it (the local stack, `infra/local/resources.py`, sets it through moto, which then sends the events to the
queue), and `template_pieces` renders it for CloudFormation with the queue policy that lets S3 send: only
`s3.amazonaws.com`, only for this bucket (`aws:SourceArn`) in this account (`aws:SourceAccount`). S3
checks that it may send when the notification is configured, so the bucket depends on the policy.

The bucket is in the template only when the stack makes it (`CreateBucket`); `det deploy aws up` makes
the bucket itself and adopts it, so it sets the same notification with `notification_configuration`
(after the stack, whose queue policy must exist first), from the `SubmissionsQueueArn` output.
"""

from __future__ import annotations

from typing import Any

from chalicelib.domain.submissions import FILTER_PREFIX, FILTER_SUFFIX
from infra.shape import EVENTS

QUEUE = "SubmissionsQueue"
POLICY = "SubmissionsQueuePolicy"


def template_pieces(bucket: dict[str, Any]) -> dict[str, Any]:
    """The queue policy; and `bucket` (the template's Bucket resource) given the notification."""
    bucket["DependsOn"] = [POLICY]
    bucket["Properties"]["NotificationConfiguration"] = {
        "QueueConfigurations": [
            {
                "Event": EVENTS,
                "Queue": {"Fn::GetAtt": [QUEUE, "Arn"]},
                "Filter": {
                    "S3Key": {
                        "Rules": [
                            {"Name": "prefix", "Value": FILTER_PREFIX},
                            {"Name": "suffix", "Value": FILTER_SUFFIX},
                        ]
                    }
                },
            }
        ]
    }
    return {
        POLICY: {
            "Type": "AWS::SQS::QueuePolicy",
            "Properties": {
                "Queues": [{"Ref": QUEUE}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "BucketSendsSubmissionMarkers",
                            "Effect": "Allow",
                            "Principal": {"Service": "s3.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": {"Fn::GetAtt": [QUEUE, "Arn"]},
                            "Condition": {
                                "ArnLike": {
                                    "aws:SourceArn": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}"}
                                },
                                "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
                            },
                        }
                    ],
                },
            },
        }
    }


OUTPUTS = {
    "SubmissionsQueueArn": {
        "Description": "Where the bucket sends submissions/<name>/submit markers (det deploy aws up sets it)",
        "Value": {"Fn::GetAtt": [QUEUE, "Arn"]},
    }
}
