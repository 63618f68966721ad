"""S3-triggered submissions on a moto server with real boto3: the bucket's notification (set by
`infra.local.resources.create`, as on the local stack) puts each `submit` marker on the submissions queue, and
the Chalice handler answers it with an experiment and `status.json`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import app as chalice_app
from chalicelib.domain import keys
from det._archive import archive_bytes
from det._collect import collect
from infra.local.pump import QueuePump

CONFIG = """
name: from-s3
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 5}}
"""


class Submitter:
    def __init__(self, stack: Any, tmp_path: Path) -> None:
        self.stack, self.s3, self.bucket = stack, stack.client("s3"), stack.names.bucket
        (tmp_path / "train.py").write_text("print('training')\n")
        self.context = archive_bytes(collect(tmp_path))
        self.pump = QueuePump(
            stack.client("sqs"),
            stack.env["STRATUS_SUBMISSIONS_QUEUE_URL"],
            chalice_app.submissions.on_submission,
            wait_seconds=0,
        )

    def drop(self, name: str, objects: dict[str, bytes]) -> None:
        for relative, data in objects.items():
            self.s3.put_object(Bucket=self.bucket, Key=f"submissions/{name}/{relative}", Body=data)
        self.s3.put_object(Bucket=self.bucket, Key=f"submissions/{name}/submit", Body=b"")

    def status(self, name: str) -> dict[str, Any] | None:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=f"submissions/{name}/status.json")["Body"]
        except self.s3.exceptions.NoSuchKey:
            return None
        loaded: dict[str, Any] = json.loads(body.read())
        return loaded

    def answered(self, name: str, timeout: float = 30.0) -> dict[str, Any]:
        """Deliver the submissions queue to its handler until `name` has its status.json."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump.pump_once()
            status = self.status(name)
            if status is not None:
                assert self.pump.failures == 0
                return status
        raise AssertionError(f"no status.json for submission {name} within {timeout} s")

    def drain(self) -> int:
        """Deliver whatever the queue holds now; how many messages went."""
        delivered = 0
        while moved := self.pump.pump_once():
            delivered += moved
        return delivered

    def experiments(self) -> list[Any]:
        return self.stack.ports.experiments.list(100)[0]


@pytest.fixture
def submitter(stack: Any, tmp_path: Path) -> Submitter:
    return Submitter(stack, tmp_path)


def test_a_submission_becomes_an_experiment_with_its_status_beside_it(submitter: Submitter):
    submitter.drop("good", {"config.yaml": CONFIG.encode(), "context.tar.zst": submitter.context})
    status = submitter.answered("good")
    assert status["status"] == "created" and status["warnings"] == []
    (experiment,) = submitter.experiments()
    assert experiment.id == status["experiment_id"] and experiment.name == "from-s3"
    assert experiment.owner == "user"  # moto's notifications name no uploader
    assert experiment.state == "ACTIVE" and submitter.stack.ports.trials.for_experiment(experiment.id)
    # The context is the submitted archive, at its content address (verified like any upload).
    assert submitter.stack.ports.blobs.sha256_of(keys.context_key(experiment.context_sha256)) == (
        experiment.context_sha256,
        len(submitter.context),
    )


def test_a_bad_config_is_refused_in_status_json_and_nothing_is_created(submitter: Submitter):
    config = "entrypoint: python3 train.py\nsearcher: {name: single, max_length: {batches: 5}}\nresources: {slots_per_trial: -2}\n"
    submitter.drop("bad", {"config.yaml": config.encode(), "context.tar.zst": submitter.context})
    status = submitter.answered("bad")
    assert status["status"] == "refused"
    paths = {problem["path"] for problem in status["problems"]}
    assert "resources.slots_per_trial" in paths and any(p.startswith("searcher") for p in paths), status
    assert submitter.experiments() == []
    assert submitter.stack.ports.blobs.keys_under("contexts/") == []


def test_a_duplicate_delivery_and_a_re_upload_create_one_experiment(submitter: Submitter):
    submitter.drain()  # the s3:TestEvent S3 sent when the notification was set: dropped, not an error
    submitter.drop("twice", {"config.yaml": CONFIG.encode(), "train.py": b"print(1)\n"})
    sqs = submitter.stack.client("sqs")
    url = submitter.stack.env["STRATUS_SUBMISSIONS_QUEUE_URL"]
    (message,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    event = {"Records": [{"messageId": message["MessageId"], "receiptHandle": message["ReceiptHandle"],
                          "body": message["Body"], "attributes": {}, "messageAttributes": {},
                          "eventSource": "aws:sqs", "awsRegion": "us-east-1",
                          "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q"}]}  # fmt: skip
    chalice_app.submissions.on_submission(event, None)
    first = submitter.status("twice")
    chalice_app.submissions.on_submission(event, None)  # SQS delivers it again
    assert submitter.status("twice") == first and first is not None and first["status"] == "created"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    submitter.drop("twice", {"config.yaml": CONFIG.encode(), "train.py": b"print(1)\n"})  # the same again
    assert submitter.drain() == 1 and submitter.pump.failures == 0
    assert submitter.status("twice") == first
    assert [e.id for e in submitter.experiments()] == [first["experiment_id"]]


def test_an_archive_with_a_member_escaping_its_folder_is_refused(submitter: Submitter, tar_zst):
    evil = tar_zst(("train.py", b"print(1)\n"), ("../../contexts/evil.py", b"owned"))
    submitter.drop("evil", {"config.yaml": CONFIG.encode(), "context.tar.zst": evil})
    status = submitter.answered("evil")
    assert status["status"] == "refused"
    (problem,) = status["problems"]
    assert problem["path"] == "context.tar.zst" and "escapes its folder" in problem["message"]
    assert submitter.experiments() == []
