"""The stacks the aws tier's fixtures (`tests/aws/conftest.py`) build on the moto server: a fresh set of
resources per test (`Stack`), the API served over HTTP with records in it (`Api`), a stack deployed by
`det deploy aws up` with cloud pools (`deployed_pools_stack`)."""

from __future__ import annotations

import json
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from chalicelib.services import experiments, runs, scheduler, searching
from chalicelib.services.ports import Ports
from chalicelib.services.tokens import agent_credential
from infra.local.pump import QueuePump
from infra.local.stack import free_port, serve_api
from infra.shape import StackNames
from stratus.contract import messages

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


SERVED_AGENT_TOKEN = "agent-secret"
SERVED_CONFIG = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


@dataclass
class Api:
    url: str
    trial_id: int
    experiment_id: int
    run_id: str
    checkpoint: str
    tokens: dict[str, str]  # credential → Authorization header value (absent: no header)
    dead_run: tuple[int, str]  # a trial whose run has exited, and that run's token
    doomed: tuple[int, int]  # an experiment and its trial for the cancel and kill routes to end
    config: dict[str, Any]  # the config of the experiments it made
    http: httpx.Client  # one kept-alive connection: the local server runs each connection in a thread,
    # and the control plane builds its boto3 clients once per thread

    def call(self, method: str, path: str, credential: str, body: bytes | None = None) -> httpx.Response:
        url = self.url + path
        headers = {"Content-Type": "application/json"}
        if credential == "user":
            headers.update(_signed(method, url, body))
        elif credential in self.tokens:
            headers["Authorization"] = self.tokens[credential]
        return self.http.request(method, url, content=body, headers=headers)

    def concrete(self, path: str) -> str:
        stops = path.endswith(("/cancel", "/kill"))  # not on the records the other rows need alive
        return path.format(
            trial_id=self.doomed[1] if stops else self.trial_id,
            experiment_id=self.doomed[0] if stops else self.experiment_id,
            agent_id="local-0",
            job_id=self.experiment_id,
            run_id=self.run_id,
            uuid=self.checkpoint,
        )


def _signed(method: str, url: str, body: bytes | None) -> dict[str, str]:
    request = AWSRequest(method=method, url=url, data=body or b"")
    SigV4Auth(Credentials("testing", "testing"), "execute-api", "us-east-1").add_auth(request)
    return {k: str(v) for k, v in request.headers.items() if k.lower() in ("authorization", "x-amz-date")}


def _serve_api():  # noqa: ANN202
    port = free_port()
    return serve_api(port), f"http://127.0.0.1:{port}"


def _records(http: httpx.Client, url: str, env: dict[str, str], moto_url: str) -> Api:
    """Three experiments submitted, their trials launched and started through the API as an agent
    would; the third run then exits (its token is dead); a checkpoint of the first trial is stored."""
    agent = {"Authorization": f"Bearer {agent_credential(SERVED_AGENT_TOKEN, 'local-0')}"}
    for name in ("this", "other", "ended"):
        answer = http.post("/experiments", json={"config": {**SERVED_CONFIG, "name": name}})
        assert answer.status_code == 200, answer.text
    specs = _launch_specs(http, env, moto_url, count=3)
    for spec in specs:
        answer = http.post(f"/agents/local-0/runs/{spec['run_id']}/started", json={"pid": 1}, headers=agent)
        assert answer.status_code == 200, answer.text
    this, other, ended = sorted(specs, key=lambda s: s["experiment_id"])
    answer = http.post(
        f"/agents/local-0/runs/{ended['run_id']}/exit",
        json={"exit_code": 0, "reason": "done"},
        headers=agent,
    )
    assert answer.status_code == 200, answer.text

    def bearer(spec: dict) -> str:
        return f"Bearer {spec['environment']['STRATUS_RUN_TOKEN']}"

    checkpoint = _store_checkpoint(http, this["trial_id"], {"Authorization": bearer(this)})
    answer = http.post("/experiments", json={"config": {**SERVED_CONFIG, "name": "doomed"}})
    assert answer.status_code == 200, answer.text
    doomed = answer.json()["experiment"]["id"]
    (doomed_trial,) = http.get(f"/experiments/{doomed}").json()["trials"]
    return Api(
        url=url,
        trial_id=this["trial_id"],
        experiment_id=this["experiment_id"],
        run_id=this["run_id"],
        checkpoint=checkpoint,
        tokens={
            "wrong": "Bearer not-a-token",
            "agent": f"Bearer {agent_credential(SERVED_AGENT_TOKEN, 'local-0')}",
            "other_agent": f"Bearer {agent_credential(SERVED_AGENT_TOKEN, 'local-1')}",
            "run": bearer(this),
            "other_run": bearer(other),
        },
        dead_run=(ended["trial_id"], bearer(ended)),
        doomed=(doomed, doomed_trial["id"]),
        config=SERVED_CONFIG,
        http=http,
    )


