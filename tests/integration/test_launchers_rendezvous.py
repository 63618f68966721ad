"""The rendezvous client against a threaded `http.server` fake of the control plane's route.

Nothing waits by sleeping: polls run on small intervals (or a fake clock), and the two-node test lets
node 0 register only once the fake has seen node 1 waiting.
"""

from __future__ import annotations

import io
import ipaddress
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stratus.launchers import _rendezvous, deepspeed, horovod, torch_distributed
from stratus.launchers._argv import Script
from stratus.launchers._info import LaunchInfo, load_launch_info
from stratus.launchers._rendezvous import Record, node_address, resolve_peers
from stratus.launchers.errors import LaunchConfigError, RendezvousError
from stratus.launchers.torch_distributed import LocalLaunch

TOKEN = "run-token"
WAIT_LINE = "[launcher] rendezvous: node 1 of 2 waiting for nodes 0 (run run-7)"


class FakeControlPlane:
    """``/trials/7/rendezvous`` of one run; ``answers`` are served first, one per request."""

    def __init__(self, wait_s: float, num_nodes: int = 2, run_id: str = "run-7") -> None:
        self.wait_s = wait_s  # a guard against hangs
        self.num_nodes, self.run_id = num_nodes, run_id
        self.nodes: dict[int, dict[str, Any]] = {}
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.requests: list[tuple[str, int | None]] = []  # (method, node_rank)
        self.changed = threading.Condition()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer(None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                self._answer(json.loads(self.rfile.read(length)))

            def _answer(self, body: dict[str, Any] | None) -> None:
                status, answer = fake.handle(self.command, self.path, self.headers.get("Authorization"), body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)

    def handle(
        self, method: str, path: str, auth: str | None, body: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        with self.changed:
            self.requests.append((method, None if body is None else body["node_rank"]))
            try:
                if path != "/trials/7/rendezvous":
                    return 404, {"error": "NotFound", "message": path}
                if auth != f"Bearer {TOKEN}":
                    return 401, {"error": "Unauthorized", "message": "bad run token"}
                if self.answers:
                    return self.answers.pop(0)
                if body is not None:
                    self.nodes[body["node_rank"]] = {"addr": body["addr"], "port": body["port"]}
                return 200, self.record()
            finally:
                self.changed.notify_all()

    def record(self) -> dict[str, Any]:
        nodes = [{"node_rank": r, **entry} for r, entry in sorted(self.nodes.items())]
        return {
            "run_id": self.run_id,
            "num_nodes": self.num_nodes,
            "nodes": nodes,
            "ready": len(nodes) == self.num_nodes,
        }

    def env(self, node_rank: int, **extra: str) -> dict[str, str]:
        return {
            "STRATUS_MASTER": self.url + "/",
            "STRATUS_TRIAL_ID": "7",
            "STRATUS_RUN_TOKEN": TOKEN,
            "STRATUS_SLOTS": str(2 * self.num_nodes),
            "STRATUS_NUM_NODES": str(self.num_nodes),
            "STRATUS_NODE_RANK": str(node_rank),
            **extra,
        }

    def wait_for(self, predicate: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, timeout=self.wait_s), self.requests


@pytest.fixture
def fake(wait_s: float) -> Iterator[FakeControlPlane]:
    plane = FakeControlPlane(wait_s)
    plane.thread.start()
    yield plane
    plane.server.shutdown()
    plane.server.server_close()


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_rendezvous, "POLL_FIRST_S", 0.01)
    monkeypatch.setattr(_rendezvous, "POLL_MAX_S", 0.05)


class FakeClock:
    """time.monotonic and time.sleep for a deadline that passes without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def resolve(env: dict[str, str], **kwargs: Any) -> tuple[LaunchInfo, str]:
    err = io.StringIO()
    info = resolve_peers(load_launch_info(env), env, err=err, **kwargs)
    return info, err.getvalue()


# ---- two nodes find each other -----------------------------------------------------------------------


def test_two_nodes_node_1_waits_for_the_chief(fake: FakeControlPlane) -> None:
    results: dict[str, Any] = {}

    def node_1() -> None:
        try:
            results["node 1"] = resolve(fake.env(1, STRATUS_NODE_ADDR="10.0.0.2"))
        except BaseException as e:  # pragma: no cover - shown by the assertion below
            results["node 1"] = e

    thread = threading.Thread(target=node_1)
    thread.start()
    fake.wait_for(lambda: ("GET", None) in fake.requests)  # node 1 registered and polls
    assert fake.nodes == {1: {"addr": "10.0.0.2", "port": None}}
    chief, chief_err = resolve(fake.env(0, STRATUS_NODE_ADDR="10.0.0.1", STRATUS_CHIEF_PORT="29511"))
    thread.join(timeout=fake.wait_s)
    assert isinstance(results["node 1"], tuple), results["node 1"]
    node1, node1_err = results["node 1"]

    assert fake.nodes[0] == {"addr": "10.0.0.1", "port": 29511}
    expected = dict(
        chief_addr="10.0.0.1", chief_port=29511, node_addrs=("10.0.0.1", "10.0.0.2"), run_id="run-7"
    )
    assert chief == LaunchInfo(slots=4, num_nodes=2, node_rank=0, **expected)  # type: ignore[arg-type]
    assert node1 == LaunchInfo(slots=4, num_nodes=2, node_rank=1, **expected)  # type: ignore[arg-type]
    done = "[launcher] rendezvous: run run-7 ready on 2 nodes: 0=10.0.0.1:29511, 1=10.0.0.2"
    assert node1_err.splitlines() == [WAIT_LINE, done]
    assert chief_err.splitlines() == [done]  # the last to come waits for nobody

    # ... and the launchers use what it found.
    assert horovod.hosts_arg(node1) == "10.0.0.1:2,10.0.0.2:2"
    assert horovod.build_argv(chief, [], Script(("t.py",)))[3:5] == [
        "-H",
        "10.0.0.1:2,10.0.0.2:2",
    ]
    assert deepspeed.hostfile_text(node1) == "10.0.0.1 slots=2\n10.0.0.2 slots=2\n"
    ds = deepspeed.build_argv(node1, [], Script(("t.py",)), hostfile="/tmp/h")
    assert ds[ds.index("--master_addr") : ds.index("--master_addr") + 4] == [
        "--master_addr",
        "10.0.0.1",
        "--master_port",
        "29511",
    ]
    assert torch_distributed.local_launch(node1, []) == LocalLaunch(
        2, "10.0.0.1", 29511, "run-7", num_nodes=2, node_rank=1
    )


def test_the_chief_picks_a_free_port_and_detects_its_address(fake: FakeControlPlane) -> None:
    fake.nodes[1] = {"addr": "10.0.0.2", "port": None}
    info, err = resolve(fake.env(0))  # master on loopback: the node's address is 127.0.0.1
    assert fake.nodes[0]["addr"] == "127.0.0.1" and isinstance(fake.nodes[0]["port"], int)
    assert (info.chief_addr, info.chief_port) == ("127.0.0.1", fake.nodes[0]["port"])
    assert fake.requests == [("POST", 0)]  # ready at once: no GET, no waiting line
    assert "waiting" not in err


def test_aws_batch_variables_give_the_node(fake: FakeControlPlane) -> None:
    fake.nodes[0] = {"addr": "10.0.0.1", "port": 29500}
    env = fake.env(0, STRATUS_NODE_ADDR="10.0.0.2", AWS_BATCH_JOB_NUM_NODES="2", AWS_BATCH_JOB_NODE_INDEX="1")
    del env["STRATUS_NUM_NODES"], env["STRATUS_NODE_RANK"]
    info, _ = resolve(env)
    assert fake.requests == [("POST", 1)]
    assert (info.node_rank, info.node_addrs) == (1, ("10.0.0.1", "10.0.0.2"))


# ---- when it does not run -------------------------------------------------------------------------------


def test_an_explicit_chief_or_one_node_skips_the_rendezvous(fake: FakeControlPlane) -> None:
    static = fake.env(1, STRATUS_CHIEF_ADDR="10.9.9.9", STRATUS_NODE_ADDRS="10.9.9.9,10.9.9.8")
    info, err = resolve(static)
    assert (info.chief_addr, info.chief_port, info.node_addrs) == (
        "10.9.9.9",
        29500,
        ("10.9.9.9", "10.9.9.8"),
    )
    one = load_launch_info({})
    assert resolve_peers(one, {}) is one
    assert (fake.requests, err) == ([], "")


@pytest.mark.parametrize("missing", ["STRATUS_MASTER", "STRATUS_TRIAL_ID", "STRATUS_RUN_TOKEN"])
def test_the_rendezvous_needs_the_control_plane(fake: FakeControlPlane, missing: str) -> None:
    env = fake.env(1)
    del env[missing]
    with pytest.raises(LaunchConfigError, match=f"^{missing} is not set"):
        resolve(env)


# ---- failures ------------------------------------------------------------------------------------------


def test_timeout_names_the_missing_nodes(fake: FakeControlPlane) -> None:
    fake.num_nodes = 3
    time = FakeClock()
    env = fake.env(1, STRATUS_NODE_ADDR="10.0.0.2", STRATUS_RENDEZVOUS_TIMEOUT_S="3")
    with pytest.raises(RendezvousError) as raised:
        resolve(env, clock=time.clock, sleep=time.sleep)
    assert str(raised.value) == (
        "rendezvous of run run-7 timed out after 3 s: nodes 0, 2 of 3 never registered; "
        "STRATUS_RENDEZVOUS_TIMEOUT_S sets the wait."
    )
    assert sum(time.sleeps) == pytest.approx(3.0)
    assert time.sleeps[:3] == pytest.approx([0.01, 0.015, 0.0225])  # growing intervals


def test_a_stale_run_stops_at_once(fake: FakeControlPlane) -> None:
    fake.answers = [(409, {"error": "ConflictError", "message": "run run-7 has ended"})] * 5
    with pytest.raises(
        RendezvousError, match=r"^the run has ended: POST .* answered 409 \(ConflictError: run"
    ):
        resolve(fake.env(1, STRATUS_NODE_ADDR="10.0.0.2"))
    assert fake.requests == [("POST", 1)]


def test_a_refused_token_is_named(fake: FakeControlPlane) -> None:
    env = fake.env(1, STRATUS_NODE_ADDR="10.0.0.2", STRATUS_RUN_TOKEN="stolen")
    with pytest.raises(RendezvousError, match="refused STRATUS_RUN_TOKEN: .* answered 401 .*bad run token"):
        resolve(env)
    assert len(fake.requests) == 1


def test_a_503_is_tried_again(fake: FakeControlPlane) -> None:
    fake.nodes[0] = {"addr": "10.0.0.1", "port": 29500}
    fake.answers = [(503, {"error": "ServiceUnavailable", "message": "busy"})]
    time = FakeClock()
    info, err = resolve(fake.env(1, STRATUS_NODE_ADDR="10.0.0.2"), clock=time.clock, sleep=time.sleep)
    assert fake.requests == [("POST", 1), ("POST", 1)]
    assert info.node_addrs == ("10.0.0.1", "10.0.0.2") and time.sleeps == [0.01]
    assert err.splitlines()[0].startswith("[launcher] rendezvous: node 1 of 2: POST http://127.0.0.1:")
    assert "answered 503 (ServiceUnavailable: busy); trying again for up to 600 s" in err


def test_an_unreachable_control_plane_times_out(fake: FakeControlPlane) -> None:
    env = fake.env(1, STRATUS_NODE_ADDR="10.0.0.2", STRATUS_RENDEZVOUS_TIMEOUT_S="1")
    fake.server.shutdown()
    fake.server.server_close()  # nothing listens there any more: connection refused
    time = FakeClock()
    with pytest.raises(
        RendezvousError, match=r"could not register at the rendezvous .* within 1 s \(last error"
    ):
        resolve(env, clock=time.clock, sleep=time.sleep)


def test_a_different_node_count_is_refused(fake: FakeControlPlane) -> None:
    env = fake.env(1, STRATUS_NODE_ADDR="10.0.0.2", STRATUS_NUM_NODES="4", STRATUS_SLOTS="4")
    with pytest.raises(
        RendezvousError, match="run run-7 has 2 nodes at the control plane .* STRATUS_NUM_NODES=4"
    ):
        resolve(env)


@pytest.mark.parametrize(
    "answer",
    [
        {"run_id": "r", "num_nodes": 2, "nodes": [{"node_rank": "0", "addr": "a"}], "ready": False},
        {"run_id": "r", "num_nodes": 2, "ready": False},
        {"run_id": "r", "num_nodes": 2, "nodes": [], "ready": "yes"},
    ],
)
def test_a_malformed_answer_is_refused(answer: dict[str, Any]) -> None:
    with pytest.raises(RendezvousError, match="malformed|ready="):
        Record.from_json(answer)


def test_a_ready_record_without_the_chiefs_port_is_refused(fake: FakeControlPlane) -> None:
    fake.nodes[0] = {"addr": "10.0.0.1", "port": None}
    with pytest.raises(RendezvousError, match="chief registered no usable port"):
        resolve(fake.env(1, STRATUS_NODE_ADDR="10.0.0.2"))


# ---- this node's address -------------------------------------------------------------------------------


def test_node_address() -> None:
    assert node_address("http://127.0.0.1:8080") == "127.0.0.1"
    assert node_address("http://localhost/api") == "127.0.0.1"
    with pytest.raises(LaunchConfigError, match="not a URL with a host"):
        node_address("/trials")
    try:
        routed = node_address("http://192.0.2.1:8080")  # TEST-NET-1: nothing is sent, only routed
    except LaunchConfigError:
        pytest.skip("no route out of this machine")
    assert not ipaddress.ip_address(routed).is_loopback


# ---- two real launchers that meet through the fake -----------------------------------------------------


@pytest.mark.timeout(30)
def test_gloo_on_two_nodes_that_meet_at_the_rendezvous(fake: FakeControlPlane, all_reduce, workdir) -> None:
    workdir.script("script.py", all_reduce)
    fake.num_nodes = 2
    envs = [workdir.env(**fake.env(n, STRATUS_SLOTS="2")) for n in range(2)]
    nodes = workdir.run_nodes("torch_distributed", ["--", "script.py"], envs)
    assert [code for code, _, _ in nodes] == [0, 0], [err for _, _, err in nodes]
    assert nodes[0][1].splitlines() == ["[rank=0] sum=3 rank=0/2 local=0"]
    assert nodes[1][1].splitlines() == ["[rank=1] sum=3 rank=1/2 local=0"]
    port = fake.nodes[0]["port"]
    for _, _, err in nodes:
        assert f"[launcher] rendezvous: run run-7 ready on 2 nodes: 0=127.0.0.1:{port}, 1=127.0.0.1" in err
