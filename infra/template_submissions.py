"""S3-triggered submissions in the stack: the bucket announces every `submissions/<name>/submit` marker
to the submissions queue (`chalicelib.handlers.submissions` consumes it; its Lambda's event source mapping
comes with the others from `infra/template_app.py`).

One declaration, rendered twice: `notification_configuration` is the bucket's notification as the S3 API
takes it (the local stack, `infra/resources.py`, sets it through moto, which then sends the events to the
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

QUEUE = "SubmissionsQueue"
POLICY = "SubmissionsQueuePolicy"
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
