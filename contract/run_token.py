"""How a trial's processes get their run token without it sitting in any environment block.

The agent keeps each run's token and hands it out over a Unix socket (`AGENT_SOCKET`, an abstract
address on Linux) only to a process of that run: it checks the caller's pid (SO_PEERCRED, given by the
kernel) belongs to the session the run was started in. Every process of a run (its launcher, the
workers, their own children) is in that session; another trial's processes are in their own. So a trial
on the same machine can neither read the token out of `/proc/<pid>/environ` nor ask the agent for it.

`run_token(environ)`: `STRATUS_RUN_TOKEN` when set (local test mode, a run started without a broker),
else the agent's answer, asked once per process.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

from stratus.contract.env import AGENT_SOCKET, RUN_ID, RUN_TOKEN
from stratus.contract.errors import ContractError

#: How long a process waits for the agent to know its run (it registers the run right after starting it).
WAIT_S = 10.0

_cache: dict[tuple[str, str], str] = {}


class RunTokenError(ContractError):
    """The agent refused or could not be asked (the message says which and why)."""


def run_token(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    direct = env.get(RUN_TOKEN, "")
    address, run_id = env.get(AGENT_SOCKET, ""), env.get(RUN_ID, "")
    if direct or not address or not run_id:
        return direct
    key = (address, run_id)
    if key not in _cache:
        _cache[key] = ask(address, run_id)
    return _cache[key]


def ask(address: str, run_id: str, wait_s: float = WAIT_S) -> str:
    """The token of `run_id` from the agent at `address` (`@name`: an abstract socket)."""
    deadline = time.monotonic() + wait_s
    while True:
        answer = _exchange(address, run_id)
        status, _, rest = answer.partition(" ")
        if status == "token" and rest:
            return rest
        if status != "wait" or time.monotonic() >= deadline:
            raise RunTokenError(f"the agent gave no token for run {run_id}: {rest or answer or 'no answer'}")
        time.sleep(0.05)


def _exchange(address: str, run_id: str) -> str:
    target = "\0" + address[1:] if address.startswith("@") else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            conn.connect(target)
            conn.sendall(run_id.encode() + b"\n")
            chunks = []
            while chunk := conn.recv(4096):
                chunks.append(chunk)
    except OSError as e:
        raise RunTokenError(f"cannot ask the agent at {address} for the run token: {e}") from e
    return b"".join(chunks).decode(errors="replace").strip()
