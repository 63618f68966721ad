"""The agent's doorbell listener (`stratus.harness.agent._bell`) against a mock SQS: a ring wakes the heartbeat
loop, an empty poll does not, a refused or expiring URL is dropped until the next heartbeat brings one."""

from __future__ import annotations

import threading

from stratus.contract.http import InMemoryTransport, Request, Response
from stratus.harness.agent._bell import EXPIRY_MARGIN_S, BellListener

WAIT_S = 10.0
RING = "<ReceiveMessageResponse><ReceiveMessageResult><Message><ReceiptHandle>r</ReceiptHandle></Message></ReceiveMessageResult></ReceiveMessageResponse>"
EMPTY = "<ReceiveMessageResponse><ReceiveMessageResult/></ReceiveMessageResponse>"


class Sqs:
    """Answers each poll with the next of `answers`, then holds polls until closed (a long poll)."""

    def __init__(self, answers: list[Response]) -> None:
        self.answers = answers
        self.urls: list[str] = []
        self.drained = threading.Event()
        self.closed = threading.Event()

    def __call__(self, request: Request) -> Response:
        self.urls.append(request.url)
        if self.answers:
            return self.answers.pop(0)
        self.drained.set()
        self.closed.wait(WAIT_S)
        return Response(200, text=EMPTY)


def _listener(sqs: Sqs, wakes: list[int], now: float = 1_000.0) -> BellListener:
    return BellListener(lambda: wakes.append(1), transport=InMemoryTransport(sqs), clock=lambda: now)


def test_a_ring_wakes_the_loop_and_an_empty_poll_does_not() -> None:
    sqs = Sqs([Response(200, text=EMPTY), Response(200, text=RING)])
    wakes: list[int] = []
    listener = _listener(sqs, wakes)
    listener.update({"url": "https://sqs.test/q?sig=1", "expires_at": 5_000, "wait_s": 20})
    assert sqs.drained.wait(WAIT_S)
    assert wakes == [1] and listener.rings == 1 and sqs.urls[:2] == ["https://sqs.test/q?sig=1"] * 2
    sqs.closed.set()
    listener.close()


def test_without_a_bell_nothing_is_polled() -> None:
    sqs = Sqs([])
    listener = _listener(sqs, [])
    listener.update(None)
    listener.close()
    assert sqs.urls == []


def test_a_refused_url_is_dropped_until_a_new_one_comes() -> None:
    refused, woke = threading.Event(), threading.Event()
    paths: list[str] = []

    def sqs(request: Request) -> Response:
        path = request.url.split("?")[0].removeprefix("https://sqs.test")
        paths.append(path)
        if path == "/old":
            refused.set()
            return Response(403, text="<Error><Code>AccessDenied</Code></Error>")
        return Response(200, text=RING)

    listener = BellListener(woke.set, transport=InMemoryTransport(sqs), clock=lambda: 1_000.0)
    listener.update({"url": "https://sqs.test/old", "expires_at": 5_000, "wait_s": 20})
    assert refused.wait(WAIT_S)
    listener.update({"url": "https://sqs.test/new", "expires_at": 5_000, "wait_s": 20})
    assert woke.wait(WAIT_S)
    listener.close()
    assert paths.count("/old") == 1  # refused once, then left alone: no tight loop of refusals


def test_a_url_about_to_expire_is_not_used() -> None:
    sqs = Sqs([])
    listener = _listener(sqs, [], now=1_000.0)
    listener.update({"url": "https://sqs.test/q", "expires_at": 1_000 + EXPIRY_MARGIN_S - 1, "wait_s": 20})
    listener.close()
    assert sqs.urls == []
