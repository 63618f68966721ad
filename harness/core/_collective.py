"""Collectives between a trial's processes without `torch.distributed`: the standard library's sockets.

Determined's `DistributedContext(chief_ip=...)` gives `allgather`, `gather` and `broadcast` to plain
processes (4_distributed starts its own workers with no framework at all). Here the chief (rank 0)
listens on a TCP port and every other rank connects to it; each collective is one round trip through
the chief, so its answer is the same on every rank:

- ``allgather(obj)``: every rank sends its object to the chief, the chief sends the list (rank order) back;
- ``gather(obj)``: the same without the way back (the chief alone gets the list);
- ``broadcast(obj)``: the chief sends its object to every rank.

The connection is made at the first collective (the chief binds and accepts ``size - 1`` workers; a
worker retries connecting until ``connect_timeout_s``), so constructing a context never blocks. Frames
are 8-byte big-endian lengths followed by a pickle of ``(operation, payload)``: a rank that calls a
different collective than the chief fails with `CollectiveError` naming both, and a peer that goes away
ends its partners' collective with `CollectiveError` rather than a hang. Pickles are read only from the
trial's own processes (a worker names its rank in a fixed frame before anything is unpickled).

The port: ``STRATUS_COLLECTIVE_PORT`` (a free port the agent picks per run, so two trials on one host do
not collide), else Determined's default, `DEFAULT_PORT`.
"""

from __future__ import annotations

import logging
import pickle
import socket
import struct
import threading
import time
from typing import Any

from stratus.harness._info import DEFAULT_COLLECTIVE_PORT
from stratus.harness.errors import HarnessError

log = logging.getLogger("stratus.harness.distributed")

DEFAULT_PORT = DEFAULT_COLLECTIVE_PORT
CONNECT_TIMEOUT_S = 300.0
_LENGTH = struct.Struct(">Q")
#: A worker's first frame: this magic, then its rank (no pickle before a peer has named itself).
_HELLO = struct.Struct(">8sI")
_MAGIC = b"stratus1"
_RETRY_S = 0.05


class CollectiveError(HarnessError):
    """A collective between the trial's processes cannot be completed."""


