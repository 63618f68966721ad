"""The agent's run-token broker (`stratus.contract.run_token`): a Unix socket that answers a run's token only to
a process of that run, by the session the kernel says the caller is in."""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import struct
import threading
from pathlib import Path

log = logging.getLogger("stratus.harness.agent")

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def session_of(pid: int) -> int | None:
    """The session id of process `pid` (from /proc); None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


class TokenBroker:
    def __init__(self) -> None:
        self.address = f"@stratus-agent-{secrets.token_hex(8)}"
        self._runs: dict[str, tuple[str, int]] = {}  # run id -> (token, session id)
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind("\0" + self.address[1:])
        self._server.listen(64)
        self._closed = False
        threading.Thread(target=self._serve, name="token-broker", daemon=True).start()

    def register(self, run_id: str, token: str, session: int) -> None:
        with self._lock:
            self._runs[run_id] = (token, session)

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.settimeout(5)
                conn.sendall(self._answer(conn).encode())

    def _answer(self, conn: socket.socket) -> str:
        run_id = conn.recv(256).decode(errors="replace").strip()
        pid, _, _ = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
        with self._lock:
            known = self._runs.get(run_id)
        if known is None:
            return "wait run not started here (yet)"
        token, session = known
        if session_of(pid) != session:
            log.warning("refused run %s's token to pid %d, a process of another session", run_id, pid)
            return f"refused pid {pid} is not a process of run {run_id}"
        return f"token {token}"
