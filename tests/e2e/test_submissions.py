"""End to end on the embedded local stack: an experiment dropped into the bucket (S3 → SQS → the
submissions handler) runs to COMPLETED, answered by its status.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from det._context import pack

pytestmark = pytest.mark.e2e


def test_digits_dropped_into_the_bucket_runs_to_completed(
    det, local_stack, repo_root: Path, tmp_path, wait_for
):
    config = yaml.safe_load((repo_root / "examples/digits/const.yaml").read_text())
    config["name"] = "digits-from-s3"
    config["searcher"]["max_length"] = {"batches": 60}  # a short run: validated at its end
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    packed = pack(repo_root / "examples/digits")
    (tmp_path / "submit").write_bytes(b"")
    s3, bucket, folder = local_stack.s3(), local_stack.bucket, "submissions/digits-e2e/"
    s3.upload_file(str(packed.path), bucket, folder + "context.tar.zst")
    s3.upload_file(str(tmp_path / "config.yaml"), bucket, folder + "config.yaml")
    s3.upload_file(str(tmp_path / "submit"), bucket, folder + "submit")  # the marker, last

    def status() -> dict | None:
        try:
            return json.loads(s3.get_object(Bucket=bucket, Key=folder + "status.json")["Body"].read())
        except s3.exceptions.NoSuchKey:
            return None

    answered = wait_for(status, timeout=60, what="the submission's status.json")
    assert answered["status"] == "created", answered
    experiment_id = answered["experiment_id"]

    def ended() -> dict | None:
        described = det.describe_experiment(experiment_id)
        return described if described["experiment"]["state"] in ("COMPLETED", "ERROR", "CANCELED") else None

    described = wait_for(ended, timeout=240, what=f"experiment {experiment_id} to end", interval=1.0)
    assert described["experiment"]["state"] == "COMPLETED"
    assert described["experiment"]["name"] == "digits-from-s3"
    (trial,) = described["trials"]
    assert trial["state"] == "COMPLETED" and trial["latest_validation"]["validation_accuracy"] > 0.5
