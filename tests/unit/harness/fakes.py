"""The trial's fake control plane for tests/unit/harness: `FakePlane` (the trial-facing routes of
docs/contracts.md §1 and an S3 that honours presigned URLs, answering through
stratus.contract.http.InMemoryTransport), `SearcherPlane` (plus the searcher routes), `Waits`, the run they
serve and the environment the agent gives its trial, gathered in `PlaneKit`. The tests reach these through
the fixtures of tests/unit/harness/conftest.py, never by importing this module.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from stratus.contract.env import TrialEnv
from stratus.contract.http import InMemoryTransport, Request, Response

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
