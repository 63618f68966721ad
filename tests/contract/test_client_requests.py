"""Every request each client makes, checked against the OpenAPI document (`chalicelib.api.openapi`,
generated from the routes' pydantic models): its method and path must be an operation of the document,
and its JSON body must validate against that operation's request schema (JSON Schema 2020-12, which
pydantic writes; the models forbid unknown fields). Requests to presigned S3 URLs are not the API's.

The clients run against an in-memory answerer and record what they send: the CLI's `ApiClient`
(httpx.MockTransport), the trial's core API through `stratus.harness.init()`'s platform twins, the agent's
`AgentApi` and the launchers' `RendezvousClient` (stratus.contract.http.InMemoryTransport). Each client's test
also names the operations it must have exercised, so a client method left out of this file fails too.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

import app  # noqa: F401  (registers the routes)
from chalicelib.api.openapi import document
from det._client import ApiClient as CliClient
from stratus import harness
from stratus.contract.env import TrialEnv
from stratus.contract.http import InMemoryTransport, Request, Response
from stratus.harness.agent._api import AgentApi
from stratus.launchers._rendezvous import RendezvousClient

API = "https://api.test/v1"
TRIAL, EXPERIMENT = 7, 3
TOKEN = "run-token"
WAIT_S = 10.0


# ---- the checker -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """One request as a client sent it: the path below the API's base URL, and its decoded JSON body."""

    method: str
    path: str
    body: Any = None


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    pattern: re.Pattern[str]
    schema: dict[str, Any] | None


DOC = document()
OPERATIONS = [
    Operation(
        method.upper(),
        path,
        re.compile("^" + re.sub(r"\\{\w+\\}", "[^/]+", re.escape(path)) + "$"),
        op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema"),
    )
    for path, ops in DOC["paths"].items()
    for method, op in ops.items()
]


def operation(sent: Sent) -> Operation | None:
    return next((o for o in OPERATIONS if o.method == sent.method and o.pattern.match(sent.path)), None)


def violations(sent: Sent) -> list[str]:
    """What is wrong with a request according to the document; [] if nothing."""
    op = operation(sent)
    if op is None:
        return [f"{sent.method} {sent.path} is not an operation of the OpenAPI document"]
    where = f"{op.method} {op.template}"
    if op.schema is None:
        if sent.body not in (None, {}):
            return [f"{where} takes no body, but the client sent {sent.body!r}"]
        return []
    if sent.body is None:
        return [f"{where} needs a JSON body, but the client sent none"]
    validator = jsonschema.Draft202012Validator({**op.schema, "components": DOC["components"]})
    return [
        f"{where}: {'/'.join(map(str, e.absolute_path)) or 'body'}: {e.message}"
        for e in validator.iter_errors(sent.body)
    ]


def assert_follows_the_document(sent: list[Sent], exercised: set[str]) -> None:
    assert [v for s in sent for v in violations(s)] == []
    templates = {f"{o.method} {o.template}" for s in sent if (o := operation(s)) is not None}
    assert templates == exercised


def recorded(transport: InMemoryTransport) -> list[Sent]:
    """The API's requests among those a transport carried (not the presigned S3 ones)."""
    return [
        Sent(r.method, r.path.removeprefix("/v1"), r.json())
        for r in transport.requests
        if r.host == "api.test"
    ]


def test_the_checker_refuses_what_the_document_does_not_have() -> None:
    assert (
        violations(
            Sent("POST", "/trials/7/metrics", {"group": "training", "steps_completed": 1, "metrics": {}})
        )
        == []
    )
    assert violations(Sent("GET", "/trials/7/nothing")) == [
        "GET /trials/7/nothing is not an operation of the OpenAPI document"
    ]
    assert violations(Sent("DELETE", "/trials/7/info")) != []  # a method the path does not have
    assert violations(Sent("POST", "/trials/7/progress")) == [
        "POST /trials/{trial_id}/progress needs a JSON body, but the client sent none"
    ]
    assert violations(Sent("GET", "/trials/7/info", {"x": 1})) != []  # a body where none is taken
    wrong_type = violations(Sent("POST", "/trials/7/progress", {"progress": "half"}))
    assert len(wrong_type) == 1 and wrong_type[0].startswith("POST /trials/{trial_id}/progress: progress:")
    unknown = violations(Sent("POST", "/agents/a/runs/r/started", {"pid": 1, "host": "x"}))
    assert len(unknown) == 1 and "host" in unknown[0]


# ---- the CLI -----------------------------------------------------------------------------------------


