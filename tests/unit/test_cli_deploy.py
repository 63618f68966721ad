"""`det deploy local up | status | down` without starting anything: fake processes, fake liveness.

A real busy port and the real process table are tested in tests/integration/test_cli_deploy_host.py."""

from __future__ import annotations

import argparse
import io
import json
import signal
from pathlib import Path

import httpx
import pytest

from det import _deploy, cli
from det._deploy import StackState, inspect, read_state, state_dir
from det._runtime import Runtime

API_URL = "http://127.0.0.1:8080"


def write_state(directory: Path, pid: int, **fields: object) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    state = {
        "pid": pid,
        "api_url": API_URL,
        "moto_url": "http://127.0.0.1:5000",
        "slots": 2,
        "started_at": 1714564800.0,
    }
    (directory / "stack.json").write_text(json.dumps(state | fields))


def healthy(request: httpx.Request) -> httpx.Response:
    assert request.url.path == "/health"
    return httpx.Response(200, json={"status": "ok", "version": "0.1.0"})


class Streams:
    def __init__(self) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()


def runtime(home: Path, streams: Streams, **kwargs: object) -> Runtime:
    return Runtime(
        environ={"STRATUS_HOME": str(home)},
        transport=httpx.MockTransport(healthy),
        out=streams.out,
        err=streams.err,
        **kwargs,  # type: ignore[arg-type]
    )


def up_args(**kwargs: object) -> argparse.Namespace:
    return argparse.Namespace(**({"slots": 2, "agents": 1, "port": 0, "detach": True} | kwargs))


class FakeProcess:
    def __init__(self, pid: int = 4242, exit_code: int | None = None) -> None:
        self.pid = pid
        self.exit_code = exit_code

    def poll(self) -> int | None:
        return self.exit_code


# --- state files -------------------------------------------------------------------------------


def test_state_dir_follows_stratus_home(tmp_path: Path) -> None:
    assert state_dir({"STRATUS_HOME": str(tmp_path)}) == tmp_path / "local"
    assert state_dir({}) == Path.home() / ".stratus" / "local"


def test_read_state(tmp_path: Path) -> None:
    assert read_state(tmp_path) is None
    write_state(tmp_path, 12)
    assert read_state(tmp_path) == StackState(12, API_URL, "http://127.0.0.1:5000", 2, 1714564800.0)
    (tmp_path / "stack.json").write_text('{"pid": 12, "api_')  # half-written
    assert read_state(tmp_path) is None
    (tmp_path / "stack.json").write_text('{"api_url": "x"}')
    assert read_state(tmp_path) is None


def test_inspect_tells_running_starting_and_stale(tmp_path: Path) -> None:
    assert inspect(tmp_path, lambda pid: True).kind == "stopped"
    (tmp_path / "stack.pid").write_text("77\n")
    assert inspect(tmp_path, lambda pid: pid == 77).kind == "starting"
    write_state(tmp_path, 77)
    running = inspect(tmp_path, lambda pid: pid == 77)
    assert (running.kind, running.pid, running.state and running.state.api_url) == ("running", 77, API_URL)
    assert inspect(tmp_path, lambda pid: False).kind == "stopped"  # the pid is gone: stale files


# --- status ------------------------------------------------------------------------------------


def test_status_when_running(tmp_path: Path) -> None:
    write_state(tmp_path / "local", 55)
    streams = Streams()

    code = _deploy.status(argparse.Namespace(), runtime(tmp_path, streams), alive=lambda pid: pid == 55)

    assert code == 0
    lines = streams.out.getvalue().splitlines()
    assert lines[0] == "Stratus local stack: running"
    assert "  pid:     55" in lines
    assert f"  API:     {API_URL}" in lines
    assert "  slots:   2" in lines
    assert "  health:  ok (version 0.1.0)" in lines


def test_status_cleans_stale_files_and_exits_3(tmp_path: Path) -> None:
    write_state(tmp_path / "local", 55)
    (tmp_path / "local" / "stack.pid").write_text("55")
    streams = Streams()

    code = _deploy.status(argparse.Namespace(), runtime(tmp_path, streams), alive=lambda pid: False)

    assert code == 3
    assert streams.out.getvalue().startswith("Stratus local stack: not running\n")
    assert not (tmp_path / "local" / "stack.json").exists()
    assert not (tmp_path / "local" / "stack.pid").exists()


def test_status_through_the_cli(tmp_path: Path) -> None:
    streams = Streams()
    assert cli.main(["deploy", "local", "status"], runtime=runtime(tmp_path, streams)) == 3


# --- up ----------------------------------------------------------------------------------------


