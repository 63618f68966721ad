"""`det deploy local up` as a second command, with `--moto-port`, and the export line; the Determined
spellings `det d`, `cluster-up`, `cluster-down`. Fake processes and liveness (nothing is started)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import httpx
import pytest

from det import cli
from det._runtime import Runtime
from det.deploy import local as _deploy
from det.errors import StackError


class FakeProcess:
    pid = 4242

    def poll(self) -> int | None:
        return None


def _state(directory: Path, pid: int, port: int = 8080, **fields: object) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    state = {
        "pid": pid,
        "api_url": f"http://127.0.0.1:{port}",
        "moto_url": "http://127.0.0.1:5000",
        "slots": 2,
        "agents": 1,
        "started_at": 1714564800.0,
        "pools": [{"name": "default", "backend": "local", "agents": 1, "slots": 2}],
    }
    (directory / "stack.json").write_text(json.dumps(state | fields))


def _rt(home: Path, environ: dict[str, str] | None = None, **kwargs: object) -> Runtime:
    healthy = httpx.MockTransport(lambda r: httpx.Response(200, json={"status": "ok"}))
    return Runtime(
        environ={"STRATUS_HOME": str(home), **(environ or {})},
        transport=healthy,
        out=io.StringIO(),
        err=io.StringIO(),
        **kwargs,  # type: ignore[arg-type]
    )


def _args(*argv: str) -> argparse.Namespace:
    """What the real parser makes of `det deploy local up ARGV`."""
    return cli.build_parser().parse_args(["deploy", "local", "up", *argv])


def _up(args: argparse.Namespace, rt: Runtime, running: int | None = None) -> int:
    def spawn(command: list[str], log: Path) -> FakeProcess:
        raise AssertionError("a stack runs: nothing may be started")

    return _deploy.up(args, rt, spawn=spawn, alive=lambda pid: pid == running, port_taken=lambda p: False)


def test_a_second_up_on_another_port_fails_naming_the_running_stack_and_how_to_stop_it(
    tmp_path: Path,
) -> None:
    _state(tmp_path / "local", 9, port=8080)

    with pytest.raises(StackError) as refused:
        _up(_args("--port", "9001", "--slots", "4"), _rt(tmp_path), running=9)

    assert str(refused.value) == (
        "a Stratus local stack already runs at http://127.0.0.1:8080 (pid 9), not as asked: --port 9001 "
        "(it listens on 8080); --slots 4 (it has 2); stop it with `det deploy local down` and run this "
        "again, or use it with `export DET_MASTER=http://127.0.0.1:8080`"
    )


def test_a_second_up_that_asks_what_runs_exits_0_and_says_so(tmp_path: Path) -> None:
    _state(tmp_path / "local", 9, port=8123)
    rt = _rt(tmp_path, {"DET_MASTER": "http://127.0.0.1:8123"})

    code = _up(_args("--port", "8123", "--slots", "2", "--agents", "1", "--backend", "local"), rt, running=9)

    assert code == 0
    assert rt.out.getvalue() == (  # type: ignore[attr-defined]
        "Stratus local stack is already running at http://127.0.0.1:8123 (pid 9), as asked\n"
        "DET_MASTER already points at it in this shell; elsewhere, point the CLI at it with:\n"
        "  export DET_MASTER=http://127.0.0.1:8123\n"
    )
    assert _up(_args(), _rt(tmp_path), running=9) == 0  # nothing asked: whatever runs will do


def test_up_on_another_port_prints_the_export_line_and_passes_the_moto_port(tmp_path: Path) -> None:
    directory = tmp_path / "local"
    started: list[list[str]] = []

    def spawn(command: list[str], log: Path) -> FakeProcess:
        started.append(command)
        _state(directory, 4242, port=9001, moto_url="http://127.0.0.1:9002")
        return FakeProcess()

    rt = _rt(tmp_path, sleep=lambda s: None)
    code = _deploy.up(
        _args("--port", "9001", "--moto-port", "9002", "--slots", "2"),
        rt,
        spawn=spawn,
        alive=lambda pid: False,
        port_taken=lambda p: False,
    )

    assert code == 0
    assert started[0][started[0].index("--port") + 1] == "9001"
    assert started[0][started[0].index("--moto-port") + 1] == "9002"
    assert rt.out.getvalue().splitlines()[-1] == "  export DET_MASTER=http://127.0.0.1:9001"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "taken", "message"),
    [
        (
            ["--moto-port", "9002"],
            {9002},
            "port 9002 on 127.0.0.1 is already in use; stop what listens there or pass --moto-port",
        ),
        (
            ["--port", "9003", "--moto-port", "9003"],
            set(),
            "--moto-port 9003 is the API's --port too; pass two different ports",
        ),
        (
            ["--moto-port", "70000"],
            set(),
            "--moto-port 70000 is not a TCP port; pass a number from 1 to 65535",
        ),
    ],
)
def test_a_moto_port_that_cannot_be_used_is_refused_before_anything_starts(
    tmp_path: Path, argv: list[str], taken: set[int], message: str
) -> None:
    def spawn(command: list[str], log: Path) -> FakeProcess:
        raise AssertionError("refused before starting")

    with pytest.raises(StackError) as refused:
        _deploy.up(
            _args(*argv), _rt(tmp_path), spawn=spawn, alive=lambda pid: False, port_taken=taken.__contains__
        )

    assert str(refused.value) == message


def test_the_local_stack_takes_the_moto_port_it_is_given(tmp_path: Path) -> None:
    from infra.local.stack import LocalStack

    stack = LocalStack(port=9001, moto_port=9002, slots=1, state_dir=tmp_path)

    assert (stack.moto_url, stack.api_url) == ("http://127.0.0.1:9002", "http://127.0.0.1:9001")


@pytest.mark.parametrize("argv", [["d", "local", "down"], ["deploy", "local", "cluster-down"]])
def test_determined_spellings_of_deploy_and_down(tmp_path: Path, argv: list[str]) -> None:
    rt = _rt(tmp_path)
    assert cli.main(argv, runtime=rt) == 0
    assert rt.out.getvalue() == "Stratus local stack is not running\n"  # type: ignore[attr-defined]


def test_cluster_up_is_up() -> None:
    assert (
        _args().command is cli.build_parser().parse_args(["d", "local", "cluster-up"]).command is _deploy.up
    )
