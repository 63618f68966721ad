"""The compute side's one HTTP session (stratus.contract.http): the retry policy, the error parser, presigned
transfers; in memory (InMemoryTransport, a fake clock). The real transport against a loopback server is
tested in tests/integration/test_contract_http_network.py."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from stratus.contract.errors import NO_ANSWER, HttpCallError, NoAnswerError
from stratus.contract.http import InMemoryTransport, Request, Response, RetryPolicy, Session

API = "https://api.test/v1"
SIGNED = "https://s3.test/bucket/key.bin?X-Amz-Signature=s3cr3t"


class FakeTime:
    """A clock that only moves when someone waits."""

    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return False


def failing(*statuses: int, then: Any = "ok") -> Any:
    """An attempt that fails with each status in turn (0: no answer), then returns ``then``."""
    left = list(statuses)

    def attempt() -> Any:
        if left:
            status = left.pop(0)
            if status == NO_ANSWER:
                raise NoAnswerError("GET x", "refused")
            raise HttpCallError("GET x", status)
        return then

    return attempt


# ---- the retry policy ----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [NO_ANSWER, 500, 502, 503, 504, 408, 425, 429])
def test_transient_failures_are_retried(status: int) -> None:
    assert RetryPolicy.retries(status)


@pytest.mark.parametrize("status", [200, 301, 400, 401, 403, 404, 409, 413, 422])
def test_permanent_refusals_are_not(status: int) -> None:
    assert not RetryPolicy.retries(status)


def test_delays_grow_to_their_cap() -> None:
    delays = RetryPolicy(first_delay_s=0.25, growth=2.0, max_delay_s=1.0).delays()
    assert [next(delays) for _ in range(5)] == [0.25, 0.5, 1.0, 1.0, 1.0]


def test_a_call_is_retried_until_it_succeeds() -> None:
    time = FakeTime()
    result = RetryPolicy(first_delay_s=0.1, max_attempts=4).call(
        failing(0, 503, 429), wait=time.wait, clock=time.clock
    )
    assert result == "ok" and time.waits == [0.1, 0.2, 0.4]


def test_the_last_failure_is_raised_when_the_attempts_are_spent() -> None:
    time = FakeTime()
    with pytest.raises(HttpCallError) as raised:
        RetryPolicy(first_delay_s=0.1, max_attempts=2).call(
            failing(503, 502), wait=time.wait, clock=time.clock
        )
    assert raised.value.status == 502 and time.waits == [0.1]


def test_a_permanent_refusal_or_a_foreign_error_is_raised_at_once() -> None:
    time = FakeTime()
    with pytest.raises(HttpCallError) as raised:
        RetryPolicy().call(failing(409), wait=time.wait, clock=time.clock)
    assert raised.value.status == 409

    def broken() -> None:
        raise KeyError("not an HTTP failure")

    with pytest.raises(KeyError):
        RetryPolicy().call(broken, wait=time.wait, clock=time.clock)
    assert time.waits == []


def test_the_deadline_shortens_the_last_wait_then_stops() -> None:
    time = FakeTime()
    policy = RetryPolicy(first_delay_s=1.0, growth=2.0, max_delay_s=8.0, max_attempts=None, deadline_s=5.0)
    with pytest.raises(HttpCallError):
        policy.call(failing(*[503] * 100), wait=time.wait, clock=time.clock)
    assert time.waits == [1.0, 2.0, 2.0] and sum(time.waits) == 5.0


def test_stop_and_a_woken_wait_give_up() -> None:
    unlimited = RetryPolicy(first_delay_s=0.1, max_attempts=None)
    calls: list[int] = []
    with pytest.raises(HttpCallError):
        unlimited.call(
            failing(*[503] * 100), wait=lambda s: False, stop=lambda: len(calls.append(1) or calls) > 2
        )
    assert len(calls) == 3
    give_up = threading.Event()
    give_up.set()
    with pytest.raises(NoAnswerError):
        unlimited.call(failing(0, 0, 0), wait=give_up.wait)


def test_on_retry_hears_each_retry() -> None:
    heard: list[tuple[int, int, float]] = []
    RetryPolicy(first_delay_s=0.5).call(
        failing(0, 500),
        wait=lambda s: False,
        on_retry=lambda n, e, d: heard.append((n, getattr(e, "status", -1), d)),
    )
    assert heard == [(1, 0, 0.5), (2, 500, 1.0)]


# ---- JSON calls ------------------------------------------------------------------------------------


def session(handler: Any, **options: Any) -> tuple[Session, InMemoryTransport, FakeTime]:
    transport = InMemoryTransport(handler)
    time = FakeTime()
    options.setdefault("retry", RetryPolicy(first_delay_s=0.1, max_attempts=3))
    return (
        Session(API + "/", "tok", transport=transport, wait=time.wait, clock=time.clock, **options),
        transport,
        time,
    )


def test_a_call_sends_json_with_the_token_and_decodes_the_answer() -> None:
    s, transport, _ = session(lambda r: Response(200, json={"preempt": True}))
    assert s.call("POST", "/trials/7/heartbeat", {"a": [1, 2]}) == {"preempt": True}
    (request,) = transport.requests
    assert (request.method, request.url) == ("POST", f"{API}/trials/7/heartbeat")
    assert request.headers["authorization"] == "Bearer tok"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {"a": [1, 2]}


def test_an_empty_answer_is_an_empty_object_and_no_token_means_no_header() -> None:
    transport = InMemoryTransport(lambda r: Response(200))
    assert Session(API, transport=transport).call("GET", "/health") == {}
    assert "authorization" not in transport.requests[0].headers and transport.requests[0].content == b""


def test_the_error_body_is_parsed_once_for_every_client() -> None:
    body = {
        "error": "ConfigInvalid",
        "message": "bad config",
        "problems": [{"path": "a.b", "message": "≥ 1"}],
    }
    s, transport, time = session(lambda r: Response(400, json=body))
    with pytest.raises(HttpCallError) as raised:
        s.call("POST", "/experiments", {})
    e = raised.value
    assert (e.status, e.code, e.body.message) == (400, "ConfigInvalid", "bad config")
    assert e.body.problems == ({"path": "a.b", "message": "≥ 1"},)
    assert str(e) == f"POST {API}/experiments answered 400 (ConfigInvalid: bad config)"
    assert len(transport.requests) == 1 and time.waits == []


def test_a_proxy_page_is_retried_then_shown_as_text() -> None:
    s, transport, time = session(lambda r: Response(502, text="<html>Bad Gateway</html>"))
    with pytest.raises(HttpCallError, match=r"answered 502 \(<html>Bad Gateway</html>\)") as raised:
        s.call("GET", "/trials/7/info")
    assert raised.value.code == "" and len(transport.requests) == 3 and time.waits == [0.1, 0.2]


@pytest.mark.parametrize(
    ("answer", "says"), [(b"<html/>", "not JSON"), (b"[1, 2]", "JSON list, not an object")]
)
def test_an_answer_that_is_not_a_json_object_is_refused_at_once(answer: bytes, says: str) -> None:
    s, transport, _ = session(lambda r: Response(200, content=answer))
    with pytest.raises(HttpCallError, match=says) as raised:
        s.call("GET", "/trials/7/info")
    assert raised.value.status == 200 and len(transport.requests) == 1


def test_a_closed_session_gets_no_answer() -> None:
    s, transport, _ = session(lambda r: Response(200), retry=RetryPolicy().once())
    s.close()
    with pytest.raises(NoAnswerError, match="the session is closed"):
        s.call("GET", "/trials/7/info")
    assert transport.requests == []


# ---- presigned transfers ------------------------------------------------------------------------------


class StreamSpy(InMemoryTransport):
    """Notes whether each request's body came as chunks (a stream) before reading it."""

    def __init__(self, handler: Any) -> None:
        super().__init__(handler)
        self.streamed: list[bool] = []

    def send(self, request: Request, *, timeout_s: float) -> Response:
        self.streamed.append(request.body is not None and not isinstance(request.body, bytes))
        return super().send(request, timeout_s=timeout_s)