def test_up_starts_detached_and_waits_for_health(tmp_path: Path) -> None:
    directory = tmp_path / "local"
    started: list[list[str]] = []
    sleeps: list[float] = []

    def spawn(command: list[str], log: Path) -> FakeProcess:
        started.append(command)
        assert log == directory / "stack.log"
        return FakeProcess(4242)

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            write_state(directory, 4242)  # the stack is ready

    streams = Streams()
    code = _deploy.up(
        up_args(),
        runtime(tmp_path, streams, sleep=sleep),
        spawn=spawn,
        alive=lambda pid: False,
        port_taken=lambda port: False,
    )

    assert code == 0
    assert started == [_deploy.stack_command(0, 2, directory)]
    assert started[0][1:] == [
        "-m",
        "infra.local_stack",
        "--port",
        "0",
        "--slots",
        "2",
        "--agents",
        "1",
        "--state-dir",
        str(directory),
    ]
    assert (directory / "stack.pid").read_text() == "4242\n"
    assert streams.out.getvalue() == (
        f"Stratus local stack is up: {API_URL} (2 slots, pid 4242)\n"
        "Point the CLI at it in this shell with:\n"
        f"  export DET_MASTER={API_URL}\n"
    )
    assert len(sleeps) == 3


def test_up_when_already_running_says_so(tmp_path: Path) -> None:
    write_state(tmp_path / "local", 9)
    streams = Streams()

    def spawn(command: list[str], log: Path) -> FakeProcess:
        raise AssertionError("must not start a second stack")

    code = _deploy.up(up_args(), runtime(tmp_path, streams), spawn=spawn, alive=lambda pid: pid == 9)

    assert code == 0
    assert streams.out.getvalue().startswith(f"Stratus local stack is already running at {API_URL} (pid 9)\n")


def test_up_prints_the_log_tail_when_the_stack_dies(tmp_path: Path) -> None:
    directory = tmp_path / "local"

    def spawn(command: list[str], log: Path) -> FakeProcess:
        log.write_text("booting\nTraceback (most recent call last):\nOSError: port taken\n")
        return FakeProcess(4242, exit_code=1)

    streams = Streams()
    rt = runtime(tmp_path, streams, sleep=lambda s: None)
    with pytest.raises(_deploy.StackError) as info:
        _deploy.up(up_args(), rt, spawn=spawn, alive=lambda pid: False, port_taken=lambda port: False)

    assert "OSError: port taken" in streams.err.getvalue()
    assert str(info.value) == (
        f"the local stack exited with code 1 while starting; the end of {directory / 'stack.log'} is above"
    )
    assert not (directory / "stack.pid").exists()


# --- down --------------------------------------------------------------------------------------


def test_down_sends_sigterm_and_cleans_up(tmp_path: Path) -> None:
    write_state(tmp_path / "local", 31)
    (tmp_path / "local" / "stack.pid").write_text("31")
    live = {31}
    signals: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        signals.append((pid, sig))
        live.discard(pid)

    streams = Streams()
    code = _deploy.down(argparse.Namespace(), runtime(tmp_path, streams), alive=live.__contains__, kill=kill)

    assert code == 0
    assert signals == [(31, signal.SIGTERM)]
    assert streams.out.getvalue() == "Stratus local stack stopped (pid 31)\n"
    assert list((tmp_path / "local").iterdir()) == []


def test_down_kills_a_stack_that_ignores_sigterm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_deploy, "STOP_TIMEOUT", 0.0)
    write_state(tmp_path / "local", 31)
    live = {31}
    signals: list[tuple[str, int]] = []

    def kill_group(pid: int, sig: int) -> None:
        signals.append(("group", sig))
        live.discard(pid)

    streams = Streams()
    code = _deploy.down(
        argparse.Namespace(),
        runtime(tmp_path, streams, sleep=lambda s: None),
        alive=live.__contains__,
        kill=lambda pid, sig: signals.append(("pid", sig)),
        kill_group=kill_group,
    )

    assert code == 0
    assert signals == [("pid", signal.SIGTERM), ("group", signal.SIGKILL)]


def test_down_is_idempotent(tmp_path: Path) -> None:
    streams = Streams()
    assert cli.main(["deploy", "local", "down"], runtime=runtime(tmp_path, streams)) == 0
    assert streams.out.getvalue() == "Stratus local stack is not running\n"


def _state_folder(directory: Path) -> None:
    for name in (
        "db/snapshot.json",
        "s3/bucket/contexts/x.tar.zst.obj",
        "agents/local-0/runs/1.1/process.json",
    ):
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text("kept")
    (directory / "agents.json").write_text("[]")
    (directory / "stack.log").write_text("the last run's log\n")


