"""The compute side's HTTP session over the real network (stratus.contract.http's PooledTransport, the default,
and UrllibTransport) against a loopback `http.server`: a streamed PUT with its length, error bodies, no
answer, and connections kept open between calls."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from stratus.contract.errors import NO_ANSWER, HttpCallError, NoAnswerError
from stratus.contract.http import PooledTransport, RetryPolicy, Session, Transport, UrllibTransport


class LocalServer:
    """A threaded http.server that records each request (and the connection it came on) and answers 409
    to /refuse; ``keep_alive`` makes it speak HTTP/1.1 and keep connections open."""

    def __init__(self, keep_alive: bool = False) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.connections: list[int] = []  # the client port of each request's connection
        self.open_sockets: list[Any] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def setup(self) -> None:
                super().setup()
                server.open_sockets.append(self.connection)

            def _handle(self) -> None:
                server.connections.append(self.client_address[1])
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length)
                server.seen.append(
                    (self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, data)
                )
                status, body = (
                    (409, {"error": "Conflict", "message": "run ended"})
                    if "refuse" in self.path
                    else (200, {})
                )
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_PUT = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True).start()


def _serve(keep_alive: bool) -> Iterator[LocalServer]:
    s = LocalServer(keep_alive)
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


@pytest.fixture
def server() -> Iterator[LocalServer]:
    yield from _serve(keep_alive=False)


@pytest.fixture
def kept_server() -> Iterator[LocalServer]:
    yield from _serve(keep_alive=True)


@pytest.mark.parametrize("transport", [UrllibTransport, PooledTransport])
def test_the_real_transport_streams_a_put_with_its_length(
    server: LocalServer, tmp_path: Path, transport: type[Transport]
) -> None:
    source = tmp_path / "ckpt.bin"
    source.write_bytes(b"x" * ((1 << 20) + 17))
    Session(server.url, "tok", transport=transport()).put_file(f"{server.url}/b/ckpt.bin?sig=1", source)
    ((method, path, headers, data),) = server.seen
    assert (method, path, data) == ("PUT", "/b/ckpt.bin?sig=1", source.read_bytes())
    assert headers["content-length"] == str(len(data)) and "transfer-encoding" not in headers
    assert "authorization" not in headers


def test_the_real_transport_reads_error_bodies_and_reports_no_answer(server: LocalServer) -> None:
    s = Session(server.url, "tok", retry=RetryPolicy().once())
    with pytest.raises(HttpCallError, match=r"answered 409 \(Conflict: run ended\)"):
        s.call("POST", "/refuse", {"x": 1})
    assert server.seen[0][2]["authorization"] == "Bearer tok"
    server.httpd.shutdown()
    server.httpd.server_close()
    with pytest.raises(NoAnswerError) as raised:
        s.call("GET", "/gone")
    assert raised.value.status == NO_ANSWER


def test_calls_to_one_origin_share_one_connection(kept_server: LocalServer) -> None:
    s = Session(kept_server.url, "tok", retry=RetryPolicy().once())
    for step in range(5):
        assert s.call("POST", f"/trials/1/metrics?step={step}", {"steps_completed": step}) == {}
    with pytest.raises(HttpCallError):
        s.call("POST", "/refuse", {})  # an error answer read to its end keeps the connection too
    assert len(kept_server.seen) == 6
    assert len(set(kept_server.connections)) == 1


def test_a_kept_connection_the_server_closed_is_replaced(kept_server: LocalServer) -> None:
    s = Session(kept_server.url, "tok", retry=RetryPolicy().once())
    s.call("POST", "/a", {})
    for sock in kept_server.open_sockets:  # the server drops its idle connection, as a load balancer does
        sock.shutdown(2)
    assert s.call("POST", "/b", {}) == {}  # no retry left in the policy: the transport itself reconnects
    assert [path for _, path, _, _ in kept_server.seen] == ["/a", "/b"]
    assert len(set(kept_server.connections)) == 2


def test_a_streamed_body_never_rides_a_kept_connection(kept_server: LocalServer, tmp_path: Path) -> None:
    source = tmp_path / "ckpt.bin"
    source.write_bytes(b"y" * 1000)
    s = Session(kept_server.url, "tok")
    s.call("POST", "/a", {})
    s.put_file(f"{kept_server.url}/b/ckpt.bin?sig=1", source)  # a stream cannot be sent twice
    s.call("POST", "/c", {})
    first, put, third = kept_server.connections
    assert put not in (first, third) and first == third
    assert kept_server.seen[1][3] == source.read_bytes()
