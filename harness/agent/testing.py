"""A testing module for the agent: a fake of the control plane's agent routes over real HTTP (`FakeApi`),
launch specs with real context archives (`spec_for`), runs started directly (`Runner`), and a polling
wait. The agent's integration tests build on it (tests/integration: test_agent.py, test_warm_start.py,
test_agent_spot.py; their fixtures `api` and `settings` are in conftest.py); nothing in the agent imports
it. `FakeApi` also answers the few trial routes a `stratus.harness.init()` trial needs to start, heartbeat and
store a checkpoint (its files PUT to the fake's own presigned URLs, kept in ``objects``), and the route an EC2
agent gets its credential from (``POST /agents/{id}/iam-credential``): ``iam_credential`` for a request
signed with SigV4 for ``execute-api`` (the header's shape is checked, not the signature), 403 otherwise.
With ``accepted`` set, the agent routes answer 401 to any other credential."""

from __future__ import annotations

import io
import json
import re
import tarfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import zstandard

from stratus.contract.launch import LaunchSpec
from stratus.harness.agent._api import AgentApi
from stratus.harness.agent._run import Run
from stratus.harness.agent._settings import Settings

T = TypeVar("T")
TOKEN = "agent-token-s3cr3t-6f1d"
#: What `FakeApi`'s iam-credential route answers unless a test sets another.
IAM_CREDENTIAL = "agent-credential-from-iam-2c9e"
#: ``Authorization`` of a SigV4 request for API Gateway: its credential scope names ``execute-api``.
SIGV4_EXECUTE_API = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=[A-Z0-9]+/\d{8}/[a-z0-9-]+/execute-api/aws4_request, "
    r"SignedHeaders=[a-z0-9;-]+, Signature=[0-9a-f]{64}$"
)
_AGENT_KINDS = ("heartbeat", "started", "exit", "logs")


def wait_until(cond: Callable[[], T], timeout: float = 15.0, what: str = "condition") -> T:
    """Poll ``cond`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def make_context(files: dict[str, str]) -> bytes:
    """A .tar.zst context archive, built with tarfile + zstandard."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return zstandard.ZstdCompressor().compress(buf.getvalue())


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan may wait a while for its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


