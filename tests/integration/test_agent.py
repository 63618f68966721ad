"""The compute agent (harness/agent) against a fake control plane: a ThreadingHTTPServer on 127.0.0.1:0.

Runs are real processes (bash, python3 from this venv); every wait is on a condition with a deadline.
The pieces that need no process (line splitting, log batching, the environment) are in
tests/unit/harness/agent/test_pieces.py.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import zstandard

from infra.local.stack import DEFAULT_SLOTS, default_slots
from stratus.harness.agent._agent import Agent
from stratus.harness.agent._settings import Settings, detect_gpus
from stratus.harness.agent.testing import TOKEN, FakeApi, Runner, pid_alive, spec_for, wait_until
from stratus.harness.errors import UnsafeArchiveError

REPO = Path(__file__).resolve().parents[2]


# ---- helpers ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _extractor() -> Iterator[None]:
    """Use stratus.harness._archive when it exists; a minimal stand-in otherwise (another module's job)."""
    try:
        import stratus.harness._archive  # noqa: F401
    except ImportError:
        mod = types.ModuleType("stratus.harness._archive")

        def extract(archive: bytes | Path, dest: Path) -> list[str]:
            raw = archive if isinstance(archive, bytes) else Path(archive).read_bytes()
            data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                members = tar.getmembers()
                for m in members:
                    if m.name.startswith("/") or ".." in Path(m.name).parts:
                        raise UnsafeArchiveError(f"{m.name} escapes the context folder")
                tar.extractall(dest, filter="data")
            return [m.name for m in members]

        mod.extract = extract  # type: ignore[attr-defined]
        sys.modules["stratus.harness._archive"] = mod
        yield
        sys.modules.pop("stratus.harness._archive", None)
    else:
        yield


@pytest.fixture
def runner(settings: Settings) -> Iterator[Runner]:
    r = Runner(settings)
    yield r
    r.close()


@pytest.fixture
def agent_thread(settings: Settings) -> Iterator[Callable[..., Agent]]:
    started: list[tuple[Agent, threading.Thread]] = []

    def start(**changes: Any) -> Agent:
        agent = Agent(replace(settings, **changes))
        t = threading.Thread(target=agent.run, daemon=True)
        t.start()
        started.append((agent, t))
        return agent

    yield start
    for agent, t in started:
        agent.request_stop()
        t.join(20)
        assert not t.is_alive(), "the agent did not stop"


PRINT_LINES = "import sys\nfor i in range(300):\n    print(f'line {i}')\nprint('exe', sys.executable)\n"


# ---- one run ------------------------------------------------------------------------------------------


def test_run_ships_lines_in_order_then_reports_exit(api: FakeApi, runner: Runner) -> None:
    spec = spec_for(api, ["python3", "main.py"], {"main.py": PRINT_LINES})
    run = runner.start(spec)
    body = api.wait_exit(spec["run_id"])
    assert body == {"exit_code": 0, "reason": "exited with code 0"}

    lines = api.log_lines(spec["run_id"])
    assert lines[:300] == [f"line {i}" for i in range(300)]
    # python3 in an entrypoint is this interpreter's venv (PATH led by its bin dir)
    assert lines[300] == f"exe {Path(sys.executable).parent / 'python3'}"
    # flush first: every log batch arrived before the exit; batches hold at most 200 lines
    with api.cond:
        kinds = [c["kind"] for c in api.calls if c["kind"] in ("logs", "exit", "started")]
    assert kinds[-1] == "exit" and kinds.count("exit") == 1
    assert kinds.count("started") == 1 and kinds.index("started") < kinds.index("exit")
    logs = api.of("logs", spec["run_id"])
    assert all(len(c["body"]["lines"]) <= 200 for c in logs)
    assert all(c["path"] == f"/trials/{spec['trial_id']}/logs" for c in logs)
    first = logs[0]["body"]["lines"][0]
    assert set(first) == {"timestamp", "message", "rank"} and first["rank"] is None
    assert abs(first["timestamp"] - time.time() * 1000) < 60_000
    started = api.of("started", spec["run_id"])[0]
    assert started["path"] == f"/agents/agent-1/runs/{spec['run_id']}/started"
    assert started["body"] == {"pid": run.pid}
    assert all(c["auth"] == f"Bearer {TOKEN}" for c in api.calls if c["method"] == "POST")
    # the presigned context GET carries no agent token
    assert [c["auth"] for c in api.calls if c["method"] == "GET"] == [None]
    assert (run.run_dir / "output.log").read_text().splitlines()[:300] == lines[:300]
    assert (run.context_dir / "main.py").exists()


def test_exit_code_is_reported(api: FakeApi, runner: Runner) -> None:
    spec = spec_for(api, ["python3", "-c", "import sys; print('bye'); sys.exit(3)"])
    runner.start(spec)
    assert api.wait_exit(spec["run_id"]) == {"exit_code": 3, "reason": "exited with code 3"}
    assert api.log_lines(spec["run_id"]) == ["bye"]


def test_string_entrypoint_runs_with_sh(api: FakeApi, runner: Runner) -> None:
    spec = spec_for(api, "echo one && echo two; exit 4")
    runner.start(spec)
    assert api.wait_exit(spec["run_id"])["exit_code"] == 4
    assert api.log_lines(spec["run_id"]) == ["one", "two"]


def test_startup_hook_exports_reach_the_entrypoint(api: FakeApi, runner: Runner) -> None:
    hook = "echo sourcing the hook\nexport GREETING=hello-from-hook\nHIDDEN=not-exported\n"
    spec = spec_for(
        api,
        ["python3", "-c", "import os; print('greeting=' + os.environ['GREETING'], os.environ.get('HIDDEN'))"],
        {"startup-hook.sh": hook},
    )
    runner.start(spec)
    assert api.wait_exit(spec["run_id"])["exit_code"] == 0
    assert api.log_lines(spec["run_id"]) == ["sourcing the hook", "greeting=hello-from-hook None"]


@pytest.mark.parametrize(
    ("hook", "code"),
    [
        ("echo hook says hi\nfalse\n", 1),  # the hook's status is a failure
        ("echo hook says hi\nexit 7\n", 7),  # the hook ends the shell itself
        ("set -e\necho hook says hi\nfalse\necho never\n", 1),  # set -e ends the shell
    ],
)
def test_failing_startup_hook_fails_the_run(api: FakeApi, runner: Runner, hook: str, code: int) -> None:
    spec = spec_for(api, ["echo", "entrypoint ran"], {"startup-hook.sh": hook})
    runner.start(spec)
    assert api.wait_exit(spec["run_id"]) == {"exit_code": code, "reason": "startup-hook.sh failed"}
    lines = api.log_lines(spec["run_id"])
    assert "hook says hi" in lines
    assert "entrypoint ran" not in lines and "never" not in lines
    assert any("startup-hook.sh failed" in m for m in lines)


def test_kill_sends_sigterm_to_the_process_group(api: FakeApi, runner: Runner) -> None:
    spec = spec_for(api, ["python3", "-c", "import time; print('ready', flush=True); time.sleep(60)"])
    run = runner.start(spec)
    api.wait_log(spec["run_id"], "ready")
    run.kill()
    run.kill()  # idempotent
    assert api.wait_exit(spec["run_id"]) == {"exit_code": 143, "reason": "killed by signal SIGTERM"}


def test_kill_escalates_to_sigkill_after_the_grace(api: FakeApi, runner: Runner) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('ignoring SIGTERM', flush=True))\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    spec = spec_for(api, ["python3", "-c", code])
    run = runner.start(spec)
    api.wait_log(spec["run_id"], "ready")
    t0 = time.monotonic()
    run.kill()
    api.wait_log(spec["run_id"], "ignoring SIGTERM")
    assert api.wait_exit(spec["run_id"]) == {"exit_code": 137, "reason": "killed by signal SIGKILL"}
    assert time.monotonic() - t0 >= 0.9  # not before the 1 s grace
    assert any("SIGKILL sent" in m for m in api.log_lines(spec["run_id"]))


