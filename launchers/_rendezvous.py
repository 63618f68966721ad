"""How the nodes of a multi-node trial find each other: through the control plane (contracts.md §1).

Every node's launcher registers its address; the chief (node 0) also gives the port its rank 0 will
listen on. Then each reads the run's rendezvous record until every node is in it:

    POST {STRATUS_MASTER}/trials/{STRATUS_TRIAL_ID}/rendezvous  {"node_rank": int, "addr": str, "port": int | null}
    GET  {STRATUS_MASTER}/trials/{STRATUS_TRIAL_ID}/rendezvous

both with ``Authorization: Bearer {STRATUS_RUN_TOKEN}`` and both answering the record,
``{"run_id", "num_nodes", "nodes": [{"node_rank", "addr", "port"}, ...] (by rank), "ready"}``.

- A node's address is ``STRATUS_NODE_ADDR``, or the local address of the route to the master's host
  (127.0.0.1 when the master is on loopback). The chief's port is ``STRATUS_CHIEF_PORT``, or a free one.
- What the one retry policy of `stratus.contract.http` retries (no answer, 5xx, 408, 425, 429) is asked again,
  and the record is read again, every 0.2 s growing to 2 s, until ``STRATUS_RENDEZVOUS_TIMEOUT_S``
  (600 s); then the nodes still missing are named.
- 409 (the run has ended: this launcher is stale), 401/403 (the run token) and any other 4xx stop at once.

Standard library only (the compute side's HTTP session, `stratus.contract.http`, is too): the launchers run in the
trial's image, which need not have httpx.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import socket
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from stratus.contract.errors import HttpCallError
from stratus.contract.http import RetryPolicy, Session, Transport
from stratus.launchers._info import LOCAL_ADDR, LaunchInfo, free_port, rendezvous_env
from stratus.launchers.errors import LaunchConfigError, RendezvousError

POLL_FIRST_S = 0.2
POLL_MAX_S = 2.0
POLL_GROWTH = 1.5
REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Node:
    node_rank: int
    addr: str
    port: int | None = None


@dataclass(frozen=True)
class Record:
    """The run's rendezvous record, as the control plane answers it."""

    run_id: str
    num_nodes: int
    nodes: tuple[Node, ...]
    ready: bool

    @property
    def missing(self) -> list[int]:
        """Ranks of the nodes not registered yet."""
        seen = {n.node_rank for n in self.nodes}
        return [r for r in range(self.num_nodes) if r not in seen]

    @classmethod
    def from_json(cls, data: Any) -> Record:
        try:
            nodes = tuple(
                Node(
                    _int(n["node_rank"]), _str(n["addr"]), None if n.get("port") is None else _int(n["port"])
                )
                for n in data["nodes"]
            )
            record = cls(_str(data["run_id"]), _int(data["num_nodes"]), nodes, data["ready"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise RendezvousError(
                f"the control plane's rendezvous answer is malformed ({type(e).__name__}: {e}): "
                f"{json.dumps(data)[:300]}"
            ) from None
        if not isinstance(record.ready, bool):
            raise RendezvousError(f"the control plane's rendezvous answer has ready={record.ready!r}")
        return record


class RendezvousClient:
    """The two calls, one attempt each, over the compute side's one HTTP session: an `HttpCallError` whose
    status the retry policy retries is the caller's to retry; `stop_error` turns any other into the
    launcher's error. ``transport`` lets tests answer in memory."""

    def __init__(self, master: str, trial_id: str, token: str, *, transport: Transport | None = None) -> None:
        self._path = f"/trials/{urllib.parse.quote(trial_id, safe='')}/rendezvous"
        self._session = Session(master, token, transport=transport, retry=RetryPolicy().once())
        self.url = self._session.base_url + self._path

    def register(self, node_rank: int, addr: str, port: int | None, *, timeout: float) -> Record:
        body = {"node_rank": node_rank, "addr": addr, "port": port}
        return Record.from_json(self._session.call("POST", self._path, body, timeout_s=timeout))

    def read(self, *, timeout: float) -> Record:
        return Record.from_json(self._session.call("GET", self._path, timeout_s=timeout))


def stop_error(e: HttpCallError) -> RendezvousError:
    """The launcher's error for a failure not worth asking again."""
    if e.status == 409:
        return RendezvousError(
            f"the run has ended: {e}; this node's launcher belongs to a stale run and stops."
        )
    if e.status in (401, 403):
        return RendezvousError(
            f"the control plane refused STRATUS_RUN_TOKEN: {e}; the token is valid only for its own "
            "trial while the run lives."
        )
    if e.status >= 400:
        return RendezvousError(f"the control plane refused the rendezvous: {e}")
    return RendezvousError(f"the rendezvous answer is not a record: {e}")


def node_address(master: str) -> str:
    """This node's address on the route to ``master``'s host: a UDP socket's connect sends nothing, it
    only picks the route. 127.0.0.1 when the master is on loopback."""
    parts = urllib.parse.urlsplit(master)
    host = parts.hostname
    if not host:
        raise LaunchConfigError(f"STRATUS_MASTER={master!r} is not a URL with a host.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 80
    try:
        target = str(socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0])
        if ipaddress.ip_address(target).is_loopback:
            return LOCAL_ADDR
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, port))
            return str(s.getsockname()[0])
    except OSError as e:
        raise LaunchConfigError(
            f"cannot tell this node's address from the route to {host} ({e}); set STRATUS_NODE_ADDR to the "
            "address the other nodes reach this one at."
        ) from None


