"""The local stack as the CLI finds it: its state folder (`stack.json`, written by the stack once it is
ready and removed when it exits; `stack.pid` and `stack.log`, the CLI's own), whether its process still
runs, and how `det deploy local up` starts it detached."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from det.deploy.stack_command import STACK_MODULE

STATE_FILE = "stack.json"
PID_FILE = "stack.pid"
LOG_FILE = "stack.log"
START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
WAIT_STEP = 0.25
EXIT_NOT_RUNNING = 3  # what `systemctl status` answers for a unit that is not running
DEFAULT_PORT = 8080


@dataclass(frozen=True)
class StackState:
    """The contents of `stack.json`."""

    pid: int
    api_url: str
    moto_url: str
    slots: int
    started_at: Any
    agents: int = 1
    #: The pools the stack started (name, scheduler, preemption, agents, slots), "default" first.
    pools: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> StackState:
        if not isinstance(data, dict):
            raise ValueError("stack.json does not hold an object")
        return cls(
            pid=int(data["pid"]),
            api_url=str(data["api_url"]),
            moto_url=str(data.get("moto_url") or ""),
            slots=int(data.get("slots") or 0),
            started_at=data.get("started_at"),
            agents=int(data.get("agents") or 1),
            pools=tuple(p for p in data.get("pools") or () if isinstance(p, dict)),
        )


@dataclass(frozen=True)
class StackStatus:
    kind: Literal["running", "starting", "stopped"]
    pid: int | None = None
    state: StackState | None = None


class Process(Protocol):
    pid: int

    def poll(self) -> int | None: ...


Spawn = Callable[[list[str], Path], Process]
Alive = Callable[[int], bool]
Kill = Callable[[int, int], None]


def state_dir(environ: Mapping[str, str]) -> Path:
    home = environ.get("STRATUS_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".stratus") / "local"


def read_state(directory: Path) -> StackState | None:
    """The stack's state file, or None when it is missing or unreadable (half-written, corrupt)."""
    try:
        return StackState.from_json(json.loads((directory / STATE_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_pid_file(directory: Path) -> int | None:
    try:
        return int((directory / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a live process that looks like the stack (a reused pid does not count)."""
    if pid <= 0:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        # Reap it if it is our own exited child (a stack started from this process), or it
        # would linger as a zombie that `kill -0` still finds.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by someone else
    proc = Path("/proc")
    if not proc.is_dir():
        return True  # no procfs (macOS): trust kill -0
    try:
        cmdline = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return True
    # A zombie has an empty command line; a reused pid runs something else.
    return STACK_MODULE.encode() in cmdline


def inspect(directory: Path, alive: Alive = pid_alive) -> StackStatus:
    state = read_state(directory)
    if state is not None and alive(state.pid):
        return StackStatus("running", state.pid, state)
    pid = read_pid_file(directory)
    if pid is not None and alive(pid):
        return StackStatus("starting", pid)
    return StackStatus("stopped")


def remove_stale_files(directory: Path) -> list[Path]:
    """Remove the state and pid files of a stack that is gone; the removed paths."""
    removed = []
    for name in (STATE_FILE, PID_FILE):
        path = directory / name
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def log_tail(path: Path, lines: int = 30) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def spawn_detached(command: list[str], log_path: Path) -> Process:
    with log_path.open("wb") as log:
        # A new session: the stack outlives this shell and Ctrl-C here does not reach it.
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