def test_leftovers_of_the_process_group_are_killed(api: FakeApi, runner: Runner) -> None:
    # a background child keeps the output pipe open after the entrypoint exits
    spec = spec_for(api, ["sh", "-c", "sleep 300 & echo $! > child.pid; echo leader done"])
    run = runner.start(spec)
    assert api.wait_exit(spec["run_id"]) == {"exit_code": 0, "reason": "exited with code 0"}
    child = int((run.context_dir / "child.pid").read_text())
    wait_until(lambda: not pid_alive(child), 5, "the background child to be killed")
    assert api.log_lines(spec["run_id"]) == ["leader done"]


def test_context_download_failure_is_an_exit_with_code_1(api: FakeApi, runner: Runner) -> None:
    spec = spec_for(
        api, ["echo", "never"], context_url=f"{api.url}/ctx/missing.tar.zst?X-Amz-Signature=s3cr3t"
    )
    runner.start(spec)
    body = api.wait_exit(spec["run_id"])
    assert body["exit_code"] == 1
    assert body["reason"].startswith("context download failed: HTTP 404")
    assert "s3cr3t" not in body["reason"]  # the presigned query is never repeated
    assert any("context download failed" in m for m in api.log_lines(spec["run_id"]))
    assert not api.of("started", spec["run_id"])


