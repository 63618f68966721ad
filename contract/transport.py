"""How one HTTP request reaches a server: the real network (`UrllibTransport`, standard library only), or
a handler that answers in memory (`InMemoryTransport`, the test double, as httpx's ``MockTransport``).

A transport sends one `Request` and returns its `Response` whatever the status, or raises
`NoAnswerError` when no answer came. Retrying, tokens and error bodies are `contract.http.Session`'s.
"""

from __future__ import annotations

import http.client
import json as _json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from contract.errors import NoAnswerError

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
        stream: IO[bytes] | None = None,
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
