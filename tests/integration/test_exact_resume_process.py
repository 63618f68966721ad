"""Exact resume through real trial processes: the agent's environment (`build_environment`, with
`STRATUS_LATEST_CHECKPOINT` from the launch spec) and start script (`build_script`), a trial that sends
itself SIGTERM (what an agent's stop does), checkpoints, exits 0 and is started again from its checkpoint,
against a control plane and an S3 on a loopback socket. The runs end bit for bit as the uninterrupted one.

The same trials run in process against the in-memory plane in tests/unit/harness/pytorch/test_exact_resume.py,
which covers more cases (loaders, stop points)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from stratus.contract.env import TrialEnv
from stratus.contract.launch import LaunchSpec
from stratus.harness.agent._settings import Settings
from stratus.harness.agent._spawn import build_environment
from stratus.harness.trial_process import build_script

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "exact_resume"
TOKEN = "run-token-9"
TRIAL, EXPERIMENT = 7, 3
LENGTH = 40


class LoopbackPlane:
    """The trial-facing routes of contracts.md §1 and a presigned-URL S3, served on 127.0.0.1 for one
    trial whose searcher asks for one operation of `length` batches."""

    def __init__(self, length: int, config: dict[str, Any], hparams: dict[str, Any]) -> None:
        self.length, self.config, self.hparams = length, config, hparams
        self.lock = threading.Lock()
        self.metrics: list[tuple[str, int, dict[str, Any]]] = []  # (group, steps_completed, metrics)
        self.completed: list[dict[str, Any]] = []
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.s3: dict[str, bytes] = {}
        plane = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(size) if size else b""
                status, body = plane.handle(self.command, self.path, self.headers.get("Authorization"), data)
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def handle(self, method: str, path: str, auth: str | None, data: bytes) -> tuple[int, Any]:
        route, _, query = path.partition("?")
        if route.startswith("/s3/"):
            return self._s3(method, route.removeprefix("/s3/"), query, auth, data)
        if auth != f"Bearer {TOKEN}":
            return 401, {"error": "Unauthorized", "message": "the run token is missing or wrong."}
        body = json.loads(data) if data else None
        parts = route.removeprefix("/v1/").strip("/").split("/")
        with self.lock:
            if parts[:2] == ["trials", str(TRIAL)]:
                return self._trial(method, parts[2:], body)
            if method == "GET" and parts[0] == "checkpoints" and parts[2:] == ["downloads"]:
                return self._downloads(parts[1])
        return 404, {"error": "NotFound", "message": f"no route {method} {route}."}

    def _trial(self, method: str, rest: list[str], body: Any) -> tuple[int, Any]:
        if (method, rest) == ("GET", ["info"]):
            return 200, {
                "trial_id": TRIAL,
                "experiment_id": EXPERIMENT,
                "run_id": "run-1",
                "hparams": self.hparams,
                "latest_checkpoint": None,
                "trial_seed": 5,
                "config": self.config,
            }
        if (method, rest) == ("POST", ["reports"]):
            for report in body["reports"]:
                if report["kind"] == "metrics":
                    self.metrics.append((report["group"], report["steps_completed"], report["metrics"]))
            return 200, {}
        if (method, rest) in (("POST", ["progress"]), ("POST", ["searcher", "invalid_hp"])):
            return 200, {}
        if (method, rest) == ("POST", ["heartbeat"]):
            return 200, {"preempt": False}
        if (method, rest) == ("GET", ["searcher"]):
            action = "stop" if self.completed else "train"
            return 200, {
                "action": action,
                "length": None if self.completed else self.length,
                "unit": "batches",
            }
        if (method, rest) == ("POST", ["searcher", "completed"]):
            self.completed.append(body)
            return 200, {}
        if (method, rest) == ("POST", ["checkpoints", "uploads"]):
            prefix = f"checkpoints/{EXPERIMENT}/{TRIAL}/{body['uuid']}/"
            return 200, {"prefix": prefix, "urls": {f: self._presigned(prefix + f) for f in body["files"]}}
        if (method, rest) == ("POST", ["checkpoints"]):
            checkpoint = {**body, "trial_id": TRIAL, "experiment_id": EXPERIMENT, "state": "COMPLETED"}
            self.checkpoints[body["uuid"]] = checkpoint
            return 200, {"checkpoint": checkpoint}
        return 404, {"error": "NotFound", "message": f"no route {method} /trials/{TRIAL}/{'/'.join(rest)}."}

    def _downloads(self, storage_id: str) -> tuple[int, Any]:
        checkpoint = self.checkpoints.get(storage_id)
        if checkpoint is None:
            return 404, {"error": "NotFound", "message": f"no checkpoint {storage_id}."}
        prefix = f"checkpoints/{EXPERIMENT}/{TRIAL}/{storage_id}/"
        return 200, {
            "checkpoint": checkpoint,
            "urls": {f: self._presigned(prefix + f) for f in checkpoint["resources"]},
        }

    def _presigned(self, key: str) -> str:
        return f"{self.url}/s3/{key}?X-Amz-Signature=sig"

    def _s3(self, method: str, key: str, query: str, auth: str | None, data: bytes) -> tuple[int, Any]:
        if auth is not None or query != "X-Amz-Signature=sig":
            return 403, b"<Error><Code>AccessDenied</Code></Error>"
        with self.lock:
            if method == "PUT":
                self.s3[key] = data
                return 200, b""
            if method == "GET" and key in self.s3:
                return 200, self.s3[key]
        return 404, b"<Error><Code>NoSuchKey</Code></Error>"

    def file_of_last_checkpoint(self, name: str) -> bytes:
        storage_id = list(self.checkpoints)[-1]
        return self.s3[f"checkpoints/{EXPERIMENT}/{TRIAL}/{storage_id}/{name}"]

    def steps_of_checkpoints(self) -> list[int]:
        return [c["steps_completed"] for c in self.checkpoints.values()]


@pytest.fixture
def serve() -> Iterator[Any]:
    planes: list[LoopbackPlane] = []

    def serve(length: int, config: dict[str, Any], hparams: dict[str, Any]) -> LoopbackPlane:
        plane = LoopbackPlane(length, config, hparams)
        plane.thread.start()
        planes.append(plane)
        return plane

    yield serve
    for plane in planes:
        plane.server.shutdown()
        plane.server.server_close()


def start_trial(
    plane: LoopbackPlane, entrypoint: list[str], work: Path, wait_s: float, **extra: str
) -> subprocess.CompletedProcess[str]:
    """Start the trial as an agent does, from the plane's latest checkpoint if any; wait for its end."""
    latest = list(plane.checkpoints)[-1] if plane.checkpoints else None
    run = TrialEnv(
        f"{plane.url}/v1",
        TRIAL,
        EXPERIMENT,
        "run-1",
        TOKEN,
        hparams=plane.hparams,
        trial_seed=5,
        latest_checkpoint=latest,
    )
    spec = LaunchSpec.from_json(
        {
            "run_id": "run-1",
            "trial_id": TRIAL,
            "experiment_id": EXPERIMENT,
            "slots": 1,
            "entrypoint": entrypoint,
            "environment": {**run.to_env(), **extra},
            "context_url": None,
            "api_url": f"{plane.url}/v1",
        }
    )
    settings = Settings(api_url=f"{plane.url}/v1", agent_id="a", pool="default", slots=1, work_dir=work)
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(work)}
    env = build_environment(spec, settings, gpus=None, base=base)
    script = build_script(entrypoint, work / "hook.failed", who="[agent] ")
    return subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=wait_s, check=False
    )