def test_put_file_streams_with_its_length_and_without_the_token(tmp_path: Path) -> None:
    source = tmp_path / "weights.bin"
    source.write_bytes(b"w" * (3 << 20))
    answers = [Response(503), Response(200)]
    spy = StreamSpy(lambda request: answers.pop(0))
    time = FakeTime()
    s = Session(API, "tok", transport=spy, wait=time.wait, clock=time.clock)
    s.put_file(SIGNED, source)
    assert spy.streamed == [True, True] and time.waits == [0.25]  # a 503 is retried, the file read again
    for request in spy.requests:
        assert request.content == source.read_bytes()
        assert request.headers["content-length"] == str(3 << 20)
        assert "authorization" not in request.headers  # S3 refuses two signatures


def test_download_streams_into_the_file_and_can_be_stopped(tmp_path: Path) -> None:
    data = bytes(range(256)) * 8192  # 2 MiB: two chunks
    s, transport, _ = session(lambda r: Response(200, content=data))
    dest = tmp_path / "out.bin"
    chunks: list[int] = []
    assert s.download(SIGNED, dest, on_chunk=chunks.append) == len(data)
    assert dest.read_bytes() == data and chunks == [1 << 20, 1 << 20]
    assert "authorization" not in transport.requests[0].headers

    def stop(_: int) -> None:
        raise InterruptedError("killed")

    with pytest.raises(InterruptedError):
        s.download(SIGNED, dest, on_chunk=stop)


def test_signatures_never_reach_messages_or_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s, _, _ = session(lambda r: Response(503, text="<Error><Code>SlowDown</Code></Error>"))
    with (
        caplog.at_level(logging.WARNING, logger="stratus.contract.http"),
        pytest.raises(HttpCallError) as raised,
    ):
        s.download(SIGNED, tmp_path / "x")
    assert "s3cr3t" not in str(raised.value) and "s3cr3t" not in caplog.text
    assert "GET https://s3.test/bucket/key.bin answered 503" in caplog.text
