"""The `det` commands against an in-memory fake of the API's user-facing routes (httpx.MockTransport).

No network, no sleeping: `Runtime.sleep` is where the fake moves the world forward (a trial starts,
logs arrive, the trial ends), so following loops run to their end at once.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from det import cli
from det._runtime import Runtime

CONFIG = """\
name: mnist
entrypoint: python3 train.py
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: 100
"""


@dataclass(frozen=True)
class Packed:
    data: bytes
    sha256: str
    num_files: int
    file_bytes: int


def fake_pack(root: Path, includes: Sequence[Path]) -> Packed:
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
    """Just enough of docs/contracts.md §1 to drive the CLI, plus a fake S3 for presigned PUTs."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.experiments: dict[int, dict[str, Any]] = {}
        self.trials: dict[int, dict[str, Any]] = {}
        self.checkpoints: dict[int, list[dict[str, Any]]] = {}
        self.metrics: dict[tuple[int, str], list[dict[str, Any]]] = {}
        self.logs: dict[int, list[dict[str, Any]]] = {}
        self.contexts: dict[str, bytes] = {}
        self.put_headers: dict[str, str] = {}
        self.refuse_config: dict[str, Any] | None = None
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
        for pattern, handler in self._routes():
            match = re.fullmatch(pattern, f"{method} {path}")
            if match:
                return handler(params, body, *(int(g) for g in match.groups()))
        return _error(404, "NotFound", f"no route {method} {path}")

    def _routes(self) -> list[tuple[str, Callable[..., httpx.Response]]]:
        return [
            (r"POST /experiments", self._create),
            (r"GET /experiments", self._list),
            (r"GET /experiments/(\d+)", self._get_experiment),
            (r"POST /experiments/(\d+)/activate", self._activate),
            (r"POST /contexts", self._contexts),
            (r"GET /trials/(\d+)", self._get_trial),
            (r"GET /trials/(\d+)/metrics", self._metrics),
            (r"GET /trials/(\d+)/logs", self._logs),
            (r"GET /health", lambda *_: httpx.Response(200, json={"status": "ok", "version": "0.1.0"})),
        ]

    def _create(self, params: dict[str, str], body: dict[str, Any]) -> httpx.Response:
        if self.refuse_config is not None:
            return httpx.Response(400, json=self.refuse_config)
        if body["validate_only"]:
            return httpx.Response(200, json={"experiment": None, "warnings": []})
        eid = len(self.experiments) + 1
        state = "ACTIVE" if body["activate"] else "PAUSED"
        self.experiments[eid] = experiment(eid, state=state, context_sha256=body["context_sha256"])
        return httpx.Response(
            200, json={"experiment": self.experiments[eid], "warnings": ["slots: one is plenty"]}
        )

    def _list(self, params: dict[str, str], body: Any) -> httpx.Response:
        newest_first = sorted(self.experiments.values(), key=lambda e: -e["id"])
        offset = int(params.get("offset", 0))
        limit = int(params.get("limit", 1000))
        return httpx.Response(200, json={"experiments": newest_first[offset : offset + limit]})

    def _get_experiment(self, params: dict[str, str], body: Any, eid: int) -> httpx.Response:
        if eid not in self.experiments:
            return _error(404, "NotFound", f"no experiment with id {eid}")
        trials = [t for t in self.trials.values() if t["experiment_id"] == eid]
        return httpx.Response(200, json={"experiment": self.experiments[eid], "trials": trials})

    def _activate(self, params: dict[str, str], body: Any, eid: int) -> httpx.Response:
        self.experiments[eid]["state"] = "ACTIVE"
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
            return _error(404, "NotFound", f"no trial with id {tid}")
        return httpx.Response(
            200, json={"trial": self.trials[tid], "checkpoints": self.checkpoints.get(tid, [])}
        )

    def _metrics(self, params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        return httpx.Response(200, json={"metrics": self.metrics.get((tid, params["group"]), [])})

    def _logs(self, params: dict[str, str], body: Any, tid: int) -> httpx.Response:
        if tid not in self.trials:
            return _error(404, "NotFound", f"no trial with id {tid}")
        lines = self.logs.get(tid, [])
        if "next_token" in params:
            start = int(params["next_token"])
        elif "tail" in params:
            start = max(0, len(lines) - int(params["tail"]))
        else:
            start = 0
        end = min(len(lines), start + int(params.get("limit", 1000)))
        return httpx.Response(
            200,
            json={"logs": lines[start:end], "next_token": str(end), "trial_state": self.trials[tid]["state"]},
        )

    # helpers for tests
    def log(self, tid: int, *messages: str) -> None:
        lines = self.logs.setdefault(tid, [])
        for m in messages:
            lines.append({"timestamp": 1714564800000 + 1000 * len(lines), "message": m, "rank": None})


def _error(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": code, "message": message})


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@dataclass
class Result:
    code: int
    out: str
    err: str


def run(api: FakeApi, *argv: str, environ: dict[str, str] | None = None, **runtime: Any) -> Result:
    out, err = io.StringIO(), io.StringIO()
    settings: dict[str, Any] = {"pack": fake_pack, "sleep": api.sleep} | runtime
    rt = Runtime(environ=environ or {}, transport=api.transport, out=out, err=err, **settings)
    code = cli.main(list(argv), runtime=rt)
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "const.yaml"
    path.write_text(CONFIG)
    (tmp_path / "ctx").mkdir()
    return path


# --- experiment create -------------------------------------------------------------------------


def test_create_validates_then_uploads_then_submits(api: FakeApi, config_file: Path) -> None:
    ctx = config_file.parent / "ctx"
    result = run(api, "experiment", "create", str(config_file), str(ctx))

    assert result.code == 0, result.err
    assert result.out == "Created experiment 1\n"
    assert api.calls() == [
        "POST /experiments",
        "POST /contexts",
        f"PUT /bucket/contexts/{fake_pack(ctx, []).sha256}.tar.zst",
        "POST /experiments",
    ]
    validate, submit = api.bodies("POST", "/experiments")
    packed = fake_pack(ctx, [])
    assert validate == {
        "config": submit["config"],
        "context_sha256": None,
        "validate_only": True,
        "activate": True,
    }
    assert submit["context_sha256"] == packed.sha256
    assert submit["validate_only"] is False and submit["activate"] is True
    assert submit["config"]["searcher"]["max_length"] == {"batches": 100}
    assert api.bodies("POST", "/contexts") == [{"sha256": packed.sha256, "size": len(packed.data)}]
    assert api.contexts[packed.sha256] == packed.data
    assert api.put_headers["content-length"] == str(len(packed.data))  # S3 refuses chunked PUTs
    assert "transfer-encoding" not in api.put_headers
    assert "Preparing files to send to master... 1.2KB and 3 files" in result.err
    assert "Warning: slots: one is plenty" in result.err


def test_create_uploads_nothing_when_the_api_refuses_the_config(api: FakeApi, config_file: Path) -> None:
    api.refuse_config = {
        "error": "InvalidConfig",
        "message": "the experiment config has 2 problems; fix them and submit again",
        "problems": [
            {"path": "searcher.max_trials", "message": "must be ≥ 1"},
            {"path": "resources.slots_per_trial", "message": "must be an integer"},
        ],
    }
    packed: list[Path] = []

    def pack(root: Path, includes: Sequence[Path]) -> Packed:
        packed.append(root)
        return fake_pack(root, includes)

    result = run(api, "e", "create", str(config_file), str(config_file.parent / "ctx"), pack=pack)

    assert result.code == 1
    assert result.out == ""
    assert result.err == (
        "Error: the experiment config has 2 problems; fix them and submit again\n"
        "  searcher.max_trials: must be ≥ 1\n"
        "  resources.slots_per_trial: must be an integer\n"
    )
    assert api.calls() == ["POST /experiments"]
    assert packed == []


def test_create_skips_the_upload_when_the_context_exists(api: FakeApi, config_file: Path) -> None:
    ctx = config_file.parent / "ctx"
    sha = fake_pack(ctx, []).sha256
    api.contexts[sha] = b"already there"

    result = run(api, "e", "create", str(config_file), str(ctx))

    assert result.code == 0
    assert api.calls("PUT") == []
    assert f"context already uploaded (sha256 {sha[:12]}…), skipping upload" in result.err
    assert api.bodies("POST", "/experiments")[-1]["context_sha256"] == sha


def test_create_applies_overrides_includes_and_paused(api: FakeApi, config_file: Path) -> None:
    ctx = config_file.parent / "ctx"
    result = run(
        api,
        "e",
        "create",
        str(config_file),
        str(ctx),
        "--config",
        "resources.slots_per_trial=2",
        "--config",
        "searcher.max_length.batches=300",
        "--config",
        "description=a b",
        "-i",
        "../data",
        "--paused",
        "--project",
        "p",
        "--workspace",
        "w",
    )

    assert result.code == 0, result.err
    submit = api.bodies("POST", "/experiments")[-1]
    assert submit["activate"] is False
    assert submit["config"]["resources"] == {"slots_per_trial": 2}
    assert submit["config"]["searcher"]["max_length"] == {"batches": 300}
    assert submit["config"]["description"] == "a b"
    assert submit["context_sha256"] == fake_pack(ctx, [Path("../data")]).sha256


def test_create_without_context_sends_no_sha(api: FakeApi, config_file: Path) -> None:
    result = run(api, "e", "create", str(config_file))

    assert result.code == 0
    assert api.calls() == ["POST /experiments", "POST /experiments"]
    assert api.bodies("POST", "/experiments")[-1]["context_sha256"] is None


def test_create_reports_a_missing_config_file_without_calling_the_api(api: FakeApi, tmp_path: Path) -> None:
    result = run(api, "e", "create", str(tmp_path / "nope.yaml"), str(tmp_path))

    assert result.code == 2
    assert (
        result.err
        == f"Error: config file {tmp_path / 'nope.yaml'} does not exist; pass the path of an experiment config (.yaml)\n"
    )
    assert api.requests == []


def test_create_reports_a_yaml_error_with_line_and_column(api: FakeApi, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nsearcher: [1, 2\n")

    result = run(api, "e", "create", str(path), str(tmp_path))

    assert result.code == 2
    assert result.err.startswith(f"Error: {path}, line 3, column 1: ")
    assert result.err.count("\n") == 1
    assert api.requests == []


def _script_first_trial(api: FakeApi, final_state: str) -> None:
    """The trial appears on the 2nd poll, logs arrive in bursts, then it ends in `final_state`."""

    def start() -> None:
        api.trials[7] = trial(7, 1)
        api.log(7, "starting", "epoch 1")

    def more() -> None:
        api.log(7, "epoch 2")
        api.trials[7]["total_batches"] = 100
        api.experiments[1]["progress"] = 0.5

    def end() -> None:
        api.log(7, "done")
        api.trials[7]["state"] = final_state
        api.experiments[1]["state"] = final_state
        api.experiments[1]["progress"] = 1.0

    api.events = [lambda: None, start, more, lambda: None, end]


def test_create_follow_streams_the_first_trial_to_the_end(api: FakeApi, config_file: Path) -> None:
    _script_first_trial(api, "COMPLETED")

    result = run(api, "e", "create", str(config_file), str(config_file.parent / "ctx"), "-f")

    assert result.code == 0, result.err
    assert result.out == (
        "Created experiment 1\n"
        "Waiting for first trial to begin...\n"
        "Following first trial with ID 7\n"
        "starting\n"
        "epoch 1\n"
        "epoch 2\n"
        "done\n"
        "Trial log stream ended. To reopen log stream, run: det trial logs -f 7\n"
        "Experiment 1 COMPLETED\n"
    )
    tokens = [p.get("next_token") for m, path, p, _ in api.requests if path == "/trials/7/logs"]
    assert tokens[0] is None and all(t is not None for t in tokens[1:])  # follows the cursor


@pytest.mark.parametrize("final_state", ["ERROR", "CANCELED"])
def test_create_follow_exits_1_unless_completed(api: FakeApi, config_file: Path, final_state: str) -> None:
    _script_first_trial(api, final_state)

    result = run(
        api, "e", "create", str(config_file), str(config_file.parent / "ctx"), "--follow-first-trial"
    )

    assert result.code == 1
    assert result.out.endswith(f"Experiment 1 {final_state}\n")
    assert "done\n" in result.out


def test_create_follow_draws_a_status_line_on_a_terminal(api: FakeApi, config_file: Path) -> None:
    _script_first_trial(api, "COMPLETED")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out, err = io.StringIO(), Tty()
    rt = Runtime(transport=api.transport, sleep=api.sleep, pack=fake_pack, out=out, err=err)
    code = cli.main(["e", "create", str(config_file), str(config_file.parent / "ctx"), "-f"], runtime=rt)

    assert code == 0
    assert "experiment 1 ACTIVE · trial 7 RUNNING · 100 batches · 50.0%" in err.getvalue()
    assert "\x1b" not in out.getvalue()  # the status line never lands in stdout


def test_ctrl_c_exits_130_quietly(api: FakeApi, config_file: Path) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    api.events = [interrupt]

    result = run(api, "e", "create", str(config_file), str(config_file.parent / "ctx"), "-f")

    assert result.code == 130
    assert result.err.strip().splitlines()[-1].startswith("Warning")  # nothing after the last note


def test_experiment_activate(api: FakeApi) -> None:
    api.experiments[3] = experiment(3, state="PAUSED")

    result = run(api, "e", "activate", "3")

    assert (result.code, result.out) == (0, "Activated experiment 3\n")
    assert api.experiments[3]["state"] == "ACTIVE"


# --- errors and the master URL -----------------------------------------------------------------


def test_connection_refused_says_how_to_start_the_stack(config_file: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    api = FakeApi()
    api.transport = httpx.MockTransport(refuse)

    result = run(api, "-m", "http://127.0.0.1:9", "e", "list")

    assert result.code == 1
    assert result.err == (
        "Error: cannot reach the Stratus API at http://127.0.0.1:9; "
        "start it with `det deploy local up` or set DET_MASTER\n"
    )


def test_master_flag_overrides_det_master(api: FakeApi) -> None:
    hosts = []

    def record(request: httpx.Request) -> httpx.Response:
        hosts.append(f"{request.url.host}:{request.url.port}")
        return api.handle(request)

    api.transport = httpx.MockTransport(record)
    run(api, "e", "list", environ={"DET_MASTER": "http://from-env:1"})
    run(api, "-m", "other:2", "e", "list", environ={"DET_MASTER": "http://from-env:1"})
    run(api, "e", "list")
    assert hosts == ["from-env:1", "other:2", "127.0.0.1:8080"]


def test_an_error_without_a_json_body_is_one_line(api: FakeApi) -> None:
    api.transport = httpx.MockTransport(lambda request: httpx.Response(502, text="<html>Bad Gateway</html>"))

    result = run(api, "e", "describe", "1")

    assert result.code == 1
    assert result.err == (
        "Error: the Stratus API at http://127.0.0.1:8080 answered GET /experiments/1 with HTTP 502 "
        "Bad Gateway; retry, or look at the API's logs\n"
    )


def test_a_refused_upload_is_one_line(api: FakeApi, config_file: Path) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host == "s3.fake":
            return httpx.Response(
                403, text="<Error><Code>SignatureDoesNotMatch</Code><Message>nope</Message></Error>"
            )
        return api.handle(request)

    api.transport = httpx.MockTransport(handle)

    result = run(api, "e", "create", str(config_file), str(config_file.parent / "ctx"))

    assert result.code == 1
    assert result.err.splitlines()[-1] == (
        "Error: uploading the context to https://s3.fake failed with HTTP 403 (SignatureDoesNotMatch: nope); "
        "retry, or check the storage configuration of the stack"
    )
    assert api.calls("POST") == ["POST /experiments", "POST /contexts"]  # never submitted


def test_usage_errors_exit_2(api: FakeApi) -> None:
    assert run(api, "e", "describe").code == 2
    assert run(api, "t", "logs", "x").code == 2
    assert run(api, "t", "logs", "1", "--head", "1", "--tail", "1").code == 2
    assert run(api).code == 2
    assert run(api, "e", "create", "c.yaml", "--config", "novalue").code == 2
