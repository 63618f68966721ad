"""What a stack killed with -9 leaves running: its agents (each stops by itself once it sees the stack gone,
`stratus.harness.agent --parent-pid`) and its runs' process groups (started in sessions of their own, so they
outlive their agent). The next start of the stack ends both before anything else, so no trial of the
old stack runs beside its own resumed copy.

Each process is known by its pid and its start time (`stratus.harness.agent._spawn.process_start_ticks`), so a
pid the system has since given to another process is left alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from stratus.contract.local_state import AGENTS_RECORD
from stratus.harness.agent._spawn import PROCESS_RECORD, process_start_ticks

log = logging.getLogger("stratus.local")

GRACE_S = 15.0


def record_agents(state_dir: Path, pids: list[int]) -> None:
    entries = [{"pid": pid, "start": process_start_ticks(pid)} for pid in pids]
    tmp = state_dir / (AGENTS_RECORD + ".tmp")
    tmp.write_text(json.dumps(entries))
    tmp.replace(state_dir / AGENTS_RECORD)


def end_leftovers(state_dir: Path, grace_s: float = GRACE_S) -> list[int]:
    """End the agents and run process groups a previous stack in `state_dir` left running; returns
    their pids. SIGTERM first (an agent ends its runs), SIGKILL after `grace_s`."""
    agents = [(pid, start) for pid, start in _records([state_dir / AGENTS_RECORD]) if _same(pid, start)]
    groups = [
        (pid, start)
        for pid, start in _records(sorted(state_dir.glob(f"agents/*/runs/*/{PROCESS_RECORD}")))
        if _same(pid, start)
    ]
    for pid, _ in agents:
        _signal(pid, signal.SIGTERM, group=False)
    for pid, _ in groups:
        _signal(pid, signal.SIGTERM, group=True)
    deadline = time.monotonic() + grace_s
    while any(_same(pid, start) for pid, start in agents + groups) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid, start in agents:
        if _same(pid, start):
            _signal(pid, signal.SIGKILL, group=False)
    for pid, start in groups:
        if _same(pid, start):
            _signal(pid, signal.SIGKILL, group=True)
    for path in state_dir.glob(f"agents/*/runs/*/{PROCESS_RECORD}"):
        path.unlink(missing_ok=True)
    ended = [pid for pid, _ in agents + groups]
    if ended:
        log.warning("ended %d processes a previous stack left running: %s", len(ended), ended)
    return ended


def _records(paths: list[Path]) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    for path in paths:
        try:
            data: Any = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for entry in data if isinstance(data, list) else [data]:
            if isinstance(entry, dict):
                pid, start = entry.get("pid", entry.get("pgid")), entry.get("start")
                if isinstance(pid, int) and isinstance(start, int):
                    found.append((pid, start))
    return found


def _same(pid: int, start: int) -> bool:
    """The process is still the one recorded (alive, and not a reused pid)."""
    return process_start_ticks(pid) == start and not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _signal(pid: int, sig: int, *, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
