"""Fixtures and test doubles shared by the unit tests. Nothing here does IO: the fakes answer through
in-memory transports (httpx.MockTransport for the CLI, stratus.contract.http.InMemoryTransport for the trial), and
a guard fails any unit test that starts a process or opens a socket (such a test belongs in
tests/integration).

- the CLI's fake API for tests/unit/test_cli*.py: the `api` fixture (a FakeApi; `api.run(*argv)` runs the
  CLI against it), with `fake_pack` (and `table_rows` from tests/conftest.py);
- the trial's fake control plane for tests/unit/test_harness_*.py and tests/unit/test_compat.py: the
  `plane_kit` fixture (FakePlane, SearcherPlane, Waits, the run they serve, `platform_env`).

Tests reach these through fixtures only, never by importing this module.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest

from det import cli
from det._runtime import Runtime
from stratus.contract.env import TrialEnv
from stratus.contract.http import InMemoryTransport, Request, Response
from stratus.contract.log_levels import at_or_above

# ---- no IO in this tier ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_processes_or_sockets(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """A unit test that starts a process or connects/binds a socket fails, naming the tier it belongs to."""

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(
            f"{request.node.nodeid} starts a process or opens a socket: tests/unit is IO-free; "
            "move the test to tests/integration"
        )

    monkeypatch.setattr(subprocess, "Popen", refuse)
    for method in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, method, refuse)


# ---- the CLI's fake API ---------------------------------------------------------------------------------


def api_error(status: int, code: str, message: str) -> httpx.Response:
    """The API's error body (contracts.md §1), as the CLI receives it."""
    return httpx.Response(status, json={"error": code, "message": message})


@dataclass(frozen=True)
class Packed:
    data: bytes
    sha256: str
    num_files: int
    file_bytes: int
    reused: bool = False

    @property
    def size(self) -> int:
        return len(self.data)

    def pieces(self) -> Iterator[bytes]:
        yield self.data

    def discard(self) -> None:
        pass


def fake_pack(root: Path, includes: Sequence[Path], cache: object = None) -> Packed:
    data = b"tar.zst of " + str(root).encode() + b"".join(str(i).encode() for i in includes)
    data *= 40_000  # several upload chunks
    return Packed(data, hashlib.sha256(data).hexdigest(), 3, 1234)


def experiment(eid: int, **fields: Any) -> dict[str, Any]:
    base = {
        "id": eid,
        "name": f"exp-{eid}",
        "description": "",
        "labels": [],
        "state": "ACTIVE",
        "progress": None,
        "searcher_type": "single",
        "resource_pool": "default",
        "owner": "alice",
        "archived": False,
        "start_time": "2024-05-01T12:00:00+00:00",
        "end_time": None,
        "num_trials": 0,
        "context_sha256": None,
        "config": {},
    }
    return base | fields


def trial(tid: int, eid: int, **fields: Any) -> dict[str, Any]:
    base = {
        "id": tid,
        "experiment_id": eid,
        "state": "RUNNING",
        "hparams": {"lr": 0.1},
        "restarts": 0,
        "start_time": "2024-05-01T12:00:05+00:00",
        "end_time": None,
        "total_batches": 0,
        "best_validation": None,
        "latest_validation": None,
        "latest_checkpoint": None,
        "exit": None,
    }
    return base | fields


