"""The compute agent's pieces that need no process and no server: line splitting, log batching, exit
statuses, the trial environment, the command line, the launchers' rank prefix and report.

The agent running real trial processes against a fake control plane is tested in
tests/integration/test_agent.py."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from stratus.contract.launch import LaunchSpec
from stratus.harness.agent._logs import LineSplitter, LogShipper
from stratus.harness.agent._settings import Settings, parse_cli
from stratus.harness.agent._spawn import build_environment, exit_status

TOKEN = "agent-token-s3cr3t-6f1d"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        api_url="http://127.0.0.1:1",
        agent_id="agent-1",
        pool="default",
        slots=2,
        work_dir=tmp_path / "work",
        token=TOKEN,
    )


def test_line_splitter() -> None:
    s = LineSplitter(max_bytes=16)
    assert s.feed(b"a\nb\r\nc") == ["a", "b"]
    assert s.feed(b"d\r") == ["cd"]
    assert s.feed(b"\n") == []  # the \n of a \r\n cut in two
    assert s.feed(b"\r 10%\r 20%\r 30%\n\n") == [" 10%", " 20%", " 30%", ""]
    assert s.feed(b"x" * 40) == ["x" * 16, "x" * 16]
    assert s.feed("é".encode()[:1]) == []  # half a character waits for its other half
    assert s.feed("é".encode()[1:] + b"\n") == ["x" * 8 + "é"]
    assert s.feed(("€" * 7).encode() + b"\n") == ["€" * 5, "€" * 2]  # 3-byte chars, never cut in half
    assert s.feed(b"\xff\xfeok") == []
    assert s.finish() == ["\ufffd\ufffdok"]


def test_log_shipper_batches_by_size_and_flushes_on_close(tmp_path: Path) -> None:
    batches: list[list[str]] = []
    seqs: list[int] = []
    got = threading.Event()

    def send(lines: Any, seq: int) -> None:
        batches.append([line["message"] for line in lines])
        seqs.append(seq)
        got.set()

    shipper = LogShipper(
        send, tmp_path / "out.log", what="t", give_up=threading.Event(), flush_interval=30.0, batch_lines=200
    )
    shipper.start()
    shipper.add([f"l{i}" for i in range(450)])
    assert got.wait(5)  # 200 lines leave at once, without waiting 30 s
    shipper.close()  # the rest leaves on close
    assert [len(b) for b in batches] == [200, 200, 50]
    assert seqs == [1, 2, 3]
    assert sum(batches, []) == [f"l{i}" for i in range(450)]
    assert (tmp_path / "out.log").read_text().splitlines() == [f"l{i}" for i in range(450)]


def test_exit_status() -> None:
    assert exit_status(0) == (0, "exited with code 0")
    assert exit_status(-signal.SIGTERM) == (143, "killed by signal SIGTERM")
    assert exit_status(-signal.SIGKILL) == (137, "killed by signal SIGKILL")


def nothing_missing(env: Mapping[str, str], names: Sequence[str]) -> set[str]:
    """The agent's probe of the trial's Python, answered without starting it: every package is there."""
    return set()


def test_build_environment_spec_wins_but_gpus_are_the_agents(settings: Settings) -> None:
    spec = LaunchSpec.from_json(
        {
            "run_id": "r",
            "trial_id": 1,
            "experiment_id": 2,
            "slots": 1,
            "entrypoint": ["x"],
            "environment": {"A": 1, "CUDA_VISIBLE_DEVICES": "9"},
            "context_url": None,
            "api_url": "http://m",
        }
    )
    base = {"PATH": "/usr/bin", "STRATUS_AGENT_TOKEN": TOKEN, "AWS_SESSION_TOKEN": "t", "HOME": "/h"}
    env = build_environment(spec, settings, ("3",), base, probe=nothing_missing)
    assert env["A"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "3" and env["HOME"] == "/h"
    assert "STRATUS_AGENT_TOKEN" not in env and "AWS_SESSION_TOKEN" not in env
    assert env["PATH"] == os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin"])
    assert env["STRATUS_MASTER"] == "http://m" and env["STRATUS_SLOTS"] == "1"
    # a CPU agent assigns nothing: the trial's own value (if any) stands
    cpu_env = build_environment(spec, settings, None, {"PATH": "/bin"}, probe=nothing_missing)
    assert cpu_env["CUDA_VISIBLE_DEVICES"] == "9"


def test_cli_settings(tmp_path: Path) -> None:
    argv = ["--api", "http://x:1/", "--agent-id", "a", "--pool", "p", "--work-dir", str(tmp_path)]
    opts = parse_cli(argv, {"STRATUS_AGENT_TOKEN": TOKEN, "CUDA_VISIBLE_DEVICES": ""})
    s = opts.settings
    assert (s.api_url, s.agent_id, s.pool, s.slots, s.work_dir) == ("http://x:1", "a", "p", 1, tmp_path)
    assert (s.heartbeat_interval, s.kill_grace, s.token) == (0.5, 10.0, TOKEN)
    assert TOKEN not in repr(s)
    more = parse_cli(
        [*argv, "--slots", "4", "--heartbeat-interval", "2", "--kill-grace", "1"],
        {"CUDA_VISIBLE_DEVICES": "0,1"},
    )
    assert (more.settings.slots, more.settings.gpus, more.settings.kill_grace) == (4, ("0", "1"), 1.0)
    assert parse_cli(argv, {"CUDA_VISIBLE_DEVICES": "0,1"}).settings.slots == 2
    with pytest.raises(SystemExit):
        parse_cli(["--api", "http://x"], {})


def test_only_a_launchers_framed_prefix_becomes_the_lines_rank() -> None:
    from stratus.harness.agent._logs import rank_line
    from stratus.launchers._lines import rank_prefix

    framed = rank_prefix(1, "s3cr3t").decode() + "loss 0.3"
    assert rank_line(5, framed, "s3cr3t") == {"timestamp": 5, "message": "[rank=1] loss 0.3", "rank": 1}
    # What a trial prints claims no rank: a bare prefix, another run's frame, a prefix mid-line.
    assert rank_line(5, "[rank=7] forged", "s3cr3t") == {
        "timestamp": 5,
        "message": "[rank=7] forged",
        "rank": None,
    }
    assert rank_line(5, rank_prefix(7, "guess").decode() + "forged", "s3cr3t")["rank"] is None
    assert rank_line(5, "no prefix [rank=1] here", "s3cr3t")["rank"] is None
    assert rank_line(5, framed, "")["rank"] is None  # a run without a frame has no ranks


def test_the_launchers_report_names_the_first_failing_rank(tmp_path: Path) -> None:
    from stratus.harness.agent._spawn import first_failed_rank

    report = tmp_path / "launcher.json"
    assert first_failed_rank(report) is None
    report.write_text('{"exit_code": 0, "failed_rank": null, "reason": "every worker exited with code 0"}')
    assert first_failed_rank(report) is None
    report.write_text('{"exit_code": 3, "failed_rank": 1, "reason": "rank 1 exited with code 3"}')
    assert first_failed_rank(report) == (1, "rank 1 failed first with exit code 3")
    report.write_text("not json")
    assert first_failed_rank(report) is None


def test_the_credential_comes_from_a_token_file_which_is_then_deleted(tmp_path: Path) -> None:
    token_file = tmp_path / "credential"
    token_file.write_text("agent.local-0.abc\n")
    argv = ["--api", "http://x", "--agent-id", "local-0", "--pool", "p", "--work-dir", str(tmp_path)]

    opts = parse_cli([*argv, "--token-file", str(token_file)], {"STRATUS_AGENT_TOKEN": "ignored"})

    assert opts.settings.token == "agent.local-0.abc"
    assert not token_file.exists()  # in no file and no environment a trial could read
    with pytest.raises(SystemExit, match="cannot read --token-file"):
        parse_cli([*argv, "--token-file", str(token_file)], {})