def test_every_request_of_the_cli_is_in_the_document() -> None:
    sent: list[Sent] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "api.test":
            body = json.loads(request.content) if request.content else None
            sent.append(Sent(request.method, request.url.path.removeprefix("/v1"), body))
        return httpx.Response(200, json={})

    with CliClient(API, transport=httpx.MockTransport(answer)) as cli:
        cli.create_experiment({"name": "x"}, context_sha256="ab" * 32, validate_only=False, activate=True)
        cli.create_experiment({"name": "x"}, context_sha256=None, validate_only=True, activate=False)
        cli.create_experiment(
            {"name": "x"}, context_sha256=None, validate_only=False, activate=True, archived=True
        )
        cli.list_experiments(limit=10, cursor="eyJiZWZvcmUiOiA0fQ")
        cli.list_experiments(archived=False)
        cli.list_jobs()
        cli.list_jobs(resource_pool="gpu")
        cli.update_job("3", {"priority": 10})
        cli.update_job("3", {"ahead_of": "2"})
        cli.update_jobs([{"job_id": "3", "weight": 2.0}, {"job_id": "4", "resource_pool": "gpu"}])
        cli.list_resource_pools()
        cli.list_agents()
        cli.mint_agent_credential("gpu-7")
        cli.list_slots()
        cli.get_experiment(1)
        cli.activate_experiment(1)
        cli.cancel_experiment(1)
        cli.kill_experiment(1)
        cli.kill_trial(2)
        cli.archive_experiment(1)
        cli.unarchive_experiment(1)
        cli.list_trials(1)
        cli.list_checkpoints(1, best=3)
        cli.delete_experiment(1)
        cli.get_checkpoint("0" * 8 + "-0000-4000-8000-" + "0" * 12)
        cli.checkpoint_files("0" * 8 + "-0000-4000-8000-" + "0" * 12)
        cli.get_trial(2)
        cli.trial_metrics(2, "validation")
        cli.trial_metric_groups(2)
        cli.trial_logs(2, limit=100, next_token="t", tail=5, rank=0, level="WARNING")
        cli.request_context_upload("ab" * 32, 1024)
        cli.upload({"url": "https://s3.test/contexts/x?sig=1", "headers": {}}, b"data")
        cli.health()
        cli.info()
        cli.set_agent_enabled("gpu-1", False, drain=True)
        cli.set_agent_enabled("gpu-1", True)
    assert_follows_the_document(
        sent,
        {
            "POST /experiments",
            "GET /experiments",
            "GET /experiments/{experiment_id}",
            "POST /experiments/{experiment_id}/activate",
            "POST /experiments/{experiment_id}/cancel",
            "POST /experiments/{experiment_id}/kill",
            "POST /trials/{trial_id}/kill",
            "POST /experiments/{experiment_id}/archive",
            "POST /experiments/{experiment_id}/unarchive",
            "GET /experiments/{experiment_id}/trials",
            "GET /experiments/{experiment_id}/checkpoints",
            "DELETE /experiments/{experiment_id}",
            "GET /checkpoints/{uuid}",
            "GET /checkpoints/{uuid}/files",
            "GET /trials/{trial_id}",
            "GET /trials/{trial_id}/metrics",
            "GET /trials/{trial_id}/metric-groups",
            "GET /trials/{trial_id}/logs",
            "GET /jobs",
            "PATCH /jobs/{job_id}",
            "POST /job-queue",
            "GET /resource-pools",
            "GET /agents",
            "POST /agents/{agent_id}/credential",
            "POST /agents/{agent_id}/disable",
            "POST /agents/{agent_id}/enable",
            "GET /slots",
            "POST /contexts",
            "GET /health",
            "GET /info",
        },
    )


# ---- the trial's core API ----------------------------------------------------------------------------


class Plane:
    """Just enough of the trial-facing routes and of S3 for `stratus.harness.init()`'s twins to run."""

    def __init__(self) -> None:
        self.s3: dict[str, bytes] = {}
        self.searcher = [{"action": "train", "length": 10, "unit": "batches"}]
        self.heartbeat = threading.Event()

    def answer(self, request: Request) -> Response:
        if request.host == "s3.test":
            if request.method == "PUT":
                self.s3[request.path] = request.content
                return Response(200)
            return Response(200, content=self.s3[request.path])
        route, body = request.path.removeprefix(f"/v1/trials/{TRIAL}"), request.json()
        if route == "/info":
            info = {"trial_id": TRIAL, "experiment_id": EXPERIMENT, "run_id": "run-1", "hparams": {}}
            return Response(200, json={**info, "latest_checkpoint": None, "trial_seed": 1, "config": {}})
        if route == "/heartbeat":
            self.heartbeat.set()
            return Response(200, json={"preempt": False})
        if route == "/searcher" and request.method == "GET":
            return Response(
                200, json=self.searcher.pop(0) if self.searcher else {"action": "stop", "unit": "batches"}
            )
        if route == "/checkpoints/uploads":
            prefix = f"/b/ckpt/{body['uuid']}/"
            return Response(
                200,
                json={
                    "prefix": prefix,
                    "urls": {f: f"https://s3.test{prefix}{f}?sig=1" for f in body["files"]},
                },
            )
        if route == "/checkpoints":
            return Response(200, json={"checkpoint": {"uuid": body["uuid"], "resources": body["resources"]}})
        if request.path.startswith("/v1/checkpoints/"):
            storage_id = request.path.split("/")[3]
            urls = {
                f: f"https://s3.test/b/ckpt/{storage_id}/{f}?sig=1" for f in ("model.pt", "metadata.json")
            }
            return Response(200, json={"checkpoint": {"uuid": storage_id}, "urls": urls})
        return Response(200, json={})