def test_a_context_download_is_retried_without_the_agent_token(api: FakeApi, runner: Runner) -> None:
    api.fail["context"] = 1
    spec = spec_for(api, ["echo", "ran"])
    runner.start(spec)
    assert api.wait_exit(spec["run_id"])["exit_code"] == 0
    lines = api.log_lines(spec["run_id"])
    retried = [
        m for m in lines if m.startswith("[agent] context download failed (attempt 1 of 3, retrying): ")
    ]
    assert len(retried) == 1 and retried[0].endswith(
        f"HTTP 503 from GET {api.url}/ctx/{spec['run_id'][4:]}.tar.zst"
    )
    assert "ran" in lines and not any("X-Amz-Signature" in m for m in lines)
    downloads = [c for c in api.calls if c["method"] == "GET"]
    assert len(downloads) == 2 and all(c["auth"] is None for c in downloads)  # presigned: no agent token


def test_unsafe_context_archive_fails_the_run(api: FakeApi, runner: Runner) -> None:
    spec = spec_for(api, ["echo", "never"], {"../escape.txt": "x"})
    runner.start(spec)
    body = api.wait_exit(spec["run_id"])
    assert body["exit_code"] == 1 and body["reason"].startswith("context download failed:")
    assert not (runner.settings.runs_dir / spec["run_id"] / "escape.txt").exists()


def test_log_shipping_retries_and_keeps_order(api: FakeApi, runner: Runner) -> None:
    api.fail["logs"] = 2
    api.fail["exit"] = 2
    spec = spec_for(api, ["python3", "main.py"], {"main.py": PRINT_LINES})
    runner.start(spec)
    assert api.wait_exit(spec["run_id"])["exit_code"] == 0
    assert api.log_lines(spec["run_id"])[:300] == [f"line {i}" for i in range(300)]
    assert len(api.of("logs", spec["run_id"], ok=False)) >= len(api.of("logs", spec["run_id"])) + 2
    assert len(api.of("exit", spec["run_id"], ok=False)) == 3


