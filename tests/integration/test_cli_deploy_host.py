"""`det deploy local` against this machine: a real busy port and the real process table.

Everything else of `det deploy local` runs on fake processes in tests/unit/det/deploy/test_cli.py."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from det import cli
from det._runtime import Runtime
from det.deploy.local_state import pid_alive


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs procfs")
def test_a_live_pid_that_is_not_the_stack_counts_as_gone() -> None:
    assert pid_alive(os.getpid()) is False  # pytest, not infra.local.stack: a reused pid
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


def test_a_stack_with_two_pools_starts_agents_in_each(tmp_path: Path) -> None:
    from det._client import ApiClient
    from det.deploy.background import BackgroundStack

    stack = BackgroundStack(tmp_path / "stack", slots=1, pools=["gpu:scheduler=fair_share:agents=2:slots=2"])
    try:
        assert [(p["name"], p["agents"], p["slots"]) for p in stack.state["pools"]] == [
            ("default", 1, 1),
            ("gpu", 2, 2),
        ]
        with ApiClient(stack.state["api_url"]) as client:
            deadline = time.monotonic() + 60
            while len(client.list_agents()) < 3:
                assert time.monotonic() < deadline, "the agents did not all heartbeat within 60 s"
                time.sleep(0.2)
            agents = {a["id"]: (a["resource_pool"], a["slots"]) for a in client.list_agents()}
            pools = {p["name"]: p for p in client.list_resource_pools()}
    finally:
        stack.stop()
    assert agents == {"local-0": ("default", 1), "gpu-0": ("gpu", 2), "gpu-1": ("gpu", 2)}
    assert (pools["default"]["scheduler_type"], pools["default"]["preemption"]) == ("priority", True)
    assert (pools["gpu"]["scheduler_type"], pools["gpu"]["num_agents"], pools["gpu"]["slots_available"]) == (
        "fair_share",
        2,
        4,
    )
    assert pools["gpu"]["max_agents"] == 2 and pools["default"]["max_agents"] == 1