class SocketCollectives:
    """One rank's end of the chief-centred star (see the module docstring)."""

    def __init__(
        self,
        *,
        rank: int,
        size: int,
        chief_ip: str,
        port: int,
        bind_all: bool = False,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        if not 1 <= port <= 65535:
            raise CollectiveError(f"port {port} is not a TCP port; give 1..65535.")
        self.rank = rank
        self.size = size
        self.chief_ip = chief_ip
        self.port = port
        self._bind_all = bind_all
        self._timeout = connect_timeout_s
        self._lock = threading.Lock()
        self._server: socket.socket | None = None
        self._workers: dict[int, socket.socket] = {}  # chief: rank -> connection
        self._chief: socket.socket | None = None  # worker: its connection to the chief

    # ---- the collectives -------------------------------------------------------------------------------

    def allgather(self, obj: Any) -> list[Any]:
        with self._lock:
            if self.rank != 0:
                chief = self._connect()
                _send(chief, ("allgather", obj))
                return list(_expect(chief, "allgather", "the chief"))
            objs = self._collect("allgather", obj)
            for conn in self._workers.values():
                _send(conn, ("allgather", objs))
            return objs

    def gather(self, obj: Any) -> list[Any] | None:
        with self._lock:
            if self.rank != 0:
                _send(self._connect(), ("gather", obj))
                return None
            return self._collect("gather", obj)

    def broadcast(self, obj: Any) -> Any:
        with self._lock:
            if self.rank != 0:
                return _expect(self._connect(), "broadcast", "the chief")
            self._accept()
            for conn in self._workers.values():
                _send(conn, ("broadcast", obj))
            return obj

    def close(self) -> None:
        with self._lock:
            for conn in [*self._workers.values(), self._chief, self._server]:
                if conn is not None:
                    conn.close()
            self._workers.clear()
            self._chief = self._server = None

    # ---- the chief -------------------------------------------------------------------------------------

    def _collect(self, op: str, obj: Any) -> list[Any]:
        self._accept()
        return [obj, *(_expect(self._workers[r], op, f"rank {r}") for r in range(1, self.size))]

    def _accept(self) -> None:
        if len(self._workers) == self.size - 1:
            return
        if self._server is None:
            host = "" if self._bind_all else self.chief_ip
            try:
                self._server = socket.create_server((host, self.port), backlog=self.size)
            except OSError as e:
                raise CollectiveError(
                    f"the chief cannot listen on {host or '*'}:{self.port} for the trial's collectives "
                    f"({e.strerror or e}); another process holds the port: give DistributedContext a free "
                    "pub_port=, or set STRATUS_COLLECTIVE_PORT."
                ) from e
        deadline = time.monotonic() + self._timeout
        while len(self._workers) < self.size - 1:
            self._server.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                missing = sorted(set(range(1, self.size)) - set(self._workers))
                raise CollectiveError(
                    f"ranks {missing} of {self.size} did not connect to the chief's port {self.port} "
                    f"within {self._timeout:.0f} s; every rank must call the same collectives."
                ) from None
            conn.settimeout(self._timeout)
            magic, hello = _HELLO.unpack(_read(conn, _HELLO.size, "a connecting rank"))
            conn.settimeout(None)
            if magic != _MAGIC or not 0 < hello < self.size or hello in self._workers:
                conn.close()
                raise CollectiveError(
                    f"a process on port {self.port} did not introduce itself as one of ranks "
                    f"1..{self.size - 1} (once each); is another program using this port?"
                )
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._workers[hello] = conn

    # ---- a worker --------------------------------------------------------------------------------------

    def _connect(self) -> socket.socket:
        if self._chief is not None:
            return self._chief
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                conn = socket.create_connection((self.chief_ip, self.port), timeout=self._timeout)
                break
            except OSError as e:
                if time.monotonic() >= deadline:
                    raise CollectiveError(
                        f"rank {self.rank} could not reach the chief at {self.chief_ip}:{self.port} within "
                        f"{self._timeout:.0f} s ({e.strerror or e}); is rank 0 running the same collectives?"
                    ) from e
                time.sleep(_RETRY_S)  # the chief binds at its first collective: try again
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            conn.sendall(_HELLO.pack(_MAGIC, self.rank))
        except OSError as e:
            conn.close()
            raise CollectiveError(
                f"rank {self.rank} lost the chief while connecting ({e.strerror or e})."
            ) from e
        self._chief = conn
        return conn


def _send(conn: socket.socket, message: tuple[str, Any]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        conn.sendall(_LENGTH.pack(len(data)) + data)
    except OSError as e:
        raise CollectiveError(f"a peer of this collective went away ({e.strerror or e}).") from e


def _expect(conn: socket.socket, op: str, peer: str) -> Any:
    """The payload of the next frame from ``peer``, which must be for the collective ``op``."""
    header = _read(conn, _LENGTH.size, peer)
    received_op, payload = pickle.loads(_read(conn, _LENGTH.unpack(header)[0], peer))
    if received_op != op:
        raise CollectiveError(
            f"{peer} called {received_op}() where this rank called {op}(); every rank must call the "
            "same collectives in the same order."
        )
    return payload


def _read(conn: socket.socket, n: int, peer: str) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        try:
            chunk = conn.recv(min(n - len(chunks), 1 << 20))
        except TimeoutError:
            raise CollectiveError(f"{peer} said nothing within the connect timeout.") from None
        except OSError as e:
            raise CollectiveError(
                f"{peer} went away in the middle of a collective ({e.strerror or e})."
            ) from e
        if not chunk:
            raise CollectiveError(
                f"{peer} went away in the middle of a collective (its process ended or failed)."
            )
        chunks += chunk
    return bytes(chunks)