class FakeApi:
    """Just enough of docs/contracts.md §1 to drive the CLI, plus a fake S3 for presigned PUTs. `run` runs
    the CLI against it; the CLI's context packer is `fake_pack`, recording the folders it packs in
    `packed`."""

    # the records the API answers with, for a test to seed
    experiment = staticmethod(experiment)
    trial = staticmethod(trial)

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.experiments: dict[int, dict[str, Any]] = {}
        self.trials: dict[int, dict[str, Any]] = {}
        self.checkpoints: dict[int, list[dict[str, Any]]] = {}
        self.metrics: dict[tuple[int, str], list[dict[str, Any]]] = {}
        self.logs: dict[int, list[dict[str, Any]]] = {}
        self.jobs: list[dict[str, Any]] = []  # in scheduling order, each with its resource_pool
        # `GET /resource-pools | /agents | /slots` answer these; job updates answer `job_update`.
        self.cluster: dict[str, list[dict[str, Any]]] = {"resource-pools": [], "agents": [], "slots": []}
        #: What `GET /info` answers (`det version`, `det master info`).
        self.info: dict[str, Any] = {"version": "0.1.0", "cluster_id": "lab", "region": "eu-west-1"}
        self.job_update: httpx.Response = httpx.Response(200, json={"jobs": [], "notes": []})
        self.contexts: dict[str, bytes] = {}
        self.put_headers: dict[str, str] = {}
        self.headers: dict[str, str] = {}  # of the latest API request
        self.refuse_config: dict[str, Any] | None = None
        self.create_warnings = ["slots: one is plenty"]
        self.packed: list[Path] = []
        self.events: list[Callable[[], None]] = []
        self.sleeps = 0
        self.transport = httpx.MockTransport(self.handle)

    # the world moves on each time the CLI waits
    def sleep(self, seconds: float) -> None:
        assert 0 < seconds <= 1, "poll loops wait a moment, never busy-loop nor sleep long"
        self.sleeps += 1
        assert self.sleeps < 200, "the CLI keeps polling: it never saw the end"
        if self.events:
            self.events.pop(0)()

    def calls(self, method: str | None = None) -> list[str]:
        return [f"{m} {p}" for m, p, _, _ in self.requests if method is None or m == method]

    def bodies(self, method: str, path: str) -> list[Any]:
        return [b for m, p, _, b in self.requests if (m, p) == (method, path)]

    def handle(self, request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        params = dict(request.url.params)
        if request.url.host == "s3.fake":
            self.requests.append((method, path, params, None))
            self.put_headers = dict(request.headers)
            sha = path.split("/")[-1].removesuffix(".tar.zst")
            self.contexts[sha] = request.content
            return httpx.Response(200)
        body = json.loads(request.content) if request.content else None
        self.requests.append((method, path, params, body))
        self.headers = dict(request.headers)
        for pattern, handler in self._routes():
            match = re.fullmatch(pattern, f"{method} {path}")
            if match:
                return handler(params, body, *(int(g) if g.isdigit() else g for g in match.groups()))
        return api_error(404, "NotFound", f"no route {method} {path}")

    def _routes(self) -> list[tuple[str, Callable[..., httpx.Response]]]:
        return [
            (r"POST /experiments", self._create),
            (r"GET /experiments", self._list),
            (r"GET /experiments/(\d+)", self._get_experiment),
            (r"POST /experiments/(\d+)/activate", self._activate),
            (r"POST /experiments/(\d+)/pause", self._pause),
            (r"POST /experiments/(\d+)/cancel", self._stop_experiment),
            (r"POST /experiments/(\d+)/kill", self._stop_experiment),
            (r"POST /trials/(\d+)/kill", self._kill_trial),
            (r"POST /experiments/(\d+)/(archive|unarchive)", self._archive),
            (r"POST /contexts", self._contexts),
            (r"GET /trials/(\d+)", self._get_trial),
            (r"GET /trials/(\d+)/metrics", self._metrics),
            (r"GET /trials/(\d+)/metric-groups", self._metric_groups),
            (r"GET /trials/(\d+)/logs", self._logs),
            (r"GET /jobs", self._jobs),
            (r"PATCH /jobs/([^/]+)", lambda *_: self.job_update),
            (r"POST /job-queue", lambda *_: self.job_update),
            (r"GET /(resource-pools|agents|slots)", self._cluster),
            (r"GET /health", lambda *_: httpx.Response(200, json={"status": "ok", "version": "0.1.0"})),
            (r"GET /info", lambda *_: httpx.Response(200, json=self.info)),
        ]

    def _cluster(self, params: dict[str, str], body: Any, kind: str) -> httpx.Response:
        return httpx.Response(200, json={kind.replace("-", "_"): self.cluster[kind]})

    def _jobs(self, params: dict[str, str], body: Any) -> httpx.Response:
        pool = params.get("resource_pool", "default")
        return httpx.Response(200, json={"jobs": [j for j in self.jobs if j["resource_pool"] == pool]})

    def _create(self, params: dict[str, str], body: dict[str, Any]) -> httpx.Response:
        if self.refuse_config is not None:
            return httpx.Response(400, json=self.refuse_config)
        if body["validate_only"]:
            return httpx.Response(200, json={"experiment": None, "warnings": []})
        eid = len(self.experiments) + 1
        state = "ACTIVE" if body["activate"] else "PAUSED"
        self.experiments[eid] = experiment(
            eid,
            state=state,
            context_sha256=body["context_sha256"],
            owner=self.headers.get("x-stratus-user", "user"),
            archived=body.get("archived", False),
        )
        return httpx.Response(
            200, json={"experiment": self.experiments[eid], "warnings": self.create_warnings}
        )

    def _list(self, params: dict[str, str], body: Any) -> httpx.Response:
        newest_first = sorted(self.experiments.values(), key=lambda e: -e["id"])
        if "archived" in params:
            newest_first = [e for e in newest_first if e["archived"] == (params["archived"] == "true")]
        if "cursor" in params:  # this fake's cursor: the id to list below
            newest_first = [e for e in newest_first if e["id"] < int(params["cursor"])]
        limit = int(params.get("limit", 1000))
        page = newest_first[:limit]
        following = str(page[-1]["id"]) if len(newest_first) > limit else None
        return httpx.Response(200, json={"experiments": page, "next_cursor": following})

    def _get_experiment(self, params: dict[str, str], body: Any, eid: int) -> httpx.Response:
        if eid not in self.experiments:
            return api_error(404, "NotFound", f"no experiment with id {eid}")
        trials = [t for t in self.trials.values() if t["experiment_id"] == eid]
        return httpx.Response(200, json={"experiment": self.experiments[eid], "trials": trials})

    def _activate(self, params: dict[str, str], body: Any, eid: int) -> httpx.Response:
        self.experiments[eid]["state"] = "ACTIVE"
        return httpx.Response(200, json={"experiment": self.experiments[eid]})

    def _pause(self, params: dict[str, str], body: Any, eid: int) -> httpx.Response:
        if eid not in self.experiments:
            return api_error(404, "NotFound", f"experiment {eid} not found")
        if self.experiments[eid]["state"] not in ("ACTIVE", "PAUSED"):
            state = self.experiments[eid]["state"]
            return api_error(
                409, "Conflict", f"experiment {eid} is {state}; only an ACTIVE one can be paused"
            )
        self.experiments[eid]["state"] = "PAUSED"
        return httpx.Response(200, json={"experiment": self.experiments[eid]})

    def _stop_experiment(self, params: dict[str, str], body: Any, eid: int) -> httpx.Response:
        if eid not in self.experiments:
            return api_error(404, "NotFound", f"experiment {eid} not found")
        killed = self.calls("POST")[-1].endswith("/kill")
        self.experiments[eid]["state"] = "STOPPING_KILLED" if killed else "STOPPING_CANCELED"
        return httpx.Response(200, json={"experiment": self.experiments[eid]})

    def _kill_trial(self, params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        self.trials[tid]["state"] = "STOPPING_KILLED"
        return httpx.Response(200, json={"trial": self.trials[tid]})

    def _archive(self, params: dict[str, str], body: Any, eid: int, action: str) -> httpx.Response:
        if eid not in self.experiments:
            return api_error(404, "NotFound", f"no experiment with id {eid}")
        if self.experiments[eid]["state"] not in ("COMPLETED", "CANCELED", "ERROR"):
            return api_error(409, "Conflict", f"experiment {eid} has not ended; wait for it to end")
        self.experiments[eid]["archived"] = action == "archive"
        return httpx.Response(200, json={"experiment": self.experiments[eid]})

    def _contexts(self, params: dict[str, str], body: dict[str, Any]) -> httpx.Response:
        sha = body["sha256"]
        key = f"contexts/{sha}.tar.zst"
        if sha in self.contexts:
            return httpx.Response(200, json={"key": key, "exists": True, "upload": None})
        upload = {"url": f"https://s3.fake/bucket/{key}?X-Amz-Signature=abc", "method": "PUT", "headers": {}}
        return httpx.Response(200, json={"key": key, "exists": False, "upload": upload})

    def _get_trial(self, params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        if tid not in self.trials:
            return api_error(404, "NotFound", f"no trial with id {tid}")
        return httpx.Response(
            200, json={"trial": self.trials[tid], "checkpoints": self.checkpoints.get(tid, [])}
        )

    def _metrics(self, params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        return httpx.Response(200, json={"metrics": self.metrics.get((tid, params["group"]), [])})

    def _metric_groups(self, params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        groups = {group for trial, group in self.metrics if trial == tid}
        built_in = [g for g in ("training", "validation") if g in groups]
        return httpx.Response(200, json={"groups": built_in + sorted(groups - set(built_in))})

    def _logs(self, params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        if tid not in self.trials:
            return api_error(404, "NotFound", f"no trial with id {tid}")
        lines = self.logs.get(tid, [])
        if "next_token" in params:
            start = int(params["next_token"])
        elif "tail" in params:
            start = max(0, len(lines) - int(params["tail"]))
        else:
            start = 0
        end = min(len(lines), start + int(params.get("limit", 1000)))
        page = lines[start:end]
        if "level" in params:  # the API's filter, on the page it read
            page = [line for line in page if at_or_above(line["message"], params["level"])]
        answer = {"logs": page, "next_token": str(end), "trial_state": self.trials[tid]["state"]}
        return httpx.Response(200, json=answer | {"lines_read": end - start})

    # helpers for tests
    def log(self, tid: int, *messages: str) -> None:
        lines = self.logs.setdefault(tid, [])
        for m in messages:
            lines.append({"timestamp": 1714564800000 + 1000 * len(lines), "message": m, "rank": None})

    def pack(self, root: Path, includes: Sequence[Path], cache: object = None) -> Packed:
        self.packed.append(root)
        return fake_pack(root, includes)

    def run(
        self,
        *argv: str,
        environ: dict[str, str] | None = None,
        err: io.StringIO | None = None,
        **runtime: Any,
    ) -> Result:
        """`det *argv` against this API; `err` is the CLI's stderr (a terminal's, say), a new buffer if None."""
        out, err = io.StringIO(), err or io.StringIO()
        settings: dict[str, Any] = {"pack": self.pack, "sleep": self.sleep} | runtime
        rt = Runtime(environ=environ or {}, transport=self.transport, out=out, err=err, **settings)
        code = cli.main(list(argv), runtime=rt)
        return Result(code, out.getvalue(), err.getvalue())


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def project_config(tmp_path: Path) -> Callable[[str, str], Path]:
    """`project_config(name, text)`: a user's project in tmp_path, the experiment config `name` holding
    `text` next to an empty context folder ctx/; the config's path."""

    def project_config(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        (tmp_path / "ctx").mkdir()
        return path

    return project_config


@pytest.fixture(name="fake_pack")
def _fake_pack() -> Callable[[Path, Sequence[Path]], Packed]:
    """What the CLI's packer gives for a folder in these tests (to compute the sha256 the CLI sends)."""
    return fake_pack


# ---- the trial's fake control plane ---------------------------------------------------------------------

API = "https://api.test/v1"
TOKEN = "run-token-7"
TRIAL, EXPERIMENT = 7, 3
PLANE_CONFIG = {"name": "digits", "searcher": {"name": "single", "max_length": {"batches": 600}}}
WAIT_S = 10.0

# What the agent sets for a trial; `no_trial_env` clears them (and LOCAL_ENV).
ENV_NAMES = [
    "STRATUS_MASTER",
    "STRATUS_TRIAL_ID",
    "STRATUS_EXPERIMENT_ID",
    "STRATUS_RUN_ID",
    "STRATUS_RUN_TOKEN",
    "STRATUS_HPARAMS",
    "STRATUS_LATEST_CHECKPOINT",
    "STRATUS_TRIAL_SEED",
    "STRATUS_SLOTS",
    "STRATUS_NUM_NODES",
    "STRATUS_NODE_RANK",
    "STRATUS_NODE_ADDR",
    "STRATUS_NODE_ADDRS",
    "STRATUS_COLLECTIVE_PORT",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
]


class FakePlane:
    """The trial-facing routes of contracts.md §1 plus an S3 that honours presigned URLs, in memory."""

    # the run it serves
    trial_id = TRIAL
    experiment_id = EXPERIMENT

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, Any]] = []  # (method, path, JSON body or bytes), in arrival order
        self.s3: dict[str, bytes] = {}
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.preempt = False
        self.heartbeats = 0
        self.heartbeat_seen = threading.Condition(self.lock)

    def transport(self) -> InMemoryTransport:
        return InMemoryTransport(self.handle)

    def init_options(self, heartbeat_interval_s: float = 60.0, waits: Waits | None = None) -> dict[str, Any]:
        """`stratus.harness.init`'s seams to talk to this plane: its transport, the heartbeat interval, a searcher
        wait that returns at once (`waits`, a new Waits if None)."""
        return {
            "transport": self.transport(),
            "heartbeat_interval_s": heartbeat_interval_s,
            "searcher_wait": waits or Waits(),
        }

    def calls(self, method: str | None = None, path_part: str = "") -> list[tuple[str, str, Any]]:
        with self.lock:
            return [c for c in self.log if (method in (None, c[0])) and path_part in c[1]]

    def reports(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The reports of every ``POST /trials/{id}/reports`` (of ``kind``), in arrival order."""
        return [
            report
            for _, _, body in self.calls("POST", f"/trials/{self.trial_id}/reports")
            for report in body["reports"]
            if kind in (None, report["kind"])
        ]

    def metric_posts(self, group: str) -> list[tuple[int, dict[str, Any]]]:
        """``(steps_completed, metrics)`` of each metrics report of ``group``, in arrival order."""
        return [(r["steps_completed"], r["metrics"]) for r in self.reports("metrics") if r["group"] == group]

    def checkpoint_reports(self) -> list[dict[str, Any]]:
        """The bodies of the checkpoint reports (``POST /trials/{id}/checkpoints``), not the upload requests."""
        return [c[2] for c in self.calls("POST") if c[1].endswith(f"/trials/{self.trial_id}/checkpoints")]

    def api_calls(self) -> list[tuple[str, str, Any]]:
        return [c for c in self.calls() if c[1].startswith("/v1/") and not c[1].endswith("/heartbeat")]

    def wait_heartbeats(self, n: int) -> bool:
        with self.heartbeat_seen:
            return self.heartbeat_seen.wait_for(lambda: self.heartbeats >= n, timeout=WAIT_S)

    def handle(self, request: Request) -> Response:
        if request.host == "s3.test":
            return self._s3(request)
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return plane_error(401, "Unauthorized", "the run token is missing or wrong.")
        body = json.loads(request.content) if request.content else None
        with self.lock:
            self.log.append((request.method, request.path, body))
        route = request.path.removeprefix("/v1")
        return self._route(request.method, route, body)

    def _route(self, method: str, route: str, body: Any) -> Response:
        parts = route.strip("/").split("/")
        if parts[0] == "trials" and parts[1] != str(TRIAL):
            return plane_error(403, "Forbidden", f"the run token is not valid for trial {parts[1]}.")
        if (method, parts[0]) == ("GET", "trials") and parts[2:] == ["info"]:
            return Response(200, json=self._info())
        if (method, parts[2:]) == ("POST", ["metrics"]):
            return Response(200, json={})
        if (method, parts[2:]) == ("POST", ["progress"]):
            return Response(200, json={})
        if (method, parts[2:]) == ("POST", ["reports"]):
            return Response(200, json={})
        if (method, parts[2:]) == ("POST", ["heartbeat"]):
            with self.heartbeat_seen:
                self.heartbeats += 1
                self.heartbeat_seen.notify_all()
            return Response(200, json={"preempt": self.preempt})
        if (method, parts[2:]) == ("POST", ["checkpoints", "uploads"]):
            prefix = f"checkpoints/{EXPERIMENT}/{TRIAL}/{body['uuid']}/"
            urls = {f: f"https://s3.test/bucket/{prefix}{f}?X-Amz-Signature=sig" for f in body["files"]}
            return Response(200, json={"prefix": prefix, "urls": urls})
        if (method, parts[2:]) == ("POST", ["checkpoints"]):
            return self._report_checkpoint(body)
        if (method, parts[0]) == ("GET", "checkpoints") and parts[2:] == ["downloads"]:
            return self._downloads(parts[1])
        return plane_error(404, "NotFound", f"no route {method} {route}.")

    def _info(self) -> dict[str, Any]:
        return {
            "trial_id": TRIAL,
            "experiment_id": EXPERIMENT,
            "run_id": "run-1",
            "hparams": {"learning_rate": 0.01},
            "latest_checkpoint": None,
            "trial_seed": 42,
            "config": PLANE_CONFIG,
        }

    def _report_checkpoint(self, body: dict[str, Any]) -> Response:
        prefix = f"checkpoints/{EXPERIMENT}/{TRIAL}/{body['uuid']}/"
        if f"bucket/{prefix}metadata.json" not in self.s3:
            return plane_error(409, "Conflict", "metadata.json is not in S3 yet; upload it before reporting.")
        checkpoint = {
            "uuid": body["uuid"],
            "trial_id": TRIAL,
            "experiment_id": EXPERIMENT,
            "steps_completed": body["steps_completed"],
            "state": "COMPLETED",
            "uri": f"s3://bucket/{prefix}",
            "resources": body["resources"],
            "metadata": body["metadata"],
            "report_time": "2024-01-01T00:00:00Z",
        }
        self.checkpoints[body["uuid"]] = checkpoint
        return Response(200, json={"checkpoint": checkpoint})

    def _downloads(self, storage_id: str) -> Response:
        checkpoint = self.checkpoints.get(storage_id)
        if checkpoint is None:
            return plane_error(404, "NotFound", f"no checkpoint {storage_id}; check the uuid.")
        prefix = f"bucket/checkpoints/{EXPERIMENT}/{TRIAL}/{storage_id}/"
        urls = {f: f"https://s3.test/{prefix}{f}?X-Amz-Signature=sig" for f in checkpoint["resources"]}
        return Response(200, json={"checkpoint": checkpoint, "urls": urls})

    def _s3(self, request: Request) -> Response:
        key = request.path.lstrip("/")
        if "authorization" in request.headers:  # S3 refuses two signatures
            return Response(400, text="<Error><Code>InvalidArgument</Code></Error>")
        if request.params.get("X-Amz-Signature") != "sig":
            return Response(403, text="<Error><Code>AccessDenied</Code></Error>")
        if request.method == "PUT":
            with self.lock:
                self.s3[key] = request.content
                self.log.append(("PUT", "/" + key, request.content))
            return Response(200)
        if request.method == "GET" and key in self.s3:
            return Response(200, content=self.s3[key])
        return Response(404, text="<Error><Code>NoSuchKey</Code></Error>")


def plane_error(status: int, code: str, message: str) -> Response:
    """The API's error body (contracts.md §1), as the trial's client receives it."""
    return Response(status, json={"error": code, "message": message})


# What the local test mode sets for a script.
LOCAL_ENV = ["STRATUS_LOCAL_CONFIG", "STRATUS_LOCAL_EVENTS"]


class SearcherPlane(FakePlane):
    """FakePlane plus the searcher routes of contracts.md §1.

    `script` answers are given first, one per GET; then the plane runs `lengths` as a searcher would:
    `train` with the first length not completed yet, `stop` once all are completed; like the control
    plane, a last length of None (no target) is answered forever.
    """

    def __init__(
        self,
        lengths: list[int | None] | None = None,
        script: list[dict[str, Any]] | None = None,
        *,
        config: dict[str, Any] | None = None,
        unit: str = "batches",
    ) -> None:
        super().__init__()
        self.lengths = list(lengths or [])
        self.script = list(script or [])
        self.config = config if config is not None else {"searcher": {"name": "single", "metric": "accuracy"}}
        self.unit = unit
        self.completed: list[dict[str, Any]] = []
        self.invalid_hp: list[dict[str, Any]] = []

    def _info(self) -> dict[str, Any]:
        return {**super()._info(), "config": self.config}

    def _route(self, method: str, route: str, body: Any) -> Response:
        parts = route.strip("/").split("/")
        if parts[0] == "trials" and parts[2:3] == ["searcher"] and parts[1] == str(TRIAL):
            if (method, parts[3:]) == ("GET", []):
                return Response(200, json=self._answer())
            if (method, parts[3:]) == ("POST", ["completed"]):
                self.completed.append(body)
                return Response(200, json={})
            if (method, parts[3:]) == ("POST", ["invalid_hp"]):
                self.invalid_hp.append(body)
                return Response(200, json={})
        return super()._route(method, route, body)

    def _answer(self) -> dict[str, Any]:
        if self.script:
            return self.script.pop(0)
        if len(self.completed) < len(self.lengths):
            return {"action": "train", "length": self.lengths[len(self.completed)], "unit": self.unit}
        if self.lengths and self.lengths[-1] is None:
            return {"action": "train", "length": None, "unit": self.unit}
        return {"action": "stop", "length": None, "unit": self.unit}

    def searcher_calls(self) -> list[tuple[str, str, Any]]:
        return [c for c in self.calls() if "/searcher" in c[1]]


class Waits:
    """A searcher wait that returns at once and records the delays asked for."""

    def __init__(self, interrupt_after: int | None = None) -> None:
        self.delays: list[float] = []
        self.interrupt_after = interrupt_after

    def __call__(self, seconds: float) -> bool:
        self.delays.append(seconds)
        return self.interrupt_after is not None and len(self.delays) >= self.interrupt_after


@pytest.fixture
def no_trial_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the trial's environment variables (nor the local test mode's) leak in from outside."""
    for name in [*ENV_NAMES, *LOCAL_ENV]:
        monkeypatch.delenv(name, raising=False)


def platform_env(
    monkeypatch: pytest.MonkeyPatch, hparams: dict[str, Any], *, seed: int = 42, **extra: str
) -> None:
    """The environment the agent gives a trial of FakePlane's run (TRIAL of EXPERIMENT, run-1, TOKEN)."""
    run = TrialEnv(API, TRIAL, EXPERIMENT, "run-1", TOKEN, hparams=hparams, trial_seed=seed)
    for name, value in {**run.to_env(), **extra}.items():
        monkeypatch.setenv(name, value)


@dataclass(frozen=True)
class PlaneKit:
    """What the trial-side tests share (the `plane_kit` fixture): the fake control planes, the searcher
    waits, the run the planes serve and the environment the agent gives its trial."""

    monkeypatch: pytest.MonkeyPatch
    api: str = API
    token: str = TOKEN
    trial: int = TRIAL
    experiment: int = EXPERIMENT
    config: dict[str, Any] = field(default_factory=lambda: PLANE_CONFIG)
    env_names: tuple[str, ...] = tuple(ENV_NAMES)
    wait_s: float = WAIT_S
    FakePlane = FakePlane
    SearcherPlane = SearcherPlane
    Waits = Waits
    error = staticmethod(plane_error)

    def platform_env(self, hparams: dict[str, Any], *, seed: int = 42, **extra: str) -> None:
        platform_env(self.monkeypatch, hparams, seed=seed, **extra)

    def use(self, plane: Any, heartbeat_interval_s: float = 60.0) -> None:
        """Make every `stratus.harness.core.init()` of the code under test talk to `plane`."""
        from stratus import harness

        real_init = harness.core.init

        def init(**kwargs: Any) -> Any:
            kwargs.update(plane.init_options(heartbeat_interval_s))
            return real_init(**kwargs)

        self.monkeypatch.setattr(harness.core, "init", init)


@pytest.fixture
def plane_kit(monkeypatch: pytest.MonkeyPatch) -> PlaneKit:
    return PlaneKit(monkeypatch)


@pytest.fixture
def preempted_nni(plane_kit: PlaneKit, request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """An NNI trial (`stratus.harness.compat._nni.NniTrial`, parameters fetched) of a platform that asks it to stop,
    once its heartbeat has seen that: the plane and the trial's NNI state."""
    from stratus.harness.compat._nni import NniTrial

    plane_kit.platform_env({"lr": 0.01})
    plane = plane_kit.SearcherPlane([None], config={"searcher": {"metric": "default"}})
    plane.preempt = True
    plane_kit.use(plane, heartbeat_interval_s=0.01)
    nni = NniTrial()
    request.addfinalizer(nni.close)
    nni.get_next_parameter()
    assert plane.wait_heartbeats(2)
    return plane, nni


# ---- moto in-process, with the settings the control plane's AWS adapters read -----------------------

#: The settings `chalicelib.settings` requires (what a deployed stack's Lambda environment holds).
STACK_SETTINGS = {
    "STRATUS_BUCKET": "b",
    "STRATUS_SCHEDULER_QUEUE_URL": "q1",
    "STRATUS_LAUNCH_QUEUE_URL": "q2",
    "STRATUS_EVENTS_QUEUE_URL": "q3",
    "STRATUS_STATE_MACHINE_ARN": "arn",
    "STRATUS_TOKEN_SECRET": "s",
    "STRATUS_AGENT_TOKEN": "a",
}
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-west-2",
    **STACK_SETTINGS,
    "STRATUS_BUCKET": "prices-bucket",
}


@pytest.fixture
def stack_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The required settings in the environment (`STACK_SETTINGS`); the monkeypatch, for more."""
    for name, value in STACK_SETTINGS.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's `mock_aws` around the test, the stack's settings in us-west-2, the clients made afresh."""
    from moto import mock_aws

    from chalicelib import wiring

    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_REGION", "AWS_ENDPOINT_URL", "STRATUS_PRICES"):
        monkeypatch.delenv(name, raising=False)
    wiring.reset()
    with mock_aws():
        yield
    wiring.reset()