def rendezvous(
    info: LaunchInfo,
    environ: Mapping[str, str] | None = None,
    *,
    err: IO[str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    transport: Transport | None = None,
) -> LaunchInfo:
    """Register this node, wait until every node has, and return ``info`` with the chief's address and
    port and every node's address (by rank) filled in."""
    env = rendezvous_env(environ)
    deadline = clock() + env.timeout_s
    addr = env.node_addr or node_address(env.master)
    port = None
    if info.node_rank == 0:
        port = info.chief_port if info.chief_port is not None else free_port(addr)
    client = RendezvousClient(env.master, env.trial_id, env.token, transport=transport)
    me = f"node {info.node_rank} of {info.num_nodes}"
    record: Record | None = None
    last_error: str | None = None
    # One policy paces the polls and says which failures are worth asking again.
    policy = RetryPolicy(
        first_delay_s=POLL_FIRST_S, growth=POLL_GROWTH, max_delay_s=POLL_MAX_S, max_attempts=None
    )
    delays = policy.delays()
    while True:
        timeout = min(REQUEST_TIMEOUT_S, max(deadline - clock(), 1.0))
        try:
            if record is None:
                record = client.register(info.node_rank, addr, port, timeout=timeout)
                _check_size(record, info)
                if not record.ready:
                    _say(err, f"{me} waiting for nodes {_ranks(record.missing)} (run {record.run_id})")
            else:
                record = client.read(timeout=timeout)
                _check_size(record, info)
            if record.ready:
                break
        except HttpCallError as e:
            if not policy.retries(e.status):
                raise stop_error(e) from None
            if last_error is None:
                _say(err, f"{me}: {e}; trying again for up to {env.timeout_s:g} s")
            last_error = str(e)
        remaining = deadline - clock()
        if remaining <= 0:
            raise _timed_out(client.url, record, env.timeout_s, last_error)
        sleep(min(next(delays), remaining))
    nodes = _complete(record)
    _say(err, f"run {record.run_id} ready on {record.num_nodes} nodes: " + ", ".join(_show(n) for n in nodes))
    return dataclasses.replace(
        info,
        chief_addr=nodes[0].addr,
        chief_port=nodes[0].port,
        node_addrs=tuple(n.addr for n in nodes),
        run_id=info.run_id or record.run_id,
    )


def resolve_peers(
    info: LaunchInfo,
    environ: Mapping[str, str] | None = None,
    *,
    err: IO[str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    transport: Transport | None = None,
) -> LaunchInfo:
    """``info`` with its peers known: as it is on one node or in a static setup (``STRATUS_CHIEF_ADDR``
    given), otherwise after the rendezvous."""
    if info.peers_known:
        return info
    return rendezvous(info, environ, err=err, clock=clock, sleep=sleep, transport=transport)


def _check_size(record: Record, info: LaunchInfo) -> None:
    if record.num_nodes != info.num_nodes:
        raise RendezvousError(
            f"run {record.run_id} has {record.num_nodes} nodes at the control plane but this launcher was "
            f"told STRATUS_NUM_NODES={info.num_nodes}."
        )


def _complete(record: Record) -> tuple[Node, ...]:
    nodes = tuple(sorted(record.nodes, key=lambda n: n.node_rank))
    if [n.node_rank for n in nodes] != list(range(record.num_nodes)) or not all(n.addr for n in nodes):
        raise RendezvousError(
            f"run {record.run_id}'s rendezvous says ready but does not list nodes 0..{record.num_nodes - 1} "
            f"once each with an address: {[dataclasses.asdict(n) for n in nodes]}"
        )
    port = nodes[0].port
    if port is None or not 0 < port < 65536:
        raise RendezvousError(f"run {record.run_id}'s chief registered no usable port ({port!r}).")
    return nodes


def _timed_out(url: str, record: Record | None, timeout_s: float, last_error: str | None) -> RendezvousError:
    why = f" (last error: {last_error})" if last_error else ""
    if record is None:
        return RendezvousError(f"could not register at the rendezvous {url} within {timeout_s:g} s{why}.")
    return RendezvousError(
        f"rendezvous of run {record.run_id} timed out after {timeout_s:g} s: nodes {_ranks(record.missing)} "
        f"of {record.num_nodes} never registered{why}; STRATUS_RENDEZVOUS_TIMEOUT_S sets the wait."
    )


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks) or "none"


def _show(node: Node) -> str:
    return f"{node.node_rank}={node.addr}" + (f":{node.port}" if node.port is not None else "")


def _say(err: IO[str] | None, message: str) -> None:
    print(f"[launcher] rendezvous: {message}", file=sys.stderr if err is None else err, flush=True)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value
