"""A real moto server (Step Functions execution on) and, per test, a fresh stack of resources in it."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import httpx
import pytest

from chalicelib import wiring
from chalicelib.aws import aws_ports
from chalicelib.services.ports import Ports
from infra.local_stack import free_port
from infra.resources import StackNames, create

_counter = itertools.count()


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    saved = {
        k: os.environ.get(k)
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "MOTO_PORT")
    }
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        MOTO_PORT=str(port),
    )
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    httpx.post(
        f"{url}/moto-api/config", json={"stepfunctions": {"execute_state_machine": True}}
    ).raise_for_status()
    yield url
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@dataclass
class Stack:
    names: StackNames
    env: dict[str, str]
    ports: Ports
    endpoint: str

    def client(self, service: str):  # noqa: ANN201
        return boto3.client(service, endpoint_url=self.endpoint, region_name="us-east-1")


@pytest.fixture
def stack(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    names = StackNames(stack=f"t{next(_counter)}x{os.getpid()}")
    env = create(boto3.session.Session(), names, endpoint_url=moto_url, visibility_timeout=1)
    env.update(
        AWS_ENDPOINT_URL=moto_url,
        STRATUS_TOKEN_SECRET="test-secret",
        STRATUS_AGENT_TOKEN="agent-secret",
        STRATUS_API_URL="http://127.0.0.1:1",
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    wiring.reset()
    yield Stack(names=names, env=env, ports=aws_ports(), endpoint=moto_url)
    wiring.reset()
