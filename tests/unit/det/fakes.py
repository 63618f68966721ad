"""The CLI's fake API for tests/unit/det: `FakeApi` answers the user-facing routes of docs/contracts.md §1
through httpx.MockTransport (no network) and runs the CLI against itself; `fake_pack` stands in for the
CLI's context packer. The tests reach these through the fixtures of tests/unit/det/conftest.py, never
by importing this module.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from det import cli
from det._runtime import Runtime
from stratus.contract.log_levels import at_or_above


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
