"""A real `det experiment create` process, stopped by a signal in the middle of its work: SIGTERM while it
packs a large folder, Ctrl-C (SIGINT) while it uploads. It leaves no temporary file, says what was
interrupted and that nothing was created, and exits 128+N. The API is a small HTTP server on the loopback
that checks configs, offers an upload URL to itself and holds the upload until the test is done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60.0  # a guard against hangs, not a timing assertion
CONFIG = "name: big\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: {batches: 1}}\n"
# `det` as its console script runs it, with Ctrl-C raising KeyboardInterrupt even where the test runner
# ignores SIGINT (a child inherits an ignored signal).
DET = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); from det.cli import main; sys.exit(main())"


class FakeApi(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.calls: list[str] = []
        self.upload_started = threading.Event()
        self.release = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    server: FakeApi

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  (quiet)
        pass

    def _answer(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == "/experiments":
            self.server.calls.append("validate" if body.get("validate_only") else "create")
            self._answer({"experiment": None, "warnings": []})
        elif self.path == "/contexts":
            self.server.calls.append("contexts")
            url = f"{self.server.url}/s3/contexts/{body['sha256']}.tar.zst"
            self._answer(
                {"key": "k", "exists": False, "upload": {"url": url, "method": "PUT", "headers": {}}}
            )

    def do_PUT(self) -> None:
        self.server.calls.append("upload")
        self.rfile.read(1024)
        self.server.upload_started.set()
        self.server.release.wait(WAIT_S)  # S3 takes its time: the upload is in flight until the test ends


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    server = FakeApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)  # a poll of the condition, not a wait for time to pass


def _create(tmp_path: Path, api: FakeApi, context: Path) -> tuple[subprocess.Popen[str], Path]:
    temp = tmp_path / "tmp"  # the CLI's temporary files go here (TMPDIR), and only its own
    temp.mkdir()
    (tmp_path / "const.yaml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATUS_")}
    env |= {"TMPDIR": str(temp), "STRATUS_CONTEXT_CACHE": "off", "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", DET, "-m", api.url, "experiment", "create", "const.yaml", str(context)]
    process = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return process, temp


def test_sigterm_while_packing_a_large_folder_leaves_no_archive_behind(
    tmp_path: Path, fake_api: FakeApi
) -> None:
    context = tmp_path / "big"
    for d in range(40):  # 20,000 incompressible files, 80 MB: packing them takes a while
        (context / f"d{d}").mkdir(parents=True)
        for i in range(500):
            (context / f"d{d}" / f"f{i}.bin").write_bytes(os.urandom(4000))
    process, temp = _create(tmp_path, fake_api, context)

    _wait_for(
        lambda: any(p.stat().st_size > 0 for p in temp.glob("stratus-context-*.tar.zst")), "the archive"
    )
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=WAIT_S)

    assert process.returncode == 128 + signal.SIGTERM, err
    assert err.splitlines()[-1] == (
        f"Interrupted: packing the context {context} (SIGTERM); nothing was created, and no temporary file "
        "is left: run the command again"
    )
    assert list(temp.iterdir()) == []
    assert fake_api.calls == ["validate"]  # stopped while packing: nothing was uploaded nor created


def test_ctrl_c_while_uploading_says_what_was_interrupted(tmp_path: Path, fake_api: FakeApi) -> None:
    context = tmp_path / "small"
    context.mkdir()
    (context / "train.py").write_bytes(os.urandom(3_000_000))
    process, temp = _create(tmp_path, fake_api, context)

    assert fake_api.upload_started.wait(WAIT_S)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=WAIT_S)

    assert process.returncode == 130, err
    assert err.splitlines()[-1] == (
        f"Interrupted: uploading the context {context} (Ctrl-C); nothing was created, and no temporary file "
        "is left: run the command again"
    )
    assert list(temp.iterdir()) == []
    assert fake_api.calls == ["validate", "contexts", "upload"]
