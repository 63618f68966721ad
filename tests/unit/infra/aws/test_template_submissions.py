"""The template's S3-triggered submissions: the bucket notifies the submissions queue of `submit` markers
only, only S3 from this bucket and account may send to it, and the state machine may not."""

from __future__ import annotations

from infra.aws.template import template
from infra.shape import notification_configuration


def test_the_bucket_sends_submit_markers_to_the_submissions_queue_once_it_may():
    resources = template()["Resources"]
    bucket = resources["Bucket"]
    assert bucket["DependsOn"] == ["SubmissionsQueuePolicy"]  # S3 checks it may send when it is configured
    (queue,) = bucket["Properties"]["NotificationConfiguration"]["QueueConfigurations"]
    assert (
        queue["Queue"] == {"Fn::GetAtt": ["SubmissionsQueue", "Arn"]}
        and queue["Event"] == "s3:ObjectCreated:*"
    )
    assert queue["Filter"]["S3Key"]["Rules"] == [
        {"Name": "prefix", "Value": "submissions/"},
        {"Name": "suffix", "Value": "/submit"},
    ]
    (statement,) = resources["SubmissionsQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert (
        statement["Principal"] == {"Service": "s3.amazonaws.com"} and statement["Action"] == "sqs:SendMessage"
    )
    assert statement["Condition"] == {
        "ArnLike": {"aws:SourceArn": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}"}},
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
    }
    assert resources["SubmissionsQueueDlq"]["Type"] == "AWS::SQS::Queue"
    source = resources["OnSubmissionFunctionSource"]["Properties"]
    assert (
        source["EventSourceArn"] == {"Fn::GetAtt": ["SubmissionsQueue", "Arn"]} and source["BatchSize"] == 1
    )


def test_only_the_bucket_sends_to_the_submissions_queue():
    resources = template()["Resources"]
    states = [
        s for p in resources["StatesRole"]["Properties"]["Policies"] for s in p["PolicyDocument"]["Statement"]
    ]
    sends = next(s for s in states if s["Action"] == "sqs:SendMessage")["Resource"]
    assert {"Fn::GetAtt": ["SubmissionsQueue", "Arn"]} not in sends


def test_the_local_stack_sets_the_same_filter():
    (queue,) = notification_configuration("arn:aws:sqs:us-east-1:1:q")["QueueConfigurations"]
    assert queue["Filter"]["Key"]["FilterRules"] == [
        {"Name": "prefix", "Value": "submissions/"},
        {"Name": "suffix", "Value": "/submit"},
    ]
