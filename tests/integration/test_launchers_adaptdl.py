"""The adaptdl launcher as a real process against a threaded fake of the API (rendezvous not needed on one
node; checkpoint uploads and downloads through the fake's own "presigned" URLs; the hints route), with a
tiny replica script that is not AdaptDL but behaves like it: it calls the proxy, and on SIGTERM rank 0
writes ``checkpoint-<NUM_RESTARTS>`` and every rank exits 143. The last test runs real AdaptDL from the
interpreter named by ``STRATUS_ADAPTDL_PYTHON``, else this one (requirements-dev.txt installs adaptdl; skipped
where it cannot import adaptdl.torch).

Nothing waits by sleeping: the test waits on files the replicas write and on the launcher's output.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stratus.harness.agent.testing import wait_until

from .conftest import REPO, Workdir

TOKEN = "run-token-adl"
HINTS = {"initBatchSize": 32, "localBszBounds": [16, 128], "gradientAccumulation": True, "gradParams": {}}

REPLICA = """
import json, os, pathlib, signal, sys, urllib.error, urllib.request
env = {k: v for k, v in os.environ.items() if k.startswith(("ADAPTDL", "TORCH_FORCE", "OMP"))}
rank, group = env["ADAPTDL_REPLICA_RANK"], env["ADAPTDL_NUM_RESTARTS"]
url, job = env["ADAPTDL_SUPERVISOR_URL"], env["ADAPTDL_JOB_ID"]
ckpt, share = pathlib.Path(env["ADAPTDL_CHECKPOINT_PATH"]), pathlib.Path(env["ADAPTDL_SHARE_PATH"])
tb = pathlib.Path(env["ADAPTDL_TENSORBOARD_LOGDIR"])
addrs = json.load(urllib.request.urlopen(f"{url}/discover/{job}/{group}"))
hints = None
if rank == "0":
    req = urllib.request.Request(f"{url}/hints/{job}", data=json.dumps(json.loads(os.environ["HINTS"])).encode(),
                                 method="PUT", headers={"Content-Type": "application/json"})
    hints = urllib.request.urlopen(req).status
    if not (share / "data.txt").exists():  # a dataset fetched once into the share folder (1 MiB)
        (share / "data.txt").write_text("downloaded once " * 65536)
    (tb / f"events-{group}").write_text(f"written by start {group}")
def stop(*_):
    if rank == "0":
        (ckpt / "_checkpoint").mkdir()
        (ckpt / "_checkpoint" / "state").write_text(f"saved by start {group}")
        (ckpt / "_checkpoint").rename(ckpt / f"checkpoint-{group}")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
seen = {"env": env, "addrs": addrs, "hints": hints, "restored": sorted(p.name for p in ckpt.iterdir()),
        "share": sorted(p.name for p in share.iterdir()), "dirs": all(pathlib.Path(env[k]).is_dir() for k in
        ("ADAPTDL_CHECKPOINT_PATH", "ADAPTDL_SHARE_PATH", "ADAPTDL_TENSORBOARD_LOGDIR"))}
out = pathlib.Path(os.environ["OUT"])
(out / f".rank{rank}").write_text(json.dumps(seen)); (out / f".rank{rank}").rename(out / f"rank{rank}.json")
mode = os.environ.get("MODE", "wait")
if mode == "self143":
    stop()
if mode == "wait":
    while True:
        signal.pause()