@pytest.fixture
def on_platform(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    env = TrialEnv(API, TRIAL, EXPERIMENT, "run-1", TOKEN, trial_seed=1).to_env()
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield


def test_every_request_of_the_trials_core_api_is_in_the_document(on_platform: None) -> None:
    plane = Plane()
    transport = InMemoryTransport(plane.answer)
    with harness.init(transport=transport, heartbeat_interval_s=60.0, searcher_wait=lambda s: False) as ctx:
        assert plane.heartbeat.wait(WAIT_S)
        ctx.train.report_training_metrics(steps_completed=5, metrics={"loss": 0.5})
        ctx.train.report_validation_metrics(steps_completed=10, metrics={"accuracy": 0.9})
        ctx.train.report_metrics(group="inf%er en/ce", steps_completed=10, metrics={"z/me.t r%i]\\c_0": 1.0})
        for op in ctx.searcher.operations():
            op.report_progress(5)
            op.report_completed(0.9)
        with ctx.checkpoint.store_path({"steps_completed": 10}) as (path, storage_id):
            (path / "model.pt").write_bytes(b"weights")
        with ctx.checkpoint.restore_path(storage_id) as restored:
            assert (Path(restored) / "model.pt").read_bytes() == b"weights"
        ctx.searcher.report_invalid_hp("too wide")
    assert_follows_the_document(
        recorded(transport),
        {
            "GET /trials/{trial_id}/info",
            "POST /trials/{trial_id}/heartbeat",
            "POST /trials/{trial_id}/reports",
            "GET /trials/{trial_id}/searcher",
            "POST /trials/{trial_id}/searcher/completed",
            "POST /trials/{trial_id}/searcher/invalid_hp",
            "POST /trials/{trial_id}/checkpoints/uploads",
            "POST /trials/{trial_id}/checkpoints",
            "GET /checkpoints/{uuid}/downloads",
        },
    )


# ---- the agent and the launchers' rendezvous ----------------------------------------------------------


def test_every_request_of_the_agent_is_in_the_document() -> None:
    transport = InMemoryTransport(lambda request: Response(200, json={"launch": [], "kill": []}))
    api = AgentApi(API, "agent 1", "agent-token", transport=transport)
    api.heartbeat("default", 2, ["run-1", "run-2"])
    api.started("run-1", 4242)
    api.exited("run-1", 0, "exited with code 0")
    api.exited("run-2", 1, "node 1 failed", failed_rank=3)
    api.logs("7", "run-1", [{"timestamp": 1700000000000, "message": "hello", "rank": 0}], seq=1)
    api.logs("7", "run-1", [{"timestamp": 1700000000001, "message": "no rank", "rank": None}], seq=2)
    assert_follows_the_document(
        recorded(transport),
        {
            "POST /agents/{agent_id}/heartbeat",
            "POST /agents/{agent_id}/runs/{run_id}/started",
            "POST /agents/{agent_id}/runs/{run_id}/exit",
            "POST /trials/{trial_id}/logs",
        },
    )


def test_every_request_of_the_rendezvous_is_in_the_document() -> None:
    record = {"run_id": "run-1", "num_nodes": 2, "nodes": [], "ready": False}
    transport = InMemoryTransport(lambda request: Response(200, json=record))
    client = RendezvousClient(API, str(TRIAL), TOKEN, transport=transport)
    client.register(0, "10.0.0.1", 29500, timeout=1.0)
    client.register(1, "10.0.0.2", None, timeout=1.0)
    client.read(timeout=1.0)
    assert_follows_the_document(
        recorded(transport), {"POST /trials/{trial_id}/rendezvous", "GET /trials/{trial_id}/rendezvous"}
    )
