"""A real moto server (Step Functions execution on) and, per test, a fresh stack of resources in it."""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import httpx
import pytest

from chalicelib import wiring
from chalicelib.aws import aws_ports
from chalicelib.memory import memory_ports
from chalicelib.services import experiments, runs, scheduler, searching
from chalicelib.services.ports import Ports
from contract import messages
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


# ---- driving the services the way the pump and the agents do -------------------------------------------

CONTEXT_SHA = "b" * 64
LIFECYCLE_CONFIG = {
    "name": "lifecycle",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}
AGENTS = ("agent-a", "agent-b", "agent-c")


@dataclass
class Stack:
    names: StackNames
    env: dict[str, str]
    ports: Ports
    endpoint: str

    def client(self, service: str):  # noqa: ANN201
        return boto3.client(service, endpoint_url=self.endpoint, region_name="us-east-1")

    def _consumers(self) -> dict[str, Callable[[dict[str, Any]], object]]:
        p = self.ports
        return {
            self.env["STRATUS_SCHEDULER_QUEUE_URL"]: lambda body: scheduler.handle_message(
                p, messages.parse_scheduler(body)
            ),
            self.env["STRATUS_LAUNCH_QUEUE_URL"]: lambda body: runs.handle_launch(
                p, messages.parse_launch(body)
            ),
            self.env["STRATUS_EVENTS_QUEUE_URL"]: lambda body: searching.handle_event(
                p, messages.parse_event(body)
            ),
        }

    def pump_until(self, condition: Callable[[], object], timeout: float = 30.0, deliveries: int = 1) -> None:
        """Deliver queued messages to their consumers until `condition()` holds; each one `deliveries`
        times (SQS delivers at least once: every consumer must be idempotent)."""
        sqs = self.client("sqs")
        deadline = time.monotonic() + timeout
        consumers = self._consumers()
        while time.monotonic() < deadline:
            if condition():
                return
            for url, consume in consumers.items():
                for message in sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0
                ).get("Messages", []):
                    for _ in range(deliveries):
                        consume(json.loads(message["Body"]))
                    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        raise AssertionError(f"condition not met within {timeout} s")

    def submit_experiment(self, config: dict[str, Any] = LIFECYCLE_CONFIG, **overrides: Any) -> Any:
        """Upload a context and create an experiment of ``config`` (with ``overrides``) through the service."""
        key = f"contexts/{CONTEXT_SHA}.tar.zst"
        self.client("s3").put_object(Bucket=self.names.bucket, Key=key, Body=b"ctx")
        return experiments.create(self.ports, {**config, **overrides}, CONTEXT_SHA).experiment

    def launch_on_agent(self, agent: str = "agent-1") -> dict[str, Any]:
        """One 1-slot agent heartbeats until the queued trial is placed on it: its launch spec."""
        p = self.ports
        runs.heartbeat(p, agent, "default", 1, [])
        self.pump_until(lambda: any(r.state == "LAUNCHING" for r in p.runs.for_agent(agent)))
        specs = runs.heartbeat(p, agent, "default", 1, [])["launch"]
        assert len(specs) == 1
        return specs[0]

    def execution_status(self, trial_id: int) -> str:
        """The status of the trial's first Step Functions execution."""
        sfn = self.client("stepfunctions")
        arn = (
            self.env["STRATUS_STATE_MACHINE_ARN"].replace(":stateMachine:", ":execution:")
            + f":trial-{trial_id}-0"
        )
        return sfn.describe_execution(executionArn=arn)["status"]

    def launch_on_two_nodes(self, **config: Any) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
        """Three 2-slot agents, a 4-slot trial: two of them become its nodes."""
        p = self.ports
        experiment = self.submit_experiment(resources={"slots_per_trial": 4}, **config)
        for agent in AGENTS:
            runs.heartbeat(p, agent, "default", 2, [])
        self.pump_until(lambda: any(r.state == "LAUNCHING" for r in p.runs.for_agent("agent-a")))
        specs = {agent: runs.heartbeat(p, agent, "default", 2, [])["launch"] for agent in AGENTS}
        return experiment, specs

    def start_two_nodes(self, **config: Any) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """launch_on_two_nodes, then both nodes' processes started (agent-a: the chief, pid 11; agent-b, pid 22):
        the experiment, the chief's launch spec and the worker's."""
        experiment, specs = self.launch_on_two_nodes(**config)
        (chief,) = specs["agent-a"]
        (worker,) = specs["agent-b"]
        runs.started(self.ports, "agent-a", chief["run_id"], pid=11)
        runs.started(self.ports, "agent-b", worker["run_id"], pid=22)
        return experiment, chief, worker


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


@pytest.fixture(params=["aws", "memory"])
def ports(request: pytest.FixtureRequest) -> Ports:
    """The ports a test of the adapters runs on, once each: the AWS adapters on moto (the `stack`), then
    the in-memory twins."""
    if request.param == "memory":
        return memory_ports()
    return request.getfixturevalue("stack").ports
