"""The compute side's HTTP session over the real network (contract.http.UrllibTransport) against a
loopback `http.server`: a streamed PUT with its length, error bodies, no answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from contract.errors import NO_ANSWER, HttpCallError, NoAnswerError
from contract.http import RetryPolicy, Session, UrllibTransport


class LocalServer:
    """A threaded http.server that records each request and answers 409 to /refuse."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
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


@pytest.fixture
def server() -> Iterator[LocalServer]:
    s = LocalServer()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def test_the_real_transport_streams_a_put_with_its_length(server: LocalServer, tmp_path: Path) -> None:
    source = tmp_path / "ckpt.bin"
    source.write_bytes(b"x" * ((1 << 20) + 17))
    Session(server.url, "tok", transport=UrllibTransport()).put_file(f"{server.url}/b/ckpt.bin?sig=1", source)
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