def test_trial_environment_has_no_secrets(
    api: FakeApi, runner: Runner, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("STRATUS_AGENT_TOKEN", TOKEN)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("KEEP_ME", "kept")
    spec = spec_for(api, ["python3", "-c", "import os, json; print(json.dumps(dict(os.environ)))"])
    runner.start(spec)
    assert api.wait_exit(spec["run_id"])["exit_code"] == 0
    text = "\n".join(api.log_lines(spec["run_id"]))
    env = json.loads(api.log_lines(spec["run_id"])[0])
    assert TOKEN not in text and "aws-secret-value" not in text
    assert "STRATUS_AGENT_TOKEN" not in env and "AWS_ACCESS_KEY_ID" not in env
    assert env["KEEP_ME"] == "kept" and env["PYTHONUNBUFFERED"] == "1" and env["FROM_SPEC"] == "yes"
    assert env["STRATUS_RUN_TOKEN"] == "run-token-x" and env["STRATUS_RUN_ID"] == spec["run_id"]
    assert env["STRATUS_TRIAL_ID"] == str(spec["trial_id"]) and env["STRATUS_MASTER"] == api.url
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert TOKEN not in caplog.text
    assert TOKEN not in repr(runner.settings)


# ---- the loop -----------------------------------------------------------------------------------------


def test_duplicate_launches_start_one_process(api: FakeApi, agent_thread: Callable[..., Agent]) -> None:
    spec = spec_for(api, ["python3", "-c", "import time; print('once'); time.sleep(0.3)"])
    api.launch = [spec, spec]  # twice in one answer, and again in every answer
    api.repeat_launch = True
    agent = agent_thread()
    api.wait_exit(spec["run_id"])
    n = len(api.of("heartbeat"))
    api.wait_calls(lambda: len(api.of("heartbeat")) >= n + 5, what="more heartbeats after the exit")
    assert len(api.of("started", spec["run_id"])) == 1
    assert len(api.of("exit", spec["run_id"])) == 1
    assert api.log_lines(spec["run_id"]) == ["once"]
    assert agent.launch(spec) is None


def test_heartbeat_reports_running_and_wakes_when_a_run_exits(
    api: FakeApi, agent_thread: Callable[..., Agent]
) -> None:
    spec = spec_for(api, ["python3", "-c", "import time; time.sleep(0.5)"])
    api.launch = [spec]
    agent_thread(heartbeat_interval=0.3)
    api.wait_calls(
        lambda: any(c["body"]["running"] == [spec["run_id"]] for c in api.of("heartbeat")),
        what="a heartbeat listing the run",
    )
    beat = api.of("heartbeat")[0]
    assert beat["path"] == "/agents/agent-1/heartbeat"
    assert beat["body"] == {"pool": "default", "slots": 2, "running": []}
    api.wait_exit(spec["run_id"])
    # after the exit report the heartbeats no longer list the run (one already in flight while the exit
    # was reported may still list it: the agent read its runs before the process ended)
    with api.cond:
        exit_at = next(i for i, c in enumerate(api.calls) if c["kind"] == "exit")
    api.wait_calls(
        lambda: any(c["kind"] == "heartbeat" and c["body"]["running"] == [] for c in api.calls[exit_at:]),
        what="a heartbeat after the exit without the run",
    )
    with api.cond:
        later = [c["body"]["running"] for c in api.calls[exit_at:] if c["kind"] == "heartbeat"]
    assert later[-1] == [] and [] in later[:2]


def test_exit_wakes_the_loop_before_the_interval(api: FakeApi, agent_thread: Callable[..., Agent]) -> None:
    spec = spec_for(api, ["python3", "-c", "print('quick')"])
    api.launch = [spec]
    agent_thread(heartbeat_interval=60.0)  # without the wake-up the next beat is a minute away
    api.wait_exit(spec["run_id"])
    api.wait_calls(lambda: len(api.of("heartbeat")) >= 2, timeout=10, what="the wake-up heartbeat")
    assert api.of("heartbeat")[-1]["body"]["running"] == []


def test_kill_from_the_heartbeat_answer(api: FakeApi, agent_thread: Callable[..., Agent]) -> None:
    spec = spec_for(api, ["python3", "-c", "import time; print('ready', flush=True); time.sleep(60)"])
    api.launch = [spec]
    agent_thread()
    api.wait_log(spec["run_id"], "ready")
    with api.cond:
        api.kill = [spec["run_id"], "run-unknown"]
    assert api.wait_exit(spec["run_id"]) == {"exit_code": 143, "reason": "killed by signal SIGTERM"}


# A trial that waits for its stop file (the path the agent gives it) and exits 0 once it appears.
WAIT_FOR_STOP_FILE = """
import os, sys, time
marker = os.environ["STRATUS_PREEMPT_FILE"]
print("ready", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(marker):
    if time.monotonic() > deadline:
        sys.exit(5)
    time.sleep(0.05)
print("asked to stop", flush=True)
"""


def test_a_preempt_in_the_heartbeat_answer_reaches_the_process_through_its_stop_file(
    api: FakeApi, agent_thread: Callable[..., Agent]
) -> None:
    spec = spec_for(api, ["python3", "-c", WAIT_FOR_STOP_FILE])
    api.launch = [spec]
    agent_thread()
    api.wait_log(spec["run_id"], "ready")
    with api.cond:
        api.preempt = [spec["run_id"], "run-unknown"]
    assert api.wait_exit(spec["run_id"]) == {"exit_code": 0, "reason": "exited with code 0"}
    api.wait_log(spec["run_id"], "asked to stop")


def test_agent_keeps_trying_when_the_api_fails(api: FakeApi, agent_thread: Callable[..., Agent]) -> None:
    api.fail["heartbeat"] = 3
    spec = spec_for(api, ["true"])
    api.launch = [spec]
    agent_thread()
    assert api.wait_exit(spec["run_id"])["exit_code"] == 0
    assert len(api.of("heartbeat", ok=False)) >= 4


def test_agent_survives_an_api_that_is_not_there(settings: Settings) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    agent = Agent(replace(settings, api_url=f"http://127.0.0.1:{port}", request_timeout=2))
    try:
        assert agent.heartbeat_once() is False
        assert agent.heartbeat_once() is False
    finally:
        agent.request_stop()
        assert agent.run() == 0


def test_agent_stop_kills_runs_and_reports_agent_stopped(api: FakeApi, settings: Settings) -> None:
    spec = spec_for(api, ["python3", "-c", "import time; print('ready', flush=True); time.sleep(60)"])
    api.launch = [spec]
    agent = Agent(settings)
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    api.wait_log(spec["run_id"], "ready")
    agent.request_stop()
    t.join(20)
    assert not t.is_alive()
    # Requeued, not ended: the trial resumes elsewhere from its checkpoint.
    assert api.of("exit", spec["run_id"])[0]["body"] == {
        "exit_code": 143,
        "reason": "agent stopped",
        "requeue": True,
    }
    last_beat = api.of("heartbeat")[-1]["body"]
    assert last_beat["stopping"] is True and last_beat["slots"] == 0
    assert last_beat["running"] == [spec["run_id"]]


def test_an_agent_whose_api_stays_unreachable_ends_its_runs_and_stops(
    api: FakeApi, settings: Settings
) -> None:
    spec = spec_for(api, ["python3", "-c", "import time; print('ready', flush=True); time.sleep(60)"])
    api.launch = [spec]
    agent = Agent(replace(settings, give_up_after=1.0))
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    api.wait_log(spec["run_id"], "ready")
    record = settings.runs_dir / spec["run_id"] / "process.json"
    pgid = json.loads(record.read_text())["pgid"]
    with api.cond:
        api.fail["heartbeat"] = 1_000_000  # the stack is gone: every beat fails from now on
    t.join(30)
    assert not t.is_alive(), "the agent kept going without its API"
    wait_until(lambda: not pid_alive(pgid), 10, "the run's process to end")


def test_an_agent_whose_stack_was_killed_ends_its_runs_and_stops(api: FakeApi, tmp_path: Path) -> None:
    """`kill -9` of the embedded stack: the agent it started (`--parent-pid`) is reparented, notices it
    at its next beat, ends its run's process group and exits, with no one left to tell."""
    spec = spec_for(api, ["python3", "-c", "import time; print('ready', flush=True); time.sleep(60)"])
    api.launch = [spec]
    work = tmp_path / "w"
    stack = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, subprocess, sys, time\n"
            "agent = subprocess.Popen([sys.executable, '-m', 'stratus.harness.agent', '--api', sys.argv[1],"
            " '--agent-id', 'orphan', '--pool', 'p', '--work-dir', sys.argv[2], '--heartbeat-interval', '0.1',"
            " '--kill-grace', '1', '--parent-pid', str(os.getpid())])\n"
            "print(agent.pid, flush=True)\n"
            "time.sleep(120)\n",
            api.url,
            str(work),
        ],
        cwd=REPO,
        env={**os.environ, "STRATUS_AGENT_TOKEN": TOKEN, "CUDA_VISIBLE_DEVICES": ""},
        stdout=subprocess.PIPE,
    )
    assert stack.stdout is not None
    agent_pid = int(stack.stdout.readline())
    try:
        api.wait_log(spec["run_id"], "ready")
        pgid = json.loads((work / "runs" / spec["run_id"] / "process.json").read_text())["pgid"]
        stack.kill()
        stack.wait()
        wait_until(lambda: not pid_alive(agent_pid), 20, "the orphaned agent to stop")
        wait_until(lambda: not pid_alive(pgid), 10, "its run's process to end")
    finally:
        for pid in (agent_pid,):
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