"""


class FakeApi:
    """The trial routes the launcher calls, and an in-memory "S3" behind presigned URLs."""

    def __init__(self, hints_route: bool = True) -> None:
        self.hints_route = hints_route
        self.hints: list[tuple[str | None, Any]] = []
        self.objects: dict[str, bytes] = {}
        #: The objects written, "uuid/name", by a PUT to a presigned URL or by a copy the API made.
        self.puts: list[str] = []
        self.copies: list[str] = []
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._serve(None)

            def do_POST(self) -> None:
                self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def do_PUT(self) -> None:
                self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def _serve(self, body: bytes | None) -> None:
                with fake.lock:
                    status, answer = fake.handle(
                        self.command, self.path, self.headers.get("Authorization"), body
                    )
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def handle(self, method: str, path: str, auth: str | None, body: bytes | None) -> tuple[int, Any]:
        if path.startswith("/s3/"):
            if auth is not None:
                return 400, {"message": "a presigned URL with an Authorization header"}
            if method == "PUT":
                self.objects[path[4:]] = body or b""
                self.puts.append(path[4:])
                return 200, b""
            return (200, self.objects[path[4:]]) if path[4:] in self.objects else (404, b"")
        if auth != f"Bearer {TOKEN}":
            return 401, {"error": "Unauthorized", "message": "bad run token"}
        decoded = json.loads(body) if body else None
        if method == "PUT" and path == "/trials/7/adaptdl/hints":
            if not self.hints_route:
                return 404, {"error": "NotFound", "message": path}
            self.hints.append((auth, decoded))
            return 200, {}
        if method == "POST" and path == "/trials/7/checkpoints/uploads":
            uid, copy_from = decoded["uuid"], decoded.get("copy_from") or {}
            if any(f"{source}/{name}" not in self.objects for name, source in copy_from.items()):
                return 404, {"error": "NotFound", "message": "no such file to copy"}
            for name, source in copy_from.items():
                self.objects[f"{uid}/{name}"] = self.objects[f"{source}/{name}"]
                self.copies.append(f"{uid}/{name}")
            urls = {name: f"{self.url}/s3/{uid}/{name}" for name in decoded["files"]}
            return 200, {"urls": urls, "copied": sorted(copy_from)}
        if method == "POST" and path == "/trials/7/checkpoints":
            if f"{decoded['uuid']}/metadata.json" not in self.objects:
                return 409, {"error": "Conflict", "message": "no metadata.json yet"}
            self.checkpoints[decoded["uuid"]] = decoded
            return 200, {"checkpoint": decoded}
        found = re.fullmatch(r"/checkpoints/([0-9a-f-]+)/downloads", path)
        if method == "GET" and found and found[1] in self.checkpoints:
            record = self.checkpoints[found[1]]
            urls = {name: f"{self.url}/s3/{found[1]}/{name}" for name in record["resources"]}
            return 200, {"checkpoint": record, "urls": urls}
        return 404, {"error": "NotFound", "message": f"{method} {path}"}


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    thread = threading.Thread(target=fake.server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


class Launcher:
    """``python -m stratus.launchers.adaptdl`` running in the background; its stderr collected as it comes."""

    def __init__(
        self, workdir: Workdir, args: list[str], env: dict[str, str], python: str = sys.executable
    ) -> None:
        self.proc = subprocess.Popen(
            [python, "-m", "stratus.launchers.adaptdl", *args],
            cwd=workdir.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def saw(self, pattern: str) -> Callable[[], bool]:
        return lambda: any(re.search(pattern, line) for line in list(self.lines))

    def finish(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            self.proc.kill()
        self._reader.join(timeout=5)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


def node_env(workdir: Workdir, api: FakeApi, root: str, **extra: str) -> dict[str, str]:
    out = workdir.path / root / "out"
    out.mkdir(parents=True, exist_ok=True)
    values = {
        "STRATUS_MASTER": api.url + "/",
        "STRATUS_TRIAL_ID": "7",
        "STRATUS_EXPERIMENT_ID": "12",
        "STRATUS_RUN_TOKEN": TOKEN,
        "STRATUS_SLOTS": "2",
        "STRATUS_ADAPTDL_ROOT": str(workdir.path / root),
        "OUT": str(out),
        "HINTS": json.dumps(HINTS),
    }
    return workdir.env(**{**values, **extra})


def ranks_ready(workdir: Workdir, root: str, n: int) -> Callable[[], list[dict[str, Any]] | None]:
    def ready() -> list[dict[str, Any]] | None:
        files = [workdir.path / root / "out" / f"rank{r}.json" for r in range(n)]
        return [json.loads(f.read_text()) for f in files] if all(f.exists() for f in files) else None

    return ready


def test_two_replicas_get_their_env_proxy_and_a_sigterm_is_a_clean_preempt_then_a_restore(
    workdir: Workdir, api: FakeApi, wait_s: float
) -> None:
    script = workdir.script("replica.py", REPLICA)
    first = Launcher(workdir, ["--", script], node_env(workdir, api, "a"))
    seen = wait_until(ranks_ready(workdir, "a", 2), wait_s, "both replicas up")
    first.proc.send_signal(signal.SIGTERM)
    assert first.finish(wait_s) == 0, first.output
    assert "preempted: every replica saved" in first.output

    root = str(workdir.path / "a")
    for rank, replica in enumerate(seen):
        assert replica["env"] == {
            **replica["env"],
            "ADAPTDL_REPLICA_RANK": str(rank),
            "ADAPTDL_NUM_REPLICAS": "2",
            "ADAPTDL_NUM_NODES": "1",
            "ADAPTDL_NUM_RESTARTS": "0",
            "ADAPTDL_JOB_ID": "12/7",
            "ADAPTDL_MASTER_ADDR": "127.0.0.1",
            "ADAPTDL_CHECKPOINT_PATH": f"{root}/checkpoint",
            "ADAPTDL_SHARE_PATH": f"{root}/share",
            "ADAPTDL_TENSORBOARD_LOGDIR": f"{root}/tensorboard",
            "ADAPTDLCTL_TENSORBOARD_LOGDIR": f"{root}/tensorboard",
            "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
            "OMP_NUM_THREADS": "1",
        }
        assert (
            replica["addrs"] == ["127.0.0.1", "127.0.0.1"] and replica["dirs"] and replica["restored"] == []
        )
    assert seen[0]["env"]["ADAPTDL_MASTER_PORT"] == seen[1]["env"]["ADAPTDL_MASTER_PORT"] != "0"
    assert seen[0]["hints"] == 200
    assert api.hints == [
        (
            f"Bearer {TOKEN}",
            {
                **dict.fromkeys(("globalBatchSize", "maxBatchSize", "maxProfiledReplicas", "perfParams")),
                **HINTS,
                "gradParams": None,
            },
        )
    ]

    [(uid, stored)] = api.checkpoints.items()
    assert stored["metadata"] == {"steps_completed": 0, "adaptdl": {"format": 1, "restarts": 0}}
    assert sorted(stored["resources"]) == [
        "checkpoint/checkpoint-0/state",
        "metadata.json",
        "share/data.txt",
        "tensorboard/events-0",
    ]

    # The next start, on a fresh node: the folders come back through the API, NUM_RESTARTS goes up.
    second = Launcher(
        workdir,
        ["--replicas-per-node", "1", "--", script],
        node_env(workdir, api, "b", STRATUS_LATEST_CHECKPOINT=uid, MODE="complete"),
    )
    assert second.finish(wait_s) == 0, second.output
    [again] = ranks_ready(workdir, "b", 1)() or []
    assert again["env"]["ADAPTDL_NUM_RESTARTS"] == "1" and again["env"]["ADAPTDL_NUM_REPLICAS"] == "1"
    assert again["restored"] == ["checkpoint-0"] and again["share"] == ["data.txt"]
    assert (workdir.path / "b" / "checkpoint" / "checkpoint-0" / "state").read_text() == "saved by start 0"
    # Completed: AdaptDL saved nothing, but the TensorBoard folder (both starts' files) is stored once more.
    [(last_uid, last)] = [(u, c) for u, c in api.checkpoints.items() if u != uid]
    assert last["metadata"] == {"steps_completed": 0, "adaptdl": {"format": 1, "restarts": 0}}
    assert sorted(n for n in last["resources"] if n.startswith("tensorboard/")) == [
        "tensorboard/events-0",
        "tensorboard/events-1",
    ]
    # What did not change since the restore and is worth it (1 MiB or more) was copied by the control
    # plane, not uploaded again; small files were uploaded.
    assert api.copies == [f"{last_uid}/share/data.txt"]
    assert sorted(p for p in api.puts if p.startswith(last_uid)) == [
        f"{last_uid}/checkpoint/checkpoint-0/state",
        f"{last_uid}/metadata.json",
        f"{last_uid}/tensorboard/events-0",
        f"{last_uid}/tensorboard/events-1",
    ]
    assert api.objects[f"{last_uid}/share/data.txt"] == b"downloaded once " * 65536
    assert "1 unchanged copied from checkpoint" in second.output


def test_the_preempt_file_stops_the_replicas_like_our_sigterm(
    workdir: Workdir, api: FakeApi, wait_s: float
) -> None:
    script = workdir.script("replica.py", REPLICA)
    marker = workdir.path / "preempt"
    launcher = Launcher(
        workdir, ["--", script], node_env(workdir, api, "a", STRATUS_PREEMPT_FILE=str(marker))
    )
    wait_until(ranks_ready(workdir, "a", 2), wait_s, "both replicas up")
    marker.touch()
    assert launcher.finish(wait_s) == 0, launcher.output
    assert "appeared: stopping the replicas" in launcher.output and len(api.checkpoints) == 1


def test_143_without_our_sigterm_is_a_failure(workdir: Workdir, api: FakeApi, wait_s: float) -> None:
    script = workdir.script("replica.py", REPLICA)
    launcher = Launcher(workdir, ["--", script], node_env(workdir, api, "a", MODE="self143"))
    assert launcher.finish(wait_s) == 143, launcher.output
    assert "without a stop from the launcher" in launcher.output


def test_an_api_without_the_hints_route_is_said_once_and_training_goes_on(
    workdir: Workdir, api: FakeApi, wait_s: float
) -> None:
    api.hints_route = False
    script = workdir.script("replica.py", REPLICA)
    launcher = Launcher(workdir, ["--", script], node_env(workdir, api, "a", MODE="complete"))
    assert launcher.finish(wait_s) == 0, launcher.output
    [rank0, _] = ranks_ready(workdir, "a", 2)() or []
    assert rank0["hints"] == 200
    assert launcher.output.count("no /trials/{trial_id}/adaptdl/hints route yet") == 1


# ---- real AdaptDL ------------------------------------------------------------------------------------------

ADAPTDL_TRIAL = """
import os, time, torch, torch.nn as nn
import adaptdl.torch as at, adaptdl.env as env
at.init_process_group("gloo")
g = torch.Generator().manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(512, 16, generator=g), torch.randint(0, 4, (512,), generator=g))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model = at.AdaptiveDataParallel(model, opt)
loader = at.AdaptiveDataLoader(ds, batch_size=32, shuffle=True, drop_last=True)
for epoch in at.remaining_epochs_until(int(os.environ.get("EPOCHS", "6"))):
    for xb, yb in loader:
        opt.zero_grad(); nn.functional.cross_entropy(model(xb), yb).backward(); opt.step()
        time.sleep(float(os.environ.get("STEP_SLEEP", "0.02")))
    print(f"EPOCH {epoch} done restart={env.num_restarts()} replicas={env.num_replicas()}", flush=True)
