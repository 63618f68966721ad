"""A job's credential objects on a real (moto) S3: the control plane writes one per lane
(`chalicelib.compute.cloud.JobCredentials` over the stack's bucket), and each node's agent reads its own
over HTTP with the standard-library SigV4 signer and deletes it (`stratus.harness.agent._job_credential`). moto
checks no signature: tests/unit/harness/agent/test_job_credential.py holds the signer to botocore's."""

from __future__ import annotations

from pathlib import Path

import pytest

from chalicelib.aws.storage import S3Blobs
from chalicelib.compute.cloud import JobCredentials
from chalicelib.services.tokens import agent_credential
from stratus.harness.agent._job_credential import (
    JobCredentialError,
    fetch_job_credential,
    with_job_credential,
)
from stratus.harness.agent._settings import parse_cli

LANES = ("batch-default-0", "batch-default-1")


def test_each_node_reads_its_own_object_once_through_the_s3_endpoint(stack) -> None:  # noqa: ANN001
    job = f"{stack.names.stack}-run-7-1"
    location = JobCredentials(S3Blobs(), "agent-secret").write(job, LANES)
    assert location == f"s3://{stack.names.bucket}/credentials/{job}/"
    s3 = stack.client("s3")
    listed = s3.list_objects_v2(Bucket=stack.names.bucket, Prefix="credentials/")["Contents"]
    assert sorted(o["Key"] for o in listed) == [f"credentials/{job}/{lane}" for lane in LANES]

    # The job's container: its role's keys in the environment, S3 at moto's endpoint.
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "session",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": stack.endpoint,
    }
    credential = fetch_job_credential(location, LANES[1], env, api_url="http://127.0.0.1:1")
    assert credential == agent_credential("agent-secret", LANES[1])
    left = s3.list_objects_v2(Bucket=stack.names.bucket, Prefix="credentials/")["Contents"]
    assert [o["Key"] for o in left] == [f"credentials/{job}/{LANES[0]}"]  # the other node's is still there

    with pytest.raises(
        JobCredentialError, match=f"s3://{stack.names.bucket}/credentials/{job}/{LANES[1]} is not there"
    ):
        fetch_job_credential(location, LANES[1], env, api_url="http://127.0.0.1:1")


def test_a_job_agent_reads_its_object_once_its_settings_are_parsed(stack, tmp_path: Path) -> None:  # noqa: ANN001
    job = f"{stack.names.stack}-run-8-1"
    location = JobCredentials(S3Blobs(), "agent-secret").write(job, LANES)
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": stack.endpoint,
        "AWS_BATCH_JOB_NODE_INDEX": "0",
    }
    argv = [
        "--api", "http://127.0.0.1:1", "--pool", "default", "--work-dir", str(tmp_path),
        "--only-runs", "r1,r2", "--batch-agents", ",".join(LANES), "--credential-from", location,
    ]  # fmt: skip
    parsed = parse_cli(argv, env)
    s3 = stack.client("s3")
    listed = s3.list_objects_v2(Bucket=stack.names.bucket, Prefix=f"credentials/{job}/")["Contents"]
    assert parsed.settings.token == "" and len(listed) == 2  # parsing reads nothing

    opts = with_job_credential(parsed, env)
    assert (opts.settings.agent_id, opts.settings.token) == (
        LANES[0],
        agent_credential("agent-secret", LANES[0]),
    )
    left = s3.list_objects_v2(Bucket=stack.names.bucket, Prefix=f"credentials/{job}/")["Contents"]
    assert [o["Key"] for o in left] == [f"credentials/{job}/{LANES[1]}"]