FORGER = """
import os
print("[rank=7] forged prefix", flush=True)
print('{"r": 7, "m": "forged record"}', flush=True)
print("frame in my env:", "STRATUS_LOG_FRAME" in os.environ, flush=True)
"""


def test_ranks_come_only_from_the_launchers_framing(api: FakeApi, runner: Runner) -> None:
    under_launcher = spec_for(
        api, ["python3", "-m", "stratus.launchers.wrap_rank", "3", "--", "python3", "-c", FORGER]
    )
    alone = spec_for(api, ["python3", "-c", FORGER])
    runner.start(under_launcher)
    runner.start(alone)
    api.wait_exit(under_launcher["run_id"])
    api.wait_exit(alone["run_id"])

    def lines(spec: dict[str, Any]) -> list[tuple[str, int | None]]:
        return [
            (line["message"], line["rank"])
            for c in api.of("logs", spec["run_id"])
            for line in c["body"]["lines"]
            if "forged" in line["message"] or "frame" in line["message"]
        ]

    # Under a launcher: every line is the worker's real rank, whatever it printed; the frame is not in
    # the worker's environment.
    assert lines(under_launcher) == [
        ("[rank=3] [rank=7] forged prefix", 3),
        ('[rank=3] {"r": 7, "m": "forged record"}', 3),
        ("[rank=3] frame in my env: False", 3),
    ]
    # Alone (no launcher), nothing it prints claims a rank.
    assert [(m, r) for m, r in lines(alone) if "forged" in m] == [
        ("[rank=7] forged prefix", None),
        ('{"r": 7, "m": "forged record"}', None),
    ]