def test_down_keeps_the_state_for_the_next_up(tmp_path: Path) -> None:
    _state_folder(tmp_path / "local")
    streams = Streams()
    assert cli.main(["deploy", "local", "down"], runtime=runtime(tmp_path, streams)) == 0
    assert (tmp_path / "local" / "db" / "snapshot.json").read_text() == "kept"
    assert (tmp_path / "local" / "s3" / "bucket" / "contexts" / "x.tar.zst.obj").exists()


def test_down_delete_db_forgets_the_state(tmp_path: Path) -> None:
    write_state(tmp_path / "local", 31)
    _state_folder(tmp_path / "local")
    live = {31}
    streams = Streams()

    code = _deploy.down(
        argparse.Namespace(delete_db=True),
        runtime(tmp_path, streams),
        alive=live.__contains__,
        kill=lambda pid, sig: live.discard(pid),
    )

    assert code == 0
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == ["stack.log"]
    assert (
        streams.out.getvalue().splitlines()[-1] == f"Deleted the local stack's state in {tmp_path / 'local'}"
    )


def test_up_passes_pools_and_a_cluster_config_to_the_stack_and_lists_them(tmp_path: Path) -> None:
    directory = tmp_path / "local"
    config = tmp_path / "cluster.yaml"
    config.write_text("resource_pools: [{pool_name: big}]\n")
    started: list[list[str]] = []
    pools = [
        {"name": "default", "scheduler": "priority", "preemption": True, "agents": 1, "slots": 2},
        {"name": "gpu", "scheduler": "fair_share", "preemption": False, "agents": 2, "slots": 1},
    ]

    def spawn(command: list[str], log: Path) -> FakeProcess:
        started.append(command)
        write_state(directory, 4242, pools=pools)
        return FakeProcess(4242)

    streams = Streams()
    args = up_args(pool=["gpu:scheduler=fair_share:agents=2:slots=1"], cluster_config=str(config))
    code = _deploy.up(
        args, runtime(tmp_path, streams), spawn=spawn, alive=lambda pid: False, port_taken=lambda port: False
    )

    assert code == 0, streams.err.getvalue()
    assert started[0][-4:] == [
        "--pool",
        "gpu:scheduler=fair_share:agents=2:slots=1",
        "--cluster-config",
        str(config),
    ]
    assert streams.out.getvalue().splitlines()[1] == (
        "  resource pools: default (1 agent of 2 slots, priority, preemption); gpu (2 agents of 1 slot, fair_share)"
    )


def test_up_refuses_a_cluster_config_that_is_not_a_file(tmp_path: Path) -> None:
    streams = Streams()
    code = cli.main(
        ["deploy", "local", "up", "--cluster-config", str(tmp_path / "nope.yaml")],
        runtime=runtime(tmp_path, streams),
    )
    assert code == 1
    assert f"--cluster-config {tmp_path / 'nope.yaml'} is not a file" in streams.err.getvalue()


def test_status_lists_the_pools_of_a_stack_with_several(tmp_path: Path) -> None:
    pools = [
        {"name": "default", "scheduler": "priority", "preemption": True, "agents": 1, "slots": 2},
        {"name": "cpu", "scheduler": "priority", "preemption": False, "agents": 3, "slots": 1},
    ]
    write_state(tmp_path / "local", 55, pools=pools)
    streams = Streams()

    _deploy.status(argparse.Namespace(), runtime(tmp_path, streams), alive=lambda pid: pid == 55)

    assert (
        "  pools:   default (1 agent of 2 slots, priority, preemption); "
        "cpu (3 agents of 1 slot, priority, no preemption)"
    ) in streams.out.getvalue().splitlines()


def test_up_with_warm_start_starts_the_stack_with_it(tmp_path: Path) -> None:
    """Issue 12: `det deploy local up --warm-start` reaches the stack, which hands it to its agents."""
    started: list[list[str]] = []
    directory = tmp_path / "local"

    def spawn(command: list[str], log: Path) -> FakeProcess:
        started.append(command)
        write_state(directory, 4242)
        return FakeProcess(4242)

    streams = Streams()
    code = _deploy.up(
        up_args(warm_start=True),
        runtime(tmp_path, streams),
        spawn=spawn,
        alive=lambda pid: False,
        port_taken=lambda port: False,
    )
    assert code == 0, streams.err.getvalue()
    assert started[0][-1] == "--warm-start"
    assert cli.build_parser().parse_args(["deploy", "local", "up", "--warm-start"]).warm_start is True