def run_to_the_end(
    plane: LoopbackPlane, entrypoint: list[str], work: Path, wait_s: float, runs: int, **extra: str
) -> None:
    for _ in range(runs):
        done = start_trial(plane, entrypoint, work, wait_s, **extra)
        assert done.returncode == 0, done.stderr[-3000:]
    assert plane.completed, f"the searcher's operation is not completed after {runs} runs"


def assert_same_tensors(got: Any, want: Any, where: str) -> None:
    if isinstance(want, torch.Tensor):
        assert torch.equal(got, want), f"{where} differs"
    elif isinstance(want, dict):
        assert list(got) == list(want), where
        for key in want:
            assert_same_tensors(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_tensors(g, w, f"{where}[{i}]")
    elif isinstance(want, np.ndarray):
        assert np.array_equal(got, want), f"{where} differs"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def context_folder(tmp_path: Path, name: str) -> Path:
    work = tmp_path / name
    shutil.copytree(DATA, work, ignore=shutil.ignore_patterns("__pycache__"))
    return work


# Loaders whose workers are processes; the same trial in process, with more loaders, is in the unit tests.
@pytest.mark.parametrize("loader", ["torch_workers", "harness_workers"])
def test_a_pytorch_trial_sigtermed_twice_in_real_processes_resumes_bitwise(
    serve: Any, tmp_path: Path, wait_s: float, loader: str
) -> None:
    """A shuffled DataLoader, torch's or ours, read by two worker processes from a dataset that draws
    noise from torch's RNG as it reads."""
    config = {
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": LENGTH}},
        "scheduling_unit": 3,
        "min_validation_period": {"batches": 8},
    }
    entrypoint = ["python3", "-m", "stratus.harness.exec.run_trial", "model_def:ResumeTrial"]
    hparams = {"global_batch_size": 8, "loader": loader, "preempt_with": "sigterm"}
    straight = serve(LENGTH, config, {**hparams, "preempt_at": []})
    run_to_the_end(straight, entrypoint, context_folder(tmp_path, "straight"), wait_s, runs=1)

    interrupted = serve(LENGTH, config, {**hparams, "preempt_at": [10, 22]})
    run_to_the_end(interrupted, entrypoint, context_folder(tmp_path, "interrupted"), wait_s, runs=3)

    assert interrupted.steps_of_checkpoints() == [12, 24, LENGTH]  # mid-epoch, then at an epoch's end
    assert interrupted.metrics == straight.metrics
    assert interrupted.completed == straight.completed
    done, expected = (
        torch.load(io.BytesIO(p.file_of_last_checkpoint("state_dict.pth")), weights_only=False)
        for p in (interrupted, straight)
    )
    for part in ("models_state_dict", "optimizers_state_dict", "lr_schedulers_state_dict", "rng_state"):
        assert_same_tensors(done[part], expected[part], part)


def test_a_core_api_script_sigtermed_in_a_real_process_resumes_bitwise(
    serve: Any, tmp_path: Path, wait_s: float
) -> None:
    config = {"searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": LENGTH}}}
    entrypoint = ["python3", "core_train.py"]
    straight = serve(LENGTH, config, {})
    run_to_the_end(straight, entrypoint, context_folder(tmp_path, "straight"), wait_s, runs=1)

    interrupted = serve(LENGTH, config, {})
    work = context_folder(tmp_path, "interrupted")
    run_to_the_end(interrupted, entrypoint, work, wait_s, runs=2, PREEMPT_AT="10")

    assert interrupted.steps_of_checkpoints() == [12, LENGTH]
    assert interrupted.metrics == straight.metrics
    assert interrupted.completed == straight.completed
    done, expected = (
        torch.load(io.BytesIO(p.file_of_last_checkpoint("state.pt")), weights_only=False)
        for p in (interrupted, straight)
    )
    assert_same_tensors(done, expected, "state.pt")
