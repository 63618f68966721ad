"""`det deploy local` against this machine: a real busy port and the real process table.

Everything else of `det deploy local` runs on fake processes in tests/unit/test_cli_deploy.py."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from det import cli
from det._deploy import pid_alive
from det._runtime import Runtime


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs procfs")
def test_a_live_pid_that_is_not_the_stack_counts_as_gone() -> None:
    assert pid_alive(os.getpid()) is False  # pytest, not infra.local_stack: a reused pid
    assert pid_alive(0) is False
    assert pid_alive(-1) is False


def test_up_refuses_a_busy_port(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    nothing_listens = httpx.MockTransport(lambda request: httpx.Response(503))
    rt = Runtime(environ={"STRATUS_HOME": str(tmp_path)}, transport=nothing_listens, out=out, err=err)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = cli.main(["deploy", "local", "up", "--port", str(port)], runtime=rt)

    assert code == 1
    assert err.getvalue() == (
        f"Error: port {port} on 127.0.0.1 is already in use; stop what listens there or pass --port\n"
    )


def test_the_stack_finds_the_app_from_any_folder(tmp_path: Path) -> None:
    # `det deploy local up` runs the stack in the user's own folder: the Chalice app must be importable
    # from the installation, not only from the checkout's root.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run(
        [sys.executable, "-c", "import app; print(app.app.app_name)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "stratus"
