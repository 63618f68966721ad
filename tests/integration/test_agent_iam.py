"""An EC2 agent started without a credential gets its own from its instance's IAM identity, over loopback:
in process (`Agent` with ``aws=True`` and no token) and as ``python -m stratus.harness.agent --aws`` with neither
``--token-file`` nor ``STRATUS_AGENT_TOKEN``, against the fake control plane (`stratus.harness.agent.testing.
FakeApi`, whose credential route answers only a request signed with SigV4 for ``execute-api``) and the
fake metadata service (`infra.local.fake_imds`, the instance role's keys). Every wait is on a condition."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from infra.local.fake_imds import FakeImds
from stratus.harness.agent._agent import Agent
from stratus.harness.agent._settings import Settings
from stratus.harness.agent.testing import IAM_CREDENTIAL, FakeApi

REPO = Path(__file__).resolve().parents[2]
INSTANCE = "i-0iam1234abcd5678"


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    fake = FakeImds().start()
    fake.add(INSTANCE, life_cycle="on-demand", availability_zone="eu-west-1c")
    yield fake
    fake.stop()


def _scope(access_key: str) -> str:
    """The start of the Authorization header of a request signed with that key for the instance's region."""
    return f"AWS4-HMAC-SHA256 Credential={access_key}/"


def _beats_with(api: FakeApi, credential: str) -> list[dict[str, object]]:
    return [c for c in api.of("heartbeat") if c["auth"] == f"Bearer {credential}"]


def test_an_aws_agent_without_a_credential_heartbeats_with_the_one_its_identity_gets(
    api: FakeApi, imds: FakeImds, settings: Settings, wait_s: float
) -> None:
    api.accepted = {IAM_CREDENTIAL}
    aws = replace(settings, agent_id=INSTANCE, token="", aws=True, imds_url=imds.url_for(INSTANCE))
    agent = Agent(aws)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        api.wait_calls(lambda: len(_beats_with(api, IAM_CREDENTIAL)) >= 2, wait_s, "heartbeats with it")
        [asked] = api.of("iam_credential")
        assert asked["path"] == f"/agents/{INSTANCE}/iam-credential" and asked["body"] == {}
        first_key = imds.keys(INSTANCE)["AccessKeyId"]
        assert asked["auth"].startswith(_scope(first_key))
        assert "/eu-west-1/execute-api/aws4_request, " in asked["auth"]  # the instance's region
        # Every agent call carried the credential: none went out before it or without it.
        assert {c["auth"] for c in api.calls if c["kind"] != "iam_credential"} == {f"Bearer {IAM_CREDENTIAL}"}

        # The stack's agent secret changes: the old credential answers 401, and the agent asks again,
        # signing with the role's keys of now (EC2 rotated them meanwhile).
        imds.rotate_keys(INSTANCE)
        with api.cond:
            api.iam_credential = "agent-credential-after-rotation"
            api.accepted = {"agent-credential-after-rotation"}
        api.wait_calls(
            lambda: bool(_beats_with(api, "agent-credential-after-rotation")), wait_s, "a renewed credential"
        )
        renewed = api.of("iam_credential")[1]
        assert renewed["auth"].startswith(_scope(imds.keys(INSTANCE)["AccessKeyId"]))
        assert imds.keys(INSTANCE)["AccessKeyId"] != first_key
    finally:
        agent.request_stop()
        thread.join(wait_s)
    assert not thread.is_alive(), "the agent did not stop"
    assert len(api.of("iam_credential")) == 2
    assert api.of("heartbeat")[-1]["body"]["stopping"] is True


def test_an_instance_without_a_role_gets_no_credential_and_sends_no_call(
    api: FakeApi, imds: FakeImds, settings: Settings
) -> None:
    imds.add("i-0noprofile", role=None)  # no instance profile: no keys to sign with
    aws = replace(
        settings, agent_id="i-0noprofile", token="", aws=True, imds_url=imds.url_for("i-0noprofile")
    )
    agent = Agent(aws)
    assert [agent.heartbeat_once() for _ in range(3)] == [False, False, False]
    agent.request_stop()
    agent.run()  # stops at once: its last beat cannot go out either
    assert api.calls == []
    assert imds.counts[("i-0noprofile", "GET latest/meta-data/iam/security-credentials/", 404)] >= 1


def test_python_m_harness_agent_aws_gets_its_credential_from_the_instance_role(
    api: FakeApi, imds: FakeImds, tmp_path: Path, wait_s: float
) -> None:
    api.accepted = {IAM_CREDENTIAL}
    env = {k: v for k, v in os.environ.items() if k != "STRATUS_AGENT_TOKEN"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stratus.harness.agent",
            "--api",
            api.url,
            "--pool",
            "p",
            "--work-dir",
            str(tmp_path / "w"),
            "--aws",
            "--imds-url",
            imds.url_for(INSTANCE),
            "--heartbeat-interval",
            "0.1",
        ],
        cwd=REPO,
        env={**env, "CUDA_VISIBLE_DEVICES": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        api.wait_calls(lambda: bool(_beats_with(api, IAM_CREDENTIAL)), wait_s, "a heartbeat with it")
        proc.terminate()  # --aws: SIGTERM drains, then the agent stops
        out, _ = proc.communicate(timeout=wait_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out.decode()
    assert api.of("iam_credential")[0]["auth"].startswith(_scope(imds.keys(INSTANCE)["AccessKeyId"]))
    assert api.of("heartbeat")[-1]["auth"] == f"Bearer {IAM_CREDENTIAL}"
    assert b"this agent has a new credential from the control plane" in out
