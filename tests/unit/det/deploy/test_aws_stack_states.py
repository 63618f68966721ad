"""`det deploy aws status` and `down` on stacks in the states moto never reaches (a failed create rolled
back, a delete that failed, an update that does not settle), against a stubbed CloudFormation (botocore's
Stubber): the states, the failed events' reasons and what to do; a second delete that leaves the resources
that fail again; a wait that gives up."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.stub import Stubber

from det._runtime import Runtime
from det.deploy import aws as deploy
from det.deploy.aws_calls import AwsCalls
from det.errors import StackError

STACK = "lab"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def _runtime() -> tuple[Runtime, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Runtime(environ={}, out=out, err=err, sleep=lambda s: None), out, err


def _event(n: int, logical: str, status: str, reason: str | None = None, kind: str = "AWS::Lambda::Function") -> dict[str, Any]:  # fmt: skip
    event: dict[str, Any] = {
        "StackId": f"arn:aws:cloudformation:us-east-1:123456789012:stack/{STACK}/1",
        "EventId": f"e{n}",
        "StackName": STACK,
        "LogicalResourceId": logical,
        "ResourceType": kind,
        "Timestamp": T0 + timedelta(seconds=n),
        "ResourceStatus": status,
    }
    if reason is not None:
        event["ResourceStatusReason"] = reason
    return event


def _stack_event(n: int, status: str, reason: str | None = None) -> dict[str, Any]:
    return _event(n, STACK, status, reason, kind="AWS::CloudFormation::Stack")


def _stack(status: str, **extra: Any) -> dict[str, Any]:
    return {"StackName": STACK, "StackStatus": status, "CreationTime": T0, **extra}


def _calls() -> tuple[AwsCalls, Stubber]:
    calls = AwsCalls(argparse.Namespace(region="us-east-1", profile=None))
    stubber = Stubber(calls._cfn)
    stubber.activate()
    return calls, stubber


def test_status_of_a_rolled_back_create_names_the_failed_resource_its_reason_and_what_to_do() -> None:
    calls, stubber = _calls()
    events = [
        _stack_event(1, "CREATE_IN_PROGRESS", "User Initiated"),
        _event(
            2, "Api", "CREATE_FAILED", 'Resource handler returned message: "Memory size 512 exceeds quota"'
        ),
        _event(3, "Worker", "CREATE_FAILED", "Resource creation cancelled"),
        _stack_event(4, "ROLLBACK_IN_PROGRESS", "The following resource(s) failed to create: [Api]."),
        _stack_event(5, "ROLLBACK_COMPLETE"),
    ]
    stubber.add_response("describe_stack_events", {"StackEvents": events[::-1]}, {"StackName": STACK})
    rt, out, _ = _runtime()
    found = _stack("ROLLBACK_COMPLETE", StackStatusReason="The following resource(s) failed to create: [Api].",
                   Outputs=[{"OutputKey": "StratusVersion", "OutputValue": "0.1.0"}])  # fmt: skip
    deploy.explain_state(rt, calls, STACK, found)
    text = out.getvalue()
    assert f"Stratus stack {STACK!r}: ROLLBACK_COMPLETE" in text and "Stratus 0.1.0" in text
    assert "reason: The following resource(s) failed to create: [Api]." in text
    assert "Memory size 512 exceeds quota" in text and "Resource creation cancelled" in text
    assert "`up` deletes it and creates it again" in text
    stubber.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("state", "advice"),
    [
        ("UPDATE_ROLLBACK_FAILED", f"continue-update-rollback --stack-name {STACK}"),
        ("DELETE_FAILED", "`down` again retries"),
        ("ROLLBACK_FAILED", "`down` deletes it"),
        ("CREATE_IN_PROGRESS", "an operation is under way"),
        ("UPDATE_ROLLBACK_COMPLETE", "runs its previous version"),
    ],
)
def test_status_says_what_to_do_in_each_state(state: str, advice: str) -> None:
    calls, stubber = _calls()
    stubber.add_response("describe_stack_events", {"StackEvents": []}, {"StackName": STACK})
    rt, out, _ = _runtime()
    deploy.explain_state(rt, calls, STACK, _stack(state))
    assert state in out.getvalue() and advice in out.getvalue()


def test_status_of_a_stack_that_is_fine_asks_nothing_of_its_events() -> None:
    calls, stubber = _calls()
    rt, out, _ = _runtime()
    deploy.explain_state(rt, calls, STACK, _stack("UPDATE_COMPLETE"))
    assert "what to do" not in out.getvalue()
    stubber.assert_no_pending_responses()


def test_a_second_delete_that_fails_again_leaves_the_failing_resources_and_deletes_the_rest() -> None:
    calls, stubber = _calls()
    before = [_stack_event(1, "DELETE_FAILED", "The following resource(s) failed to delete: [Bucket].")]
    stubber.add_response("describe_stack_events", {"StackEvents": before}, {"StackName": STACK})
    stubber.add_response("delete_stack", {}, {"StackName": STACK})
    failed = [
        _event(2, "Bucket", "DELETE_FAILED", "The bucket you tried to delete is not empty", "AWS::S3::Bucket")
    ]
    stubber.add_response("describe_stack_events", {"StackEvents": failed + before}, {"StackName": STACK})
    stubber.add_response("describe_stacks", {"Stacks": [_stack("DELETE_FAILED")]}, {"StackName": STACK})
    resources = [
        {"LogicalResourceId": "Bucket", "PhysicalResourceId": "lab-bucket", "ResourceType": "AWS::S3::Bucket",
         "Timestamp": T0, "ResourceStatus": "DELETE_FAILED"},
        {"LogicalResourceId": "Queue", "PhysicalResourceId": "lab-q", "ResourceType": "AWS::SQS::Queue",
         "Timestamp": T0, "ResourceStatus": "DELETE_COMPLETE"},
    ]  # fmt: skip
    stubber.add_response("describe_stack_resources", {"StackResources": resources}, {"StackName": STACK})
    stubber.add_response("describe_stack_events", {"StackEvents": failed + before}, {"StackName": STACK})
    stubber.add_response("delete_stack", {}, {"StackName": STACK, "RetainResources": ["Bucket"]})
    stubber.add_response("describe_stack_events", {"StackEvents": failed + before}, {"StackName": STACK})
    stubber.add_client_error(
        "describe_stacks",
        "ValidationError",
        f"Stack with id {STACK} does not exist",
        expected_params={"StackName": STACK},
    )
    rt, _, err = _runtime()
    assert deploy._delete(rt, calls, STACK, retry=True) == "DELETE_COMPLETE"
    assert (
        "left in place, for you to delete (the stack no longer knows them): AWS::S3::Bucket lab-bucket"
        in err.getvalue()
    )
    assert "The bucket you tried to delete is not empty" in err.getvalue()
    stubber.assert_no_pending_responses()


def test_a_first_delete_that_fails_leaves_nothing_behind_unasked() -> None:
    calls, stubber = _calls()
    stubber.add_response("describe_stack_events", {"StackEvents": []}, {"StackName": STACK})
    stubber.add_response("delete_stack", {}, {"StackName": STACK})
    stubber.add_response("describe_stack_events", {"StackEvents": []}, {"StackName": STACK})
    stubber.add_response("describe_stacks", {"Stacks": [_stack("DELETE_FAILED")]}, {"StackName": STACK})
    rt, _, _ = _runtime()
    assert deploy._delete(rt, calls, STACK, retry=False) == "DELETE_FAILED"
    stubber.assert_no_pending_responses()  # no RetainResources asked


def test_following_a_stack_that_does_not_settle_gives_up_with_what_to_do() -> None:
    calls, stubber = _calls()
    for _ in range(3):
        stubber.add_response("describe_stack_events", {"StackEvents": []}, {"StackName": STACK})
        stubber.add_response(
            "describe_stacks", {"Stacks": [_stack("UPDATE_IN_PROGRESS")]}, {"StackName": STACK}
        )
    rt, _, _ = _runtime()
    with pytest.raises(
        StackError, match="still UPDATE_IN_PROGRESS after .*`det deploy aws status --cluster-id lab`"
    ):
        deploy._follow(rt, calls, STACK, None, timeout_s=2 * deploy.POLL_S)
    stubber.assert_no_pending_responses()


def test_a_failed_create_is_deleted_before_up_creates_it_again() -> None:
    calls, stubber = _calls()
    stubber.add_response(
        "describe_stack_events", {"StackEvents": [_stack_event(1, "ROLLBACK_COMPLETE")]}, {"StackName": STACK}
    )
    stubber.add_response("delete_stack", {}, {"StackName": STACK})
    stubber.add_response("describe_stack_events", {"StackEvents": []}, {"StackName": STACK})
    stubber.add_client_error(
        "describe_stacks",
        "ValidationError",
        f"Stack with id {STACK} does not exist",
        expected_params={"StackName": STACK},
    )
    rt, _, err = _runtime()
    deploy._delete_failed_create(rt, calls, STACK)
    assert "ROLLBACK_COMPLETE: its create failed earlier" in err.getvalue()
    stubber.assert_no_pending_responses()


def test_up_warns_when_it_would_downgrade_the_stack() -> None:
    rt, _, err = _runtime()
    deploy._warn_downgrade(
        rt, STACK, _stack("UPDATE_COMPLETE", Tags=[{"Key": deploy.VERSION_TAG, "Value": "99.0"}])
    )
    assert "deployed by Stratus 99.0, newer than this CLI" in err.getvalue()
    rt, _, err = _runtime()
    deploy._warn_downgrade(
        rt, STACK, _stack("UPDATE_COMPLETE", Tags=[{"Key": deploy.VERSION_TAG, "Value": "0.0.1"}])
    )
    assert err.getvalue() == ""