def test_gpus_are_assigned_from_free_devices(api: FakeApi, settings: Settings) -> None:
    agent = Agent(replace(settings, gpus=("0", "1", "2"), slots=3))
    show = [
        "python3",
        "-c",
        "import os, time; print('cvd=' + os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
        "time.sleep(float(os.environ['HOLD']))",
    ]
    a = spec_for(api, show, slots=2, environment={"HOLD": "60", "CUDA_VISIBLE_DEVICES": "7"})
    b = spec_for(api, show, slots=1, environment={"HOLD": "0"})
    c = spec_for(api, show, slots=1, environment={"HOLD": "0"})
    try:
        run_a = agent.launch(a)
        assert run_a is not None
        agent.launch(b)
        api.wait_exit(b["run_id"])
        wait_until(lambda: agent.get_run(b["run_id"]) is None, 5, "run b to be forgotten")
        agent.launch(c)
        api.wait_exit(c["run_id"])
        api.wait_log(a["run_id"], "cvd=")
        assert api.log_lines(a["run_id"]) == ["cvd=0,1"]
        assert api.log_lines(b["run_id"]) == ["cvd=2"]
        assert api.log_lines(c["run_id"]) == ["cvd=2"]  # freed by b, handed out again
    finally:
        agent.request_stop()
        agent.run()


# ---- GPU detection (a fake nvidia-smi) and `python -m stratus.harness.agent` ----------------------------------


def test_detect_gpus(tmp_path: Path) -> None:
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ("2", "3")
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == ()
    assert detect_gpus({"PATH": str(tmp_path)}) == ()  # no nvidia-smi
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-a)'\necho 'GPU 1: NVIDIA H100 (UUID: GPU-b)'\n"
    )
    smi.chmod(0o755)
    assert detect_gpus({"PATH": str(tmp_path)}) == ("0", "1")


def test_the_local_agent_offers_a_slot_per_gpu_unless_told(tmp_path: Path) -> None:
    """`det deploy local up` without --slots: one slot per GPU the agent would hand out, 2 without GPUs."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-a)'\n")
    smi.chmod(0o755)
    assert default_slots({"PATH": str(tmp_path)}) == 1
    assert default_slots({"CUDA_VISIBLE_DEVICES": "0,1,2"}) == 3
    assert default_slots({"PATH": str(tmp_path / "none")}) == DEFAULT_SLOTS == 2


def test_python_m_harness_agent_stops_on_sigterm(api: FakeApi, tmp_path: Path) -> None:
    # no context (context_url null): an empty context folder
    spec = spec_for(
        api, ["python3", "-c", "import time; print('ready', flush=True); time.sleep(60)"], context_url=None
    )
    api.launch = [spec]
    env = {**os.environ, "STRATUS_AGENT_TOKEN": TOKEN, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stratus.harness.agent",
            "--api",
            api.url,
            "--agent-id",
            "cli-agent",
            "--pool",
            "p",
            "--work-dir",
            str(tmp_path / "w"),
            "--heartbeat-interval",
            "0.1",
            "--kill-grace",
            "2",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        api.wait_log(spec["run_id"], "ready")
        beat = api.of("heartbeat")[0]
        assert beat["path"] == "/agents/cli-agent/heartbeat" and beat["auth"] == f"Bearer {TOKEN}"
        assert beat["body"]["slots"] == 1
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out.decode()
    assert api.of("exit", spec["run_id"])[0]["body"] == {
        "exit_code": 143,
        "reason": "agent stopped",
        "requeue": True,
    }
    assert TOKEN.encode() not in out


PEEK = """
import os
agent = int(os.environ["AGENT_PID"])
environ = open(f"/proc/{agent}/environ", "rb").read()
print("credential in the agent's environment:", os.environ["CREDENTIAL"].encode() in environ, flush=True)
try:
    open(f"/proc/{agent}/mem", "rb")
    print("agent memory: readable", flush=True)
