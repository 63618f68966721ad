"""`det deploy local up` for real, from an empty folder: on the ports asked for (the API's and, with
`--moto-port`, moto's), with the `export DET_MASTER=` line; a second `up` that asks for another port fails
naming the running stack and how to stop it, one that asks for what runs says so and succeeds."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx

WAIT_S = 180.0  # a guard against hangs, not a timing assertion


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _det(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATUS_", "DET_MASTER"))}
    env["STRATUS_HOME"] = str(folder / "home")
    return subprocess.run(
        [sys.executable, "-m", "det", *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )


def test_up_on_chosen_ports_and_a_second_up(tmp_path: Path) -> None:
    api_port, moto_port, other_port = _free_port(), _free_port(), _free_port()
    api = f"http://127.0.0.1:{api_port}"

    up = _det(
        tmp_path,
        "deploy",
        "local",
        "up",
        "--port",
        str(api_port),
        "--moto-port",
        str(moto_port),
        "--slots",
        "1",
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert up.stdout.splitlines()[-2:] == [
            "Point the CLI at it in this shell with:",
            f"  export DET_MASTER={api}",
        ]
        state = json.loads((tmp_path / "home" / "local" / "stack.json").read_text())
        assert state["moto_url"] == f"http://127.0.0.1:{moto_port}"
        assert httpx.get(f"http://127.0.0.1:{moto_port}/moto-api/data.json", timeout=30).status_code == 200

        elsewhere = _det(tmp_path, "deploy", "local", "up", "--port", str(other_port))
        assert elsewhere.returncode == 1
        assert elsewhere.stderr == (
            f"Error: a Stratus local stack already runs at {api} (pid {state['pid']}), not as asked: --port "
            f"{other_port} (it listens on {api_port}); stop it with `det deploy local down` and run this again, "
            f"or use it with `export DET_MASTER={api}`\n"
        )
        same = _det(tmp_path, "d", "local", "cluster-up", "--port", str(api_port))
        assert same.returncode == 0, same.stderr
        assert (
            same.stdout.splitlines()[0]
            == f"Stratus local stack is already running at {api} (pid {state['pid']}), as asked"
        )
        status = _det(tmp_path, "deploy", "local", "status")
        assert f"  moto:    http://127.0.0.1:{moto_port}" in status.stdout.splitlines()
    finally:
        down = _det(tmp_path, "deploy", "local", "cluster-down")
    assert down.returncode == 0 and down.stdout.startswith("Stratus local stack stopped"), (
        down.stdout + down.stderr
    )
