"""The embedded local stack, started once for the end-to-end tests as a user would run it, and a `det`
runner that calls the real CLI in a subprocess against it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from infra.local_stack import BackgroundStack

ROOT = Path(__file__).resolve().parents[2]


def wait_for(condition, timeout: float, what: str, interval: float = 0.2):  # noqa: ANN001, ANN201
    """Poll `condition` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@dataclass
class LocalStackInfo:
    api_url: str
    moto_url: str
    state_dir: Path

    def s3(self):  # noqa: ANN201
        return boto3.client(
            "s3",
            endpoint_url=self.moto_url,
            region_name="us-east-1",
            aws_access_key_id="stratus-local",
            aws_secret_access_key="stratus-local",
        )

    @property
    def bucket(self) -> str:
        return "stratus-123456789012-us-east-1"


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackInfo]:
    stack = BackgroundStack(tmp_path_factory.mktemp("stack"), slots=2)
    try:
        yield LocalStackInfo(
            api_url=stack.state["api_url"], moto_url=stack.state["moto_url"], state_dir=stack.log_path.parent
        )
    finally:
        stack.stop()


@dataclass
class DetResult:
    code: int
    out: str
    err: str


def run_record(moto_url: str, run_id: str) -> dict | None:
    """A run's record in the stack's DynamoDB (``stratus-runs``), attribute values unwrapped one level."""
    dynamo = boto3.client(
        "dynamodb",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id="stratus-local",
        aws_secret_access_key="stratus-local",
    )
    item = dynamo.get_item(TableName="stratus-runs", Key={"run_id": {"S": run_id}}).get("Item")
    return {name: next(iter(value.values())) for name, value in item.items()} if item else None


def det_runner(api_url: str):  # noqa: ANN201
    """Run the real `det` CLI in a subprocess against the stack at ``api_url``."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 240) -> DetResult:
        env = {**os.environ, "DET_MASTER": api_url}
        done = subprocess.run(
            [sys.executable, "-m", "det", *args],
            cwd=cwd or ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return DetResult(done.returncode, done.stdout, done.stderr)

    return run


@pytest.fixture
def det(local_stack: LocalStackInfo):  # noqa: ANN201
    return det_runner(local_stack.api_url)
