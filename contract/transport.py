"""How one HTTP request reaches a server: the real network (`PooledTransport`, which keeps connections
open between calls, and `UrllibTransport`, a connection per request and the environment's proxies), or a
handler that answers in memory (`InMemoryTransport`, the test double, as httpx's ``MockTransport``).
Standard library only.

A transport sends one `Request` and returns its `Response` whatever the status, or raises
`NoAnswerError` when no answer came. Retrying, tokens and error bodies are `stratus.contract.http.Session`'s.
"""

from __future__ import annotations

import functools
import http.client
import json as _json
import socket
import threading
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from stratus.contract.errors import NoAnswerError

CHUNK_BYTES = 1 << 20


def redact(url: str) -> str:
    """``url`` without its query string: presigned signatures do not belong in messages or logs."""
    return url.split("?", 1)[0]


@dataclass
class Request:
    """One request; header names are lower case. ``body`` may be an iterable of chunks (a file streamed
    with its ``content-length`` given), read once by the transport."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | Iterable[bytes] | None = None

    @property
    def what(self) -> str:
        """The request as messages and logs show it: "METHOD URL", without the query string."""
        return f"{self.method} {redact(self.url)}"

    @property
    def content(self) -> bytes:
        """The whole body (a streamed one is read now, and kept)."""
        if self.body is None:
            return b""
        if not isinstance(self.body, bytes):
            self.body = b"".join(self.body)
        return self.body

    def json(self) -> Any:
        """The body decoded as JSON; None if there is none."""
        return _json.loads(self.content) if self.content else None

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def path(self) -> str:
        return urlsplit(self.url).path

    @property
    def params(self) -> dict[str, str]:
        return dict(parse_qsl(urlsplit(self.url).query))


class BodyStream(Protocol):
    """An answer's body as it arrives (http.client's and urllib's answers are ones)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


_UNSET: Any = object()