class FakeApi:
    """Records every call in arrival order; answers heartbeats from ``launch`` / ``kill``."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.calls: list[dict[str, Any]] = []
        self.launch: list[dict[str, Any]] = []
        self.kill: list[str] = []
        self.preempt: list[str] = []
        self.repeat_launch = False  # answer every heartbeat with the same launches
        self.contexts: dict[str, bytes] = {}
        self.fail: dict[str, int] = {}  # path kind (or "context") -> how many more calls answer 503
        self.objects: dict[str, bytes] = {}  # path -> body of each PUT to a presigned upload URL
        self.iam_credential = IAM_CREDENTIAL  # the iam-credential route's answer to a signed request
        self.accepted: set[str] | None = None  # credentials the agent routes take (None: any, unchecked)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                with fake.cond:
                    failing = fake.fail.get("context", 0) > 0
                    if failing:
                        fake.fail["context"] -= 1
                fake._record("GET", self.path, None, self.headers.get("Authorization"), failed=failing)
                data = fake.contexts.get(self.path.split("?")[0])
                if not failing and fake._kind(self.path) == "trial_info":
                    self._answer(200, b'{"config": {}}')
                elif failing:
                    self._answer(503, b'{"error": "Unavailable", "message": "try again"}')
                elif data is None:
                    self._answer(404, b'{"error": "NotFound", "message": "no such context"}')
                else:
                    self._answer(200, data, "application/octet-stream")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                kind = fake._kind(self.path)
                with fake.cond:
                    failing = fake.fail.get(kind, 0) > 0
                    if failing:
                        fake.fail[kind] -= 1
                fake._record("POST", self.path, body, self.headers.get("Authorization"), failed=failing)
                if failing:
                    self._answer(503, b'{"error": "Unavailable", "message": "try again"}')
                    return
                refusal = fake._refusal(kind, self.headers.get("Authorization"))
                if refusal is not None:
                    self._answer(refusal[0], json.dumps(refusal[1]).encode())
                    return
                answer: dict[str, Any] = {}
                if kind == "iam_credential":
                    answer = {"credential": fake.iam_credential}
                elif kind == "trial_checkpoints_uploads":
                    prefix = f"{fake.url}/s3/{body['uuid']}"
                    answer = {"urls": {n: f"{prefix}/{n}?X-Amz-Signature=x" for n in body["files"]}}
                elif kind == "heartbeat":
                    with fake.cond:
                        answer = {
                            "launch": list(fake.launch),
                            "kill": list(fake.kill),
                            "preempt": list(fake.preempt),
                        }
                        if not fake.repeat_launch:
                            fake.launch.clear()
                            fake.kill.clear()
                self._answer(200, json.dumps(answer).encode())

            def do_PUT(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length)
                fake._record("PUT", self.path, None, self.headers.get("Authorization"))
                with fake.cond:
                    fake.objects[self.path.split("?")[0]] = data
                self._answer(200, b"")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @staticmethod
    def _kind(path: str) -> str:
        path = path.split("?")[0]
        if path.startswith("/s3/"):
            return "upload"
        if path.startswith("/trials/"):  # a stratus.harness.init() trial's own calls
            for kind in ("heartbeat", "info", "checkpoints/uploads", "checkpoints", "reports"):
                if path.rstrip("/").endswith("/" + kind):
                    return "trial_" + kind.replace("/", "_")
        if path.startswith("/agents/") and path.endswith("/iam-credential"):
            return "iam_credential"
        for kind in _AGENT_KINDS:
            if path.rstrip("/").endswith("/" + kind):
                return kind
        return "other"

    def _refusal(self, kind: str, auth: str | None) -> tuple[int, dict[str, str]] | None:
        """The error answer of a call this fake refuses for its credential, or None."""
        if kind == "iam_credential" and not SIGV4_EXECUTE_API.match(auth or ""):
            return 403, {"error": "Forbidden", "message": f"not signed with SigV4 for execute-api: {auth!r}"}
        with self.cond:
            accepted = self.accepted
        if kind in _AGENT_KINDS and accepted is not None and auth not in {f"Bearer {c}" for c in accepted}:
            return 401, {"error": "Unauthorized", "message": "the agent credential is not valid"}
        return None

    def _record(self, method: str, path: str, body: Any, auth: str | None, failed: bool = False) -> None:
        with self.cond:
            self.calls.append(
                {
                    "method": method,
                    "path": path,
                    "body": body,
                    "auth": auth,
                    "kind": self._kind(path),
                    "failed": failed,
                }
            )
            self.cond.notify_all()

    # -- views -----------------------------------------------------------------------------------------

    def of(self, kind: str, run_id: str | None = None, *, ok: bool = True) -> list[dict[str, Any]]:
        with self.cond:
            calls = [c for c in self.calls if c["kind"] == kind and not (ok and c["failed"])]
        if run_id is None:
            return calls
        return [
            c for c in calls if f"/runs/{run_id}/" in c["path"] or (c["body"] or {}).get("run_id") == run_id
        ]

    def log_lines(self, run_id: str) -> list[str]:
        return [line["message"] for c in self.of("logs", run_id) for line in c["body"]["lines"]]

    def wait_exit(self, run_id: str, timeout: float = 15.0) -> dict[str, Any]:
        with self.cond:
            ok = self.cond.wait_for(lambda: bool(self.of("exit", run_id)), timeout)
        assert ok, f"no exit reported for {run_id}; calls: {[c['path'] for c in self.calls]}"
        body: dict[str, Any] = self.of("exit", run_id)[0]["body"]
        return body

    def wait_log(self, run_id: str, text: str, timeout: float = 15.0) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: any(text in m for m in self.log_lines(run_id)), timeout)
        assert ok, f"{text!r} never logged by {run_id}: {self.log_lines(run_id)}"

    def wait_calls(self, pred: Callable[[], bool], timeout: float = 15.0, what: str = "calls") -> None:
        with self.cond:
            ok = self.cond.wait_for(pred, timeout)
        assert ok, f"timed out waiting for {what}"


_counter = iter(range(1, 1_000_000))


def spec_for(
    api: FakeApi,
    entrypoint: list[str] | str,
    files: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    n = next(_counter)
    path = f"/ctx/{n}.tar.zst"
    api.contexts[path] = make_context(files or {"README": "empty\n"})
    spec: dict[str, Any] = {
        "run_id": f"run-{n}",
        "trial_id": 100 + n,
        "experiment_id": 7,
        "slots": 1,
        "entrypoint": entrypoint,
        "environment": {"STRATUS_RUN_TOKEN": "run-token-x", "FROM_SPEC": "yes"},
        "context_url": f"{api.url}{path}?X-Amz-Signature=abc",
        "api_url": api.url,
    }
    spec.update(extra)
    return spec


class Runner:
    """Runs started directly (no heartbeat loop), with their client and give-up event."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = AgentApi(settings.api_url, settings.agent_id, settings.token, timeout=5)
        self.give_up = threading.Event()
        self.runs: list[Run] = []

    def start(self, spec: dict[str, Any], settings: Settings | None = None) -> Run:
        run = Run(LaunchSpec.from_json(spec), settings or self.settings, self.client, give_up=self.give_up)
        self.runs.append(run)
        run.start()
        return run

    def close(self) -> None:
        for run in self.runs:
            run.kill()
        for run in self.runs:
            run.wait(10)
        self.give_up.set()
        self.client.close()
