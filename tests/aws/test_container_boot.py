"""A container job's boot (`stratus.contract.container_boot`) run by a real /bin/sh: a Batch job's fetches the
compute package from the stack's bucket (moto's S3 here, by the real boto3 one-liner), installs it and
runs the agent with the job's arguments; a SageMaker job's finds it in its `compute` channel's folder; a
job with no package ends at once, saying why. `python` is a stand-in on PATH that runs the download for
real and records the other two calls (pip and the agent) instead of installing into this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from stratus.contract.container_boot import BOOT_NAME, boot_command, boot_entrypoint

pytestmark = pytest.mark.aws

STAND_IN = """#!/bin/sh
if [ "$1" = "-c" ]; then exec {python} "$@"; fi
echo "$*" >> "$BOOT_LOG"
"""


def _boot(
    tmp_path: Path, env: dict[str, str], *arguments: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python"
    python.write_text(STAND_IN.format(python=sys.executable))
    python.chmod(0o755)
    log = tmp_path / "calls.log"
    done = subprocess.run(
        boot_command(arguments),
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "BOOT_LOG": str(log), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, log.read_text().splitlines() if log.exists() else []


def test_a_batch_job_fetches_the_package_from_the_bucket_installs_it_and_runs_the_agent(
    moto_url: str, tmp_path: Path
) -> None:
    bucket, key = (
        "boot-" + tmp_path.name.lower().replace("_", "-")[-40:],
        "compute/" + "a" * 64 + "/s-0.1-py3-none-any.whl",
    )
    s3 = boto3.client("s3", endpoint_url=moto_url)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key=key, Body=b"the wheel")
    package = tmp_path / "package"
    env = {"STRATUS_COMPUTE_URI": f"s3://{bucket}/{key}", "STRATUS_PACKAGE_DIR": str(package),
           "AWS_ENDPOINT_URL": moto_url}  # fmt: skip

    done, calls = _boot(tmp_path, env, "--only-runs", "3.1", "--api", "https://x/api")

    assert done.returncode == 0, done.stderr
    wheel = package / "s-0.1-py3-none-any.whl"
    assert wheel.read_bytes() == b"the wheel"
    assert calls == [
        f"-m pip install --quiet --disable-pip-version-check {wheel}",
        "-m stratus.harness.agent --only-runs 3.1 --api https://x/api",
    ]


@pytest.mark.parametrize("uri", ["", "s3://lab-bucket/"])  # no URI; a stack deployed without ComputeKey
def test_a_job_without_a_package_ends_at_once_saying_why(tmp_path: Path, uri: str) -> None:
    env = {"STRATUS_PACKAGE_DIR": str(tmp_path / "empty"), "STRATUS_COMPUTE_URI": uri}
    done, calls = _boot(tmp_path, env, "--api", "https://x/api")
    assert done.returncode == 64 and calls == []
    assert "stratus: no compute package" in done.stderr and "det deploy aws up" in done.stderr
    assert done.args[3] == BOOT_NAME


@pytest.mark.skipif(
    Path("/opt/ml/input/data/compute").exists(), reason="a SageMaker container's folder exists"
)
def test_a_sagemaker_job_without_its_compute_channel_ends_at_once_saying_why(tmp_path: Path) -> None:
    done = subprocess.run([*boot_entrypoint(), "--pool", "gpu"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 64
    assert "stratus: no compute package, deploy with det deploy aws up" in done.stderr