class Response:
    """An answer: ``status``, ``headers`` (names in lower case) and a body read at once (``content``,
    ``text``, ``json()``) or in chunks (``iter_bytes``). Close it, or use it as a context manager."""

    def __init__(
        self,
        status: int,
        *,
        json: Any = _UNSET,
        content: bytes | None = None,
        text: str | None = None,
        headers: Mapping[str, str] | None = None,
        reason: str = "",
        stream: BodyStream | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        self._stream = stream
        self._content: bytes | None = None
        if json is not _UNSET:
            self._content = _json.dumps(json).encode()
            self.headers.setdefault("content-type", "application/json")
        elif text is not None:
            self._content = text.encode()
        elif content is not None or stream is None:
            self._content = content or b""
        self.what = ""  # set by the transport: the request, for messages about a broken body

    def iter_bytes(self, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The body in chunks of at most ``chunk_bytes``, read as it arrives."""
        if self._content is not None:
            for start in range(0, len(self._content), chunk_bytes):
                yield self._content[start : start + chunk_bytes]
            return
        assert self._stream is not None
        while True:
            try:
                chunk = self._stream.read(chunk_bytes)
            except (OSError, http.client.HTTPException) as e:  # reset or timed out in the middle
                raise NoAnswerError(self.what, f"the answer broke off: {type(e).__name__}: {e}") from e
            if not chunk:
                return
            yield chunk

    @property
    def content(self) -> bytes:
        if self._content is None:
            self._content = b"".join(self.iter_bytes())
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body decoded as JSON (ValueError if it is not JSON)."""
        return _json.loads(self.content)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport(Protocol):
    def send(self, request: Request, *, timeout_s: float) -> Response: ...

    def close(self) -> None: ...


class UrllibTransport:
    """The network, through `urllib.request`: a connection per request, redirects of a GET followed, the
    environment's proxies honoured. Thread-safe."""

    def __init__(self) -> None:
        self._opener = urllib.request.build_opener()

    def send(self, request: Request, *, timeout_s: float) -> Response:
        data = request.body
        if data is not None and not isinstance(data, bytes):
            data = iter(data)  # urllib sends an iterator chunk by chunk, after our content-length
        wire = urllib.request.Request(request.url, data=data, headers=request.headers, method=request.method)
        try:
            answer = self._opener.open(wire, timeout=timeout_s)
        except urllib.error.HTTPError as e:  # any status urllib does not take as success: still an answer
            # The error itself is the stream: its file closes once the error is collected.
            response = Response(e.code, headers=dict(e.headers or {}), reason=str(e.reason), stream=e)
        except urllib.error.URLError as e:
            raise NoAnswerError(request.what, str(e.reason)) from e
        except (OSError, http.client.HTTPException) as e:  # reset, timed out, a half answer
            raise NoAnswerError(request.what, f"{type(e).__name__}: {e}") from e
        else:
            response = Response(
                answer.status, headers=dict(answer.headers), reason=answer.reason, stream=answer
            )
        response.what = request.what
        return response

    def close(self) -> None:
        pass


class PooledTransport:
    """The network through `http.client`, keeping each connection open for the next request to the same
    origin (scheme, host, port): a trial reports metrics every few batches, and a new TCP and TLS
    handshake for each report (tens of ms through API Gateway) would be paid by the training loop.
    Requests through a proxy (the environment's ``*_proxy`` variables) go through `UrllibTransport`.

    A kept connection the server has meanwhile closed fails on first use; the request is then sent once
    more on a new connection, unless its body is a stream that cannot be replayed (such a request always
    gets a new connection). A connection goes back to the pool only once its answer has been read to the
    end and the server keeps it open. Thread-safe: a connection serves one request at a time."""

    def __init__(self, *, max_idle_per_origin: int = 4) -> None:
        self._idle: defaultdict[tuple[str, str, int], list[http.client.HTTPConnection]] = defaultdict(list)
        self._max_idle = max_idle_per_origin
        self._lock = threading.Lock()
        self._proxied = UrllibTransport()
        self._proxies = urllib.request.getproxies()

    def send(self, request: Request, *, timeout_s: float) -> Response:
        parts = urlsplit(request.url)
        host = parts.hostname or ""
        if parts.scheme not in ("http", "https") or self._through_proxy(parts.scheme, host):
            return self._proxied.send(request, timeout_s=timeout_s)
        origin = (parts.scheme, host, parts.port or (443 if parts.scheme == "https" else 80))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        replayable = request.body is None or isinstance(request.body, bytes)
        while True:
            connection, reused = self._take(origin, timeout_s, reuse=replayable)
            try:
                answer = self._exchange(connection, request, target)
            except (OSError, http.client.HTTPException) as e:
                connection.close()
                if reused:
                    continue  # the server closed it while it was idle: once more, on a new connection
                raise NoAnswerError(request.what, f"{type(e).__name__}: {e}") from e
            response = Response(
                answer.status,
                headers=dict(answer.getheaders()),
                reason=answer.reason,
                stream=_Returned(answer, connection, functools.partial(self._give_back, origin, connection)),
            )
            response.what = request.what
            return response

    def close(self) -> None:
        with self._lock:
            idle = [c for connections in self._idle.values() for c in connections]
            self._idle.clear()
        for connection in idle:
            connection.close()

    def _through_proxy(self, scheme: str, host: str) -> bool:
        return scheme in self._proxies and not urllib.request.proxy_bypass(host)

    def _take(
        self, origin: tuple[str, str, int], timeout_s: float, *, reuse: bool
    ) -> tuple[http.client.HTTPConnection, bool]:
        if reuse:
            with self._lock:
                if self._idle[origin]:
                    connection = self._idle[origin].pop()
                    connection.timeout = timeout_s
                    if connection.sock is not None:
                        connection.sock.settimeout(timeout_s)
                    return connection, True
        scheme, host, port = origin
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=timeout_s), False
        return http.client.HTTPConnection(host, port, timeout=timeout_s), False

    def _give_back(self, origin: tuple[str, str, int], connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle[origin]) < self._max_idle:
                self._idle[origin].append(connection)
                return
        connection.close()

    @staticmethod
    def _exchange(
        connection: http.client.HTTPConnection, request: Request, target: str
    ) -> http.client.HTTPResponse:
        if connection.sock is None:
            connection.connect()
            _send_at_once(connection)
        connection.putrequest(request.method, target, skip_accept_encoding=True)
        headers = dict(request.headers)
        if isinstance(request.body, bytes) or (request.body is None and request.method in ("POST", "PUT")):
            headers["content-length"] = str(len(request.body or b""))
        for name, value in headers.items():
            connection.putheader(name, value)
        if isinstance(request.body, bytes):
            connection.endheaders(request.body)  # the headers and a small body in one send
        else:
            connection.endheaders()
            for chunk in request.body or ():
                connection.send(chunk)
        return connection.getresponse()


def _send_at_once(connection: http.client.HTTPConnection) -> None:
    """Small requests go out as one segment, now: with Nagle's algorithm on, a request written in two
    sends waits for the server's delayed ACK (40 ms on Linux) before its second part."""
    connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Returned:
    """An answer's body; closing it gives its connection back to the pool when the body was read to the
    end and the server keeps the connection, and closes the connection otherwise."""

    def __init__(
        self,
        answer: http.client.HTTPResponse,
        connection: http.client.HTTPConnection,
        give_back: Callable[[], None],
    ) -> None:
        self._answer = answer
        self._connection = connection
        self._give_back: Callable[[], None] | None = give_back

    def read(self, size: int = -1) -> bytes:
        return self._answer.read(size)

    def close(self) -> None:
        if self._give_back is None:
            return
        give_back, self._give_back = self._give_back, None
        if self._answer.isclosed() and not self._answer.will_close:
            give_back()
        else:
            self._answer.close()
            self._connection.close()


class InMemoryTransport:
    """Answers every request with ``handler(request)``, in memory; the handler may raise `NoAnswerError`
    to play a network failure. Every request is kept, body read, in ``requests`` (in arrival order)."""

    def __init__(self, handler: Callable[[Request], Response]) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self._lock = threading.Lock()

    def send(self, request: Request, *, timeout_s: float) -> Response:
        request.content  # noqa: B018  (read a streamed body, as a server would)
        with self._lock:
            self.requests.append(request)
        response = self.handler(request)
        response.what = request.what
        return response

    def close(self) -> None:
        pass