"""


def adaptdl_python() -> str:
    python = os.environ.get("STRATUS_ADAPTDL_PYTHON") or sys.executable
    probe = subprocess.run(
        [python, "-c", "import adaptdl.torch"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot import adaptdl.torch: {probe.stderr.strip().splitlines()[-1:]}")
    return python


def test_real_adaptdl_one_replica_then_sigterm_then_two_replicas_continue_the_epochs(
    workdir: Workdir, api: FakeApi
) -> None:
    python = adaptdl_python()
    wait = 180.0  # a guard against hangs: AdaptDL starts slowly
    script = workdir.script("trial.py", ADAPTDL_TRIAL)
    env = node_env(workdir, api, "a", STRATUS_SLOTS="1", PYTHONPATH=str(REPO))
    first = Launcher(workdir, ["--", script], env, python=python)
    wait_until(first.saw(r"EPOCH 1 done"), wait, "two epochs on one replica")
    first.proc.send_signal(signal.SIGTERM)
    assert first.finish(wait) == 0, first.output
    [(uid, stored)] = api.checkpoints.items()
    assert stored["metadata"]["adaptdl"]["restarts"] == 0

    env = node_env(workdir, api, "b", STRATUS_SLOTS="2", PYTHONPATH=str(REPO), STRATUS_LATEST_CHECKPOINT=uid)
    second = Launcher(workdir, ["--", script], env, python=python)
    assert second.finish(wait) == 0, second.output
    before = [int(e) for e in re.findall(r"\[rank=0\] EPOCH (\d+) done", first.output)]
    after = re.findall(r"\[rank=0\] EPOCH (\d+) done restart=(\d+) replicas=(\d+)", second.output)
    assert {(r, n) for _, r, n in after} == {("1", "2")}
    assert before + [int(e) for e, _, _ in after] == list(range(6)), (first.output, second.output)
