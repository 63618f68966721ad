"""Issue 12, warm start: the agent forks runs from a warm interpreter (torch imported) where that is safe,
and starts them cold, saying why, where it is not. Real processes: the warm interpreter, its forked
children, and the agent's runs against the fake API of `test_agent`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from stratus.contract.launch import LaunchSpec
from stratus.harness.agent._run import Run
from stratus.harness.agent._warm import cold_reason, plain_python
from stratus.harness.agent._warm_client import WarmProcess, WarmServer
from stratus.harness.agent.testing import FakeApi, Runner, pid_alive, spec_for, wait_until

PY = sys.executable


@pytest.fixture(scope="module")
def warm() -> Iterator[WarmServer]:
    server = WarmServer()
    assert server.start(), "the warm interpreter did not start"
    yield server
    server.stop()


def _spawn(warm: WarmServer, tmp_path: Path, code: str, *args: str, **env: str) -> WarmProcess:
    (tmp_path / "main.py").write_text(textwrap.dedent(code))
    started = warm.spawn(["python3", "main.py", *args], tmp_path, {**warm.env, **env})
    assert isinstance(started, WarmProcess), started
    return started


def _output(proc: WarmProcess) -> tuple[str, int]:
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    return out, proc.wait()


# ---- which rule decides -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["python3", "train.py", "--lr", "1"], (None, "train.py", ["train.py", "--lr", "1"])),
        (["python3", "-u", "-m", "pkg.main", "x"], ("pkg.main", None, ["pkg.main", "x"])),
        ([PY, "train.py"], (None, "train.py", ["train.py"])),
        (["python3", "-c", "print(1)"], None),
        (["python3", "-X", "dev", "train.py"], None),
        (["bash", "run.sh"], None),
        (["/usr/bin/env", "python3", "train.py"], None),
        ([], None),
    ],
)
def test_only_this_interpreter_running_a_script_or_module_is_plain(argv, parsed) -> None:
    assert plain_python(argv, PY) == parsed


def test_each_rule_names_why_a_run_starts_cold(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    warm_env = {"PATH": "/bin", "PYTHONPATH": "/compat", "OMP_NUM_THREADS": "2"}
    env = {**warm_env, "STRATUS_TRIAL_ID": "1", "CUDA_VISIBLE_DEVICES": "1"}
    assert (
        cold_reason(["python3", "train.py"], tmp_path, env, warm_env, PY) is None
    )  # CUDA_VISIBLE_DEVICES may differ

    assert "not `python3 SCRIPT`" in str(cold_reason(["sh", "-c", "x"], tmp_path, env, warm_env, PY))
    assert "launcher" in str(
        cold_reason(["python3", "-m", "stratus.launchers.torch_distributed"], tmp_path, env, warm_env, PY)
    )
    assert "not a file" in str(cold_reason(["python3", "missing.py"], tmp_path, env, warm_env, PY))
    for name, value in (("PYTHONPATH", "/mine"), ("OMP_NUM_THREADS", "8"), ("LD_PRELOAD", "x.so")):
        reason = cold_reason(["python3", "train.py"], tmp_path, {**env, name: value}, warm_env, PY)
        assert reason is not None and reason.startswith(f"{name} differs")
    (tmp_path / "startup-hook.sh").write_text("pip install x\n")
    assert "startup-hook.sh" in str(cold_reason(["python3", "train.py"], tmp_path, env, warm_env, PY))


# ---- the forked process is what a cold one would be ------------------------------------------------


def test_a_warm_child_runs_as_python3_would_with_torch_already_imported(
    warm: WarmServer, tmp_path: Path
) -> None:
    proc = _spawn(
        warm,
        tmp_path,
        """
        import atexit, os, sys
        print("preloaded", "torch" in sys.modules)
        print("argv", sys.argv[1:], "path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
        print("cwd", os.getcwd(), "env", os.environ["ONLY_HERE"])
        print("own session", os.getsid(0) == os.getpid() == os.getpgid(0))
        print("oops", file=sys.stderr)
        atexit.register(lambda: print("atexit ran", flush=True))
        sys.exit(3)
        """,
        "a",
        "b",
        ONLY_HERE="yes",
    )
    out, code = _output(proc)
    assert code == 3
    assert "preloaded True" in out and "argv ['a', 'b'] path0 True" in out
    assert f"cwd {tmp_path} env yes" in out and "own session True" in out
    assert "oops" in out and out.rstrip().endswith("atexit ran")


def test_an_uncaught_exception_and_a_signal_end_it_as_they_end_python(
    warm: WarmServer, tmp_path: Path
) -> None:
    out, code = _output(_spawn(warm, tmp_path, "raise ValueError('boom')"))
    assert code == 1 and "ValueError: boom" in out and "Traceback" in out

    proc = _spawn(warm, tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(60)")
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    os.killpg(proc.pid, signal.SIGTERM)  # the agent signals the run's group
    assert proc.wait() == -signal.SIGTERM


def test_children_draw_their_own_random_state(warm: WarmServer, tmp_path: Path) -> None:
    code = "import random, numpy\nprint(random.random(), numpy.random.random())"
    first, _ = _output(_spawn(warm, tmp_path, code))
    second, _ = _output(_spawn(warm, tmp_path, code))
    a, b = first.split(), second.split()
    assert a[0] != b[0] and a[1] != b[1]


def test_a_warm_interpreter_that_started_threads_refuses_to_fork(tmp_path: Path) -> None:
    (tmp_path / "threads_at_import.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    )
    server = WarmServer(
        base={**os.environ, "PYTHONPATH": str(tmp_path), "STRATUS_WARM_IMPORTS": "threads_at_import"}
    )
    try:
        assert server.start()
        (tmp_path / "main.py").write_text("print(1)\n")
        answer = server.spawn(["python3", "main.py"], tmp_path, dict(server.env))
        assert isinstance(answer, str) and "started threads" in answer
    finally:
        server.stop()


# ---- the agent's runs ---------------------------------------------------------------------------------


def test_the_agent_forks_a_plain_run_warm_and_starts_a_hooked_one_cold(
    api: FakeApi,
    settings,
    warm: WarmServer,
) -> None:
    runner = Runner(settings)
    try:
        plain = spec_for(
            api,
            ["python3", "main.py"],
            {"main.py": "import sys\nprint('torch' in sys.modules)\nsys.exit(4)\n"},
        )
        run = Run(LaunchSpec.from_json(plain), settings, runner.client, give_up=runner.give_up, warm=warm)
        runner.runs.append(run)
        run.start()
        assert api.wait_exit(plain["run_id"]) == {"exit_code": 4, "reason": "exited with code 4"}
        lines = api.log_lines(plain["run_id"])
        assert any("warm start: pid" in line for line in lines) and "True" in lines

        hooked = spec_for(
            api, ["python3", "main.py"], {"main.py": "print('ran')\n", "startup-hook.sh": "export HOOKED=1\n"}
        )
        run = Run(
            LaunchSpec.from_json(hooked), replace(settings), runner.client, give_up=runner.give_up, warm=warm
        )
        runner.runs.append(run)
        run.start()
        assert api.wait_exit(hooked["run_id"]) == {"exit_code": 0, "reason": "exited with code 0"}
        lines = api.log_lines(hooked["run_id"])
        assert (
            any("cold start: the context has a startup-hook.sh" in line for line in lines) and "ran" in lines
        )
    finally:
        runner.close()


def test_the_warm_interpreter_ends_with_an_agent_killed_outright(tmp_path: Path) -> None:
    """An agent killed with SIGKILL cannot stop its warm interpreter: the kernel ends it (PDEATHSIG)."""
    agent = subprocess.Popen(
        [
            PY,
            "-c",
            "import os, sys, time\n"
            "from stratus.harness.agent._warm_client import WarmServer\n"
            "server = WarmServer(base={**os.environ, 'STRATUS_WARM_IMPORTS': 'json'})\n"
            "assert server.start()\n"
            "print(server._proc.pid, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        warm_pid = int(agent.stdout.readline())
        assert pid_alive(warm_pid)
    finally:
        agent.kill()
        agent.wait()
    wait_until(lambda: not pid_alive(warm_pid), 20, "the warm interpreter to end with its agent")
