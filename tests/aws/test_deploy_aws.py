"""`det deploy aws` against moto's CloudFormation (real boto3 calls through AWS_ENDPOINT_URL): a dry run
changes nothing; up, down and up again keep the bucket and adopt it; bad names are refused."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import boto3
import pytest

from det._runtime import Runtime
from det.cli import main

# moto's CloudFormation skips the two resource types it lacks (the secrets, the queue policy), saying so.
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS")


@pytest.fixture
def det(moto_url: str, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        runtime = Runtime(environ={}, out=out, err=err, inp=io.StringIO(), sleep=lambda s: None)
        code = main(["deploy", "aws", *argv, "--region", "us-east-1"], runtime=runtime)
        return code, out.getvalue(), err.getvalue()

    return run


def _name() -> str:
    return "Lab-" + uuid.uuid4().hex[:8]


def _tables(stack: str) -> list[str]:
    return [t for t in boto3.client("dynamodb").list_tables()["TableNames"] if t.startswith(stack + "-")]


def _buckets() -> set[str]:
    return {b["Name"] for b in boto3.client("s3").list_buckets()["Buckets"]}


def test_a_dry_run_shows_the_plan_and_changes_nothing(det, tmp_path: Path) -> None:
    stack = _name()
    code, out, _ = det("up", "--cluster-id", stack, "--dry-run", "--template-out", str(tmp_path / "t.json"))
    assert code == 0, out
    bucket = f"{stack.lower()}-123456789012-us-east-1"  # lower case: a bucket name cannot have capitals
    assert f"bucket {bucket}: made by the stack" in out and "dry run: the template" in out
    assert "8 DynamoDB::Table" in out and "1 StepFunctions::StateMachine" in out
    assert (tmp_path / "t.json").read_text().startswith("{")
    assert bucket not in _buckets() and not _tables(stack)
    assert det("status", "--cluster-id", stack)[0] == 3


def test_up_down_and_up_again_keeps_the_bucket_and_adopts_it(det) -> None:
    stack = _name()
    code, out, err = det("up", "--cluster-id", stack, "--add-tag", "team=vision")
    assert code == 0, err
    assert "CREATE_COMPLETE" in err and "BucketName" in out
    bucket = f"{stack.lower()}-123456789012-us-east-1"
    assert len(_tables(stack)) == 8 and bucket in _buckets()
    boto3.client("s3").put_object(Bucket=bucket, Key="checkpoints/1/weights", Body=b"w")
    code, out, _ = det("list")
    assert code == 0 and stack in out and bucket in out
    assert det("status", "--cluster-id", stack)[0] == 0

    assert det("down", "--cluster-id", stack)[0] == 2  # no terminal to confirm on, no --yes
    assert len(_tables(stack)) == 8
    code, out, err = det("down", "--cluster-id", stack, "--yes")
    assert code == 0, err
    assert "DELETE_COMPLETE" in err and f"kept bucket {bucket}" in out
    assert not _tables(stack) and bucket in _buckets()

    code, out, err = det("up", "--cluster-id", stack)  # the same name again: the bucket is taken (by us)
    assert code == 0, err
    assert (
        "kept from before, adopted" in out and "S3::Bucket" not in out.split("resources:")[1].split("\n")[0]
    )
    assert len(_tables(stack)) == 8
    assert boto3.client("s3").get_object(Bucket=bucket, Key="checkpoints/1/weights")["Body"].read() == b"w"
    code, out, _ = det("down", "--cluster-id", stack, "--yes", "--delete-bucket")
    assert code == 0 and f"deleted bucket {bucket} (1 objects)" in out
    assert bucket not in _buckets()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["up", "--cluster-id", "my_lab"], "--cluster-id 'my_lab' is not a stack name"),
        (["up", "--cluster-id", "lab", "--add-tag", "novalue"], "--add-tag 'novalue' is not KEY=VALUE"),
        (["up", "--cluster-id", "L" + "a" * 60], "too long for its bucket name"),
        (["down", "--cluster-id", "NoSuchLab", "--yes"], "no stack 'NoSuchLab' in region us-east-1"),
    ],
)
def test_bad_input_is_refused_with_one_line_naming_it(det, argv: list[str], message: str) -> None:
    code, _, err = det(*argv)
    assert code != 0 and message in err