def _launch_specs(http: httpx.Client, env: dict[str, str], moto_url: str, count: int) -> list[dict]:
    """Heartbeat as local-0 and deliver the queues to their handlers until `count` runs are launched."""
    import app as chalice_app

    sqs = boto3.client("sqs", endpoint_url=moto_url, region_name="us-east-1")
    pumps: list[QueuePump] = [
        QueuePump(
            sqs, env["STRATUS_SCHEDULER_QUEUE_URL"], chalice_app.events.on_scheduler_message, wait_seconds=0
        ),
        QueuePump(sqs, env["STRATUS_LAUNCH_QUEUE_URL"], chalice_app.events.on_launch_message, wait_seconds=0),
        QueuePump(sqs, env["STRATUS_EVENTS_QUEUE_URL"], chalice_app.events.on_trial_event, wait_seconds=0),
    ]
    specs: dict[str, dict] = {}

    def launched() -> bool:
        answer = http.post(
            "/agents/local-0/heartbeat",
            json={"pool": "default", "slots": count, "running": sorted(specs)},
            headers={"Authorization": f"Bearer {agent_credential(SERVED_AGENT_TOKEN, 'local-0')}"},
        )
        assert answer.status_code == 200, answer.text
        specs.update({spec["run_id"]: spec for spec in answer.json()["launch"]})
        for pump in pumps:
            pump.pump_once()
        return len(specs) >= count

    _wait_until(launched, timeout=60.0)
    return list(specs.values())


def _store_checkpoint(http: httpx.Client, trial_id: int, run: dict[str, str]) -> str:
    uuid = str(uuidlib.uuid4())
    answer = http.post(
        f"/trials/{trial_id}/checkpoints/uploads",
        json={"uuid": uuid, "files": ["metadata.json"]},
        headers=run,
    )
    assert answer.status_code == 200, answer.text
    metadata = json.dumps({"steps_completed": 1}).encode()
    httpx.put(answer.json()["urls"]["metadata.json"], content=metadata, timeout=30).raise_for_status()
    answer = http.post(
        f"/trials/{trial_id}/checkpoints",
        json={"uuid": uuid, "steps_completed": 1, "resources": {"metadata.json": len(metadata)}},
        headers=run,
    )
    assert answer.status_code == 200, answer.text
    return uuid


def _wait_until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")


# ---- the stack with cloud pools, created in moto's CloudFormation ------------------------------------


@dataclass
class DeployedStack:
    name: str
    #: Physical resource ids by logical id.
    resources: dict[str, str]
    outputs: dict[str, str]
    subnets: list[str]


@contextmanager
def deployed_pools_stack(
    name: str, pools: Sequence[Any], tags: dict[str, str] | None = None, **extra: str
) -> Iterator[DeployedStack]:
    """The stack of `pools` and the user's `tags` (its control plane included: a stand-in Lambda package,
    which moto stores and never runs) created in moto's CloudFormation with the shared network's
    parameters (and `extra` ones), deleted after. `AWS_ENDPOINT_URL` must point at moto."""
    import io
    import zipfile

    from infra.aws.template import template

    s3, ec2, cfn = (boto3.client(s, region_name="us-east-1") for s in ("s3", "ec2", "cloudformation"))
    bucket = name.lower() + "-bucket"
    s3.create_bucket(Bucket=bucket)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "app = None\n")
    s3.put_object(Bucket=bucket, Key="code/stratus.zip", Body=buffer.getvalue())
    subnets = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"][:2]
    parameters = {
        "BucketName": bucket,
        "CreateBucket": "false",
        "CodeKey": "code/stratus.zip",
        "AgentSubnetIds": ",".join(s["SubnetId"] for s in subnets),
        "AgentVpcId": subnets[0]["VpcId"],
        **extra,
    }
    cfn.create_stack(
        StackName=name,
        TemplateBody=json.dumps(template(pools, tags=tags)),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    cfn.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    try:
        (described,) = cfn.describe_stacks(StackName=name)["Stacks"]
        summaries = cfn.list_stack_resources(StackName=name)["StackResourceSummaries"]
        yield DeployedStack(
            name=name,
            resources={r["LogicalResourceId"]: r["PhysicalResourceId"] for r in summaries},
            outputs={o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])},
            subnets=[s["SubnetId"] for s in subnets],
        )
    finally:
        cfn.delete_stack(StackName=name)