except OSError as e:
    print("agent memory:", type(e).__name__, flush=True)
"""


def test_a_trial_cannot_read_its_agents_credential(api: FakeApi, tmp_path: Path) -> None:
    """The credential reaches the agent in a file it deletes, never in an environment block; and the
    agent's memory is out of its trials' reach (`stratus.contract.hardening`)."""
    credential = "agent.peeker.0123456789abcdef"
    token_file = tmp_path / "credential"
    token_file.write_text(credential)
    env = {k: v for k, v in os.environ.items() if k != "STRATUS_AGENT_TOKEN"}
    argv = [
        sys.executable,
        "-m",
        "stratus.harness.agent",
        "--api",
        api.url,
        "--agent-id",
        "peeker",
        "--pool",
        "p",
    ]
    proc = subprocess.Popen(
        [
            *argv,
            "--work-dir",
            str(tmp_path / "w"),
            "--token-file",
            str(token_file),
            "--heartbeat-interval",
            "0.1",
        ],
        cwd=REPO,
        env={**env, "CUDA_VISIBLE_DEVICES": ""},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        spec = spec_for(
            api, ["python3", "-c", PEEK], environment={"AGENT_PID": str(proc.pid), "CREDENTIAL": credential}
        )
        with api.cond:
            api.launch = [spec]
        api.wait_exit(spec["run_id"])
        assert api.of("heartbeat")[0]["auth"] == f"Bearer {credential}"
        assert not token_file.exists()
        assert api.log_lines(spec["run_id"]) == [
            "credential in the agent's environment: False",
            "agent memory: PermissionError",
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


HOLDER = """
import os, pathlib, time
from stratus.contract.run_token import run_token
mine = run_token()
pathlib.Path(os.environ["MEET"], "holder.pid").write_text(str(os.getpid()))
print("holder has its token:", mine == "run-token-" + "holder", flush=True)
time.sleep(60)
"""
THIEF = """
import os, pathlib, time
from stratus.contract.run_token import RunTokenError, ask, run_token
meet = pathlib.Path(os.environ["MEET"], "holder.pid")
while not meet.exists():
    time.sleep(0.05)
holder = int(meet.read_text())
environ = open(f"/proc/{holder}/environ", "rb").read()
print("other's token in its environment:", b"run-token-holder" in environ, flush=True)
try:
    ask(os.environ["STRATUS_AGENT_SOCKET"], os.environ["HOLDER_RUN"], wait_s=0)
    print("agent gave me the other's token", flush=True)
except RunTokenError as e:
    print("agent refused:", "is not a process of run" in str(e), flush=True)
print("my own token:", run_token() == "run-token-" + "thief", flush=True)
"""


def test_a_trial_gets_only_its_own_run_token(
    api: FakeApi, agent_thread: Callable[..., Agent], tmp_path: Path
) -> None:
    """Run tokens reach a run's processes from the agent, by session (`stratus.contract.run_token`): in no
    environment block, and never to another run's process on the same machine."""
    holder = spec_for(api, ["python3", "-c", HOLDER])
    holder["environment"].update({"STRATUS_RUN_TOKEN": "run-token-holder", "MEET": str(tmp_path)})
    thief = spec_for(api, ["python3", "-c", THIEF])
    thief["environment"].update(
        {"STRATUS_RUN_TOKEN": "run-token-thief", "MEET": str(tmp_path), "HOLDER_RUN": holder["run_id"]}
    )
    for spec in (holder, thief):
        spec["environment"]["STRATUS_RUN_ID"] = spec["run_id"]
    api.launch = [holder, thief]
    agent = agent_thread()
    api.wait_exit(thief["run_id"], timeout=30)
    api.wait_log(holder["run_id"], "holder has its token")
    assert api.log_lines(holder["run_id"]) == ["holder has its token: True"]
    assert api.log_lines(thief["run_id"]) == [
        "other's token in its environment: False",
        "agent refused: True",
        "my own token: True",
    ]
    agent.kill(holder["run_id"])
