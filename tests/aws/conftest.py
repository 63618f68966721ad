"""A real moto server (Step Functions execution on) and, per test, a fresh stack of resources in it."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import httpx
import pytest

from chalicelib import wiring
from chalicelib.aws import aws_ports
from chalicelib.memory import memory_ports
from chalicelib.services.ports import Ports
from infra.local.moto_compat import moto_server
from infra.local.resources import create
from infra.local.stack import free_port
from infra.shape import StackNames
from tests.aws.stacks import SERVED_AGENT_TOKEN, Api, Stack, _records, _serve_api, deployed_pools_stack

_counter = itertools.count()
_served_stacks = itertools.count()


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
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
    server = moto_server("127.0.0.1", port)  # as the local stack serves it (presigned query requests too)
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


# ---- driving the services the way the pump and the agents do -------------------------------------------


@pytest.fixture
def stack(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    names = StackNames(stack=f"t{next(_counter)}x{os.getpid()}")
    env = create(boto3.session.Session(), names, endpoint_url=moto_url, visibility_timeout=1)
    env.update(
        AWS_ENDPOINT_URL=moto_url,
        STRATUS_TOKEN_SECRET="test-secret",
        STRATUS_AGENT_TOKEN="agent-secret",
        STRATUS_API_URL="http://127.0.0.1:1",
        STRATUS_AGENT_HEARTBEAT_S="5",  # as the local stack: the lost-agent timeout stays 30 s
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    wiring.reset()
    yield Stack(names=names, env=env, ports=aws_ports(), endpoint=moto_url)
    wiring.reset()


@pytest.fixture(params=["aws", "memory"])
def ports(request: pytest.FixtureRequest) -> Ports:
    """The ports a test of the adapters runs on, once each: the AWS adapters on moto (the `stack`), then
    the in-memory twins."""
    if request.param == "memory":
        return memory_ports()
    return request.getfixturevalue("stack").ports


# ---- the Chalice app served over HTTP on a moto stack holding real records -----------------------------
# For tests that call every route with every kind of credential (test_route_auth, test_bad_input, the
# schemathesis run): experiments, trials whose runs are live, a dead run, a checkpoint.


@pytest.fixture(scope="module")
def api(moto_url: str) -> Iterator[Api]:
    with pytest.MonkeyPatch.context() as env:
        names = StackNames(stack=f"routes{next(_served_stacks)}x{os.getpid()}")
        created = create(boto3.session.Session(), names, endpoint_url=moto_url, visibility_timeout=1)
        created.update(
            AWS_ENDPOINT_URL=moto_url,
            STRATUS_TOKEN_SECRET="test-secret",
            STRATUS_AGENT_TOKEN=SERVED_AGENT_TOKEN,
            STRATUS_API_URL="http://127.0.0.1:1",
        )
        for key, value in created.items():
            env.setenv(key, value)
        wiring.reset()
        server, url = _serve_api()
        try:
            with httpx.Client(base_url=url, timeout=30) as http:
                yield _records(http, url, created, moto_url)
        finally:
            server.shutdown()
            wiring.reset()


@pytest.fixture(name="deployed_pools_stack")
def _deployed_pools_stack(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """`deployed_pools_stack(name, pools, **parameters)`: see `deployed_pools_stack`."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    return deployed_pools_stack
