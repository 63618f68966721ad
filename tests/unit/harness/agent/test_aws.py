"""The agent's AWS mode without IO: the IMDSv2 client (`stratus.harness.agent._aws`) against the fake metadata
service (`infra.local.fake_imds`) answering through an in-memory transport, the spot watcher's notices, and
``--aws`` on the command line. The agent draining with real runs, and a real agent process against the
fake service over loopback, are in tests/integration/test_agent_spot.py."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from infra.local.fake_imds import FakeImds
from stratus.contract.errors import NoAnswerError
from stratus.contract.http import InMemoryTransport, Request, Response
from stratus.harness.agent._aws import (
    TOKEN_HEADER,
    TTL_HEADER,
    ImdsClient,
    ImdsError,
    Instance,
    InstanceAction,
    SpotWatcher,
)
from stratus.harness.agent._settings import parse_cli

WAIT_S = 10.0  # a guard against hangs, not a timing assertion
NOW = datetime(2026, 11, 26, 4, 58, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


def _client(fake: FakeImds, **kw: Any) -> tuple[ImdsClient, InMemoryTransport]:
    """A client of instance i-0abc of ``fake``, answered in memory; the transport keeps its requests."""
    transport = InMemoryTransport(fake.handle)
    return ImdsClient("http://imds/i-0abc", transport=transport, **kw), transport


def _puts(fake: FakeImds) -> int:
    return fake.counts[("i-0abc", "PUT latest/api/token", 200)]


# ---- the fake service ----------------------------------------------------------------------------------


def test_the_fake_service_wants_a_ttl_for_a_token_and_a_live_token_for_a_get() -> None:
    clock = Clock()
    fake = FakeImds(clock=clock)
    fake.add("i-0abc", life_cycle="on-demand")
    fake.add("i-0def")
    put = "/i-0abc/latest/api/token"
    assert fake.answer("PUT", put, {}) == (400, "Bad Request")
    assert fake.answer("PUT", put, {TTL_HEADER: "0"})[0] == 400
    assert fake.answer("PUT", put, {TTL_HEADER: "21601"})[0] == 400
    assert fake.answer("GET", put, {TTL_HEADER: "60"})[0] == 405
    status, token = fake.answer("PUT", put, {TTL_HEADER: "60"})
    assert status == 200 and token

    meta = "/i-0abc/latest/meta-data/"
    assert fake.answer("GET", meta + "instance-id", {}) == (401, "Unauthorized")
    assert fake.answer("GET", meta + "instance-id", {TOKEN_HEADER: "guessed"})[0] == 401
    assert fake.answer("GET", "/i-0def/latest/meta-data/instance-id", {TOKEN_HEADER: token})[0] == 401
    ok = {TOKEN_HEADER: token}
    assert fake.answer("GET", meta + "instance-id", ok) == (200, "i-0abc")
    assert fake.answer("GET", meta + "local-ipv4", ok) == (200, "127.0.0.1")
    assert fake.answer("GET", meta + "instance-life-cycle", ok) == (200, "on-demand")
    assert fake.answer("GET", meta + "placement/availability-zone", ok) == (200, "us-east-1a")
    assert fake.answer("GET", meta + "spot/instance-action", ok)[0] == 404
    assert fake.answer("GET", meta + "no-such-thing", ok)[0] == 404
    assert fake.answer("GET", "/i-0zzz/latest/meta-data/instance-id", ok)[0] == 404

    clock.t += 60  # the token's TTL is over
    assert fake.answer("GET", meta + "instance-id", ok)[0] == 401


def test_the_fake_service_plans_and_forgets_interruptions() -> None:
    fake = FakeImds()
    fake.add("i-0abc")
    _, token = fake.answer("PUT", "/i-0abc/latest/api/token", {TTL_HEADER: "60"})
    action = "/i-0abc/latest/meta-data/spot/instance-action"
    fake.interrupt("i-0abc", at=datetime(2026, 11, 26, 6, 0, tzinfo=UTC) + timedelta(hours=-1), action="stop")
    assert fake.answer("GET", action, {TOKEN_HEADER: token}) == (
        200,
        '{"action": "stop", "time": "2026-11-26T05:00:00Z"}',
    )
    with pytest.raises(ValueError, match="no time zone"):
        fake.interrupt("i-0abc", at=datetime(2026, 11, 26, 5, 0))
    with pytest.raises(KeyError, match="add\\(\\) it first"):
        fake.interrupt("i-0zzz", at=NOW)
    fake.remove("i-0abc")
    assert fake.answer("GET", action, {TOKEN_HEADER: token})[0] == 404


# ---- the client ----------------------------------------------------------------------------------------


def test_the_client_reads_the_instance_with_one_token() -> None:
    fake = FakeImds()
    fake.add("i-0abc", life_cycle="spot")
    client, transport = _client(fake)
    assert client.instance() == Instance("i-0abc", "127.0.0.1", "spot")
    first, *gets = transport.requests
    assert (first.method, first.path, first.headers) == (
        "PUT",
        "/i-0abc/latest/api/token",
        {TTL_HEADER: "21600"},
    )
    assert [r.path for r in gets] == [
        "/i-0abc/latest/meta-data/instance-id",
        "/i-0abc/latest/meta-data/local-ipv4",
        "/i-0abc/latest/meta-data/instance-life-cycle",
        "/i-0abc/latest/meta-data/instance-type",  # what its runs' time is priced by ("" where none)
    ]
    assert all(r.method == "GET" and r.headers[TOKEN_HEADER] for r in gets)
    assert len({r.headers[TOKEN_HEADER] for r in gets}) == 1
    assert client.instance_action() is None
    fake.add("i-0def", life_cycle="on-demand", instance_type="g5.xlarge")
    typed = ImdsClient("http://imds/i-0def", transport=InMemoryTransport(fake.handle))
    assert typed.instance() == Instance("i-0def", "127.0.0.1", "on-demand", "g5.xlarge")


def test_the_token_is_taken_again_before_its_ttl_ends() -> None:
    clock = Clock()
    fake = FakeImds(clock=clock)
    fake.add("i-0abc")
    client, _ = _client(fake, token_ttl_s=10, clock=clock)
    assert client.get("meta-data/instance-id") == "i-0abc"
    clock.t += 4.9
    assert client.get("meta-data/instance-id") == "i-0abc"
    assert _puts(fake) == 1
    clock.t += 0.1  # 5 s before the end (half the TTL, for a TTL this short): renewed
    assert client.get("meta-data/instance-id") == "i-0abc"
    assert _puts(fake) == 2
    clock.t += 9.9  # still inside the new token's life: the service never answers 401
    assert client.get("meta-data/instance-id") == "i-0abc"
    assert fake.counts[("i-0abc", "GET latest/meta-data/instance-id", 401)] == 0


def test_a_forgotten_token_is_taken_again_once() -> None:
    fake = FakeImds()
    fake.add("i-0abc")
    client, _ = _client(fake)
    assert client.get("meta-data/instance-id") == "i-0abc"
    fake.revoke_tokens("i-0abc")
    assert client.get("meta-data/instance-id") == "i-0abc"
    assert fake.counts[("i-0abc", "GET latest/meta-data/instance-id", 401)] == 1
    assert _puts(fake) == 2

    def always_401(request: Request) -> Response:
        return fake.handle(request) if request.method == "PUT" else Response(401, text="Unauthorized")

    stubborn = ImdsClient("http://imds/i-0abc", transport=InMemoryTransport(always_401))
    with pytest.raises(ImdsError, match="answered HTTP 401") as caught:
        stubborn.get("meta-data/instance-id")
    assert caught.value.status == 401


def test_a_token_request_without_its_ttl_is_refused() -> None:
    fake = FakeImds()
    fake.add("i-0abc")

    def strip_ttl(request: Request) -> Response:  # a proxy that drops the header
        request.headers.pop(TTL_HEADER, None)
        return fake.handle(request)

    client = ImdsClient("http://imds/i-0abc", transport=InMemoryTransport(strip_ttl))
    with pytest.raises(ImdsError, match="HTTP 400: no IMDSv2 token") as caught:
        client.get("meta-data/instance-id")
    assert caught.value.status == 400
    with pytest.raises(ValueError, match="outside IMDS's 1 to 21600 s"):
        ImdsClient(token_ttl_s=0)


def test_reading_the_instance_is_retried_when_no_answer_comes() -> None:
    fake = FakeImds()
    fake.add("i-0abc")
    attempts: list[str] = []
    waits: list[float] = []

    def flaky(request: Request) -> Response:
        attempts.append(request.method)
        if len(attempts) == 1:
            raise NoAnswerError(request.what, "timed out")
        return fake.handle(request)

    client = ImdsClient("http://imds/i-0abc", transport=InMemoryTransport(flaky), wait=waits.append)
    assert client.instance().instance_id == "i-0abc"
    assert waits == [1.0]

    def down(request: Request) -> Response:
        raise NoAnswerError(request.what, "timed out")

    waits.clear()
    gone = ImdsClient("http://169.254.169.254", transport=InMemoryTransport(down), wait=waits.append)
    with pytest.raises(ImdsError, match="PUT http://169.254.169.254/latest/api/token: no answer") as caught:
        gone.instance()
    assert caught.value.status == 0 and waits == [1.0, 1.0]


def test_instance_actions_parse() -> None:
    parsed = InstanceAction.parse('{"action": "terminate", "time": "2026-11-26T05:00:00Z"}')
    assert parsed == InstanceAction("terminate", datetime(2026, 11, 26, 5, 0, tzinfo=UTC))
    for bad in (
        "none",
        '{"action": "terminate"}',
        '{"action": 1, "time": "x"}',
        '{"action": "stop", "time": "soon"}',
    ):
        with pytest.raises(ValueError, match="not an instance action"):
            InstanceAction.parse(bad)


# ---- the spot watcher ----------------------------------------------------------------------------------


def test_the_watcher_hands_on_each_new_notice_with_its_deadline() -> None:
    clock = Clock()
    fake = FakeImds(clock=clock)
    fake.add("i-0abc")
    client, _ = _client(fake, clock=clock)
    notices: list[tuple[float, str]] = []
    watcher = SpotWatcher(client, lambda d, r: notices.append((d, r)), now=lambda: NOW, clock=clock)

    assert watcher.poll_once() is None and notices == []
    fake.interrupt("i-0abc", at=NOW + timedelta(seconds=120))
    assert watcher.poll_once() == InstanceAction("terminate", NOW + timedelta(seconds=120))
    assert notices == [
        (1_120.0, "spot interruption: the instance is to terminate at 2026-11-26T05:00:00+00:00")
    ]
    watcher.poll_once()
    assert len(notices) == 1  # the same notice again: nothing new
    fake.interrupt("i-0abc", at=NOW - timedelta(seconds=5), action="stop")  # late: its time is past
    watcher.poll_once()
    assert notices[1][0] == 1_000.0 and "to stop at" in notices[1][1]


def test_the_watcher_keeps_polling_through_failures() -> None:
    fake = FakeImds()
    fake.add("i-0abc")
    broken = {"on": True}

    def flaky(request: Request) -> Response:
        if broken["on"]:
            raise NoAnswerError(request.what, "connection refused")
        return fake.handle(request)

    client = ImdsClient("http://imds/i-0abc", transport=InMemoryTransport(flaky))
    notices: list[tuple[float, str]] = []
    watcher = SpotWatcher(client, lambda d, r: notices.append((d, r)), now=lambda: NOW)
    assert watcher.poll_once() is None
    broken["on"] = False
    fake.interrupt("i-0abc", at=NOW + timedelta(seconds=30))
    assert watcher.poll_once() is not None and len(notices) == 1


def test_the_watcher_thread_polls_until_stopped() -> None:
    fake = FakeImds()
    fake.add("i-0abc")
    client, _ = _client(fake)
    heard = threading.Event()
    watcher = SpotWatcher(client, lambda d, r: heard.set(), interval=0.01)
    watcher.start()
    try:
        fake.interrupt("i-0abc", at=datetime.now(UTC) + timedelta(seconds=120))
        assert heard.wait(WAIT_S)
    finally:
        watcher.stop()
    with pytest.raises(ValueError, match="must be > 0"):
        SpotWatcher(client, lambda d, r: None, interval=0)


# ---- --aws on the command line -------------------------------------------------------------------------


def test_aws_takes_the_agent_id_and_address_from_the_instance(tmp_path: Path) -> None:
    fake = FakeImds()
    fake.add("i-0abc", life_cycle="spot")
    urls: list[str] = []

    def imds(url: str) -> ImdsClient:
        urls.append(url)
        return ImdsClient("http://imds/i-0abc", transport=InMemoryTransport(fake.handle))

    argv = ["--api", "http://x", "--pool", "p", "--work-dir", str(tmp_path), "--aws"]
    opts = parse_cli(argv, {"CUDA_VISIBLE_DEVICES": ""}, imds=imds)
    s = opts.settings
    assert (s.agent_id, s.address, s.aws, s.imds_url, s.spot_poll_interval) == (
        "i-0abc",
        "127.0.0.1",
        True,
        "http://169.254.169.254",
        5.0,
    )
    assert opts.instance == Instance("i-0abc", "127.0.0.1", "spot") and urls == ["http://169.254.169.254"]

    given = parse_cli(
        [
            *argv,
            "--agent-id",
            "a-1",
            "--address",
            "10.0.0.9",
            "--imds-url",
            "http://f/i-0abc/",
            "--spot-poll-interval",
            "1",
        ],
        {"CUDA_VISIBLE_DEVICES": ""},
        imds=imds,
    ).settings
    assert (given.agent_id, given.address, given.imds_url, given.spot_poll_interval) == (
        "a-1",
        "10.0.0.9",
        "http://f/i-0abc",
        1.0,
    )
    plain = parse_cli(
        ["--api", "http://x", "--agent-id", "a", "--pool", "p", "--work-dir", str(tmp_path)], {}
    )
    assert (plain.settings.aws, plain.instance) == (False, None)


def test_agent_id_is_required_without_aws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_cli(["--api", "http://x", "--pool", "p", "--work-dir", str(tmp_path)], {})
    assert "--agent-id (or --aws on EC2" in capsys.readouterr().err


def test_aws_off_ec2_is_one_clear_error(tmp_path: Path) -> None:
    def down(request: Request) -> Response:
        raise NoAnswerError(request.what, "timed out")

    def imds(url: str) -> ImdsClient:
        return ImdsClient(url, transport=InMemoryTransport(down), wait=lambda s: None)

    token_file = tmp_path / "credential"
    token_file.write_text("agent.x\n")
    argv = [
        "--api",
        "http://x",
        "--pool",
        "p",
        "--work-dir",
        str(tmp_path),
        "--aws",
        "--token-file",
        str(token_file),
    ]
    with pytest.raises(SystemExit) as caught:
        parse_cli(argv, {}, imds=imds)
    message = str(caught.value)
    assert "at http://169.254.169.254 " in message and "no answer (timed out)" in message
    assert "--aws needs to run on an EC2 instance (or --imds-url" in message
    assert not token_file.exists()  # the credential is not left behind
