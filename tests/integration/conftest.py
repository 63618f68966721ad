"""The integration tier: real processes (bash, python3 from this venv, git, tar), loopback sockets and
torch.distributed gloo groups on this machine, with no AWS and no local stack. Every test here carries the
``integration`` marker (``pytest -m integration``); helpers shared by its modules live here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from stratus.harness.agent._settings import Settings
from stratus.harness.agent.testing import TOKEN, FakeApi

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WAIT_S = 60.0  # a guard against hangs, not a timing assertion


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


class Workdir:
    """A folder to run real processes in (the test's tmp_path), with what they need: the environment, the
    scripts, several launcher nodes at once. The `workdir` fixture gives one."""

    wait_s = WAIT_S

    def __init__(self, path: Path) -> None:
        self.path = path

    def env(self, **extra: str) -> dict[str, str]:
        """This environment minus the trial's variables, with this venv's python3 first and the repo
        importable."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATUS_", "RANK", "WORLD_SIZE"))}
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
        env.update(extra)
        return env

    def script(self, name: str, body: str) -> str:
        """Write the dedented ``body`` to ``path/name``; the name, for a command line run in the folder."""
        (self.path / name).write_text(textwrap.dedent(body))
        return name

    def launch(self, module: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """``python -m launchers.<module> *args`` in the folder, with `env(**env)`; what it printed."""
        return subprocess.run(
            [sys.executable, "-m", f"stratus.launchers.{module}", *args],
            cwd=self.path,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=self.wait_s,
            check=False,
        )

    def run_nodes(
        self,
        launcher: str,
        args: Sequence[str],
        node_envs: Sequence[Mapping[str, str]],
        timeout: float = WAIT_S,
    ) -> list[tuple[int, str, str]]:
        """``python -m launchers.<launcher> *args`` once per environment, all at once, in the folder (the
        nodes of one trial on this machine): ``(exit code, stdout, stderr)`` per node."""
        nodes = [
            subprocess.Popen(
                [sys.executable, "-m", f"stratus.launchers.{launcher}", *args],
                cwd=self.path,
                env=dict(env),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for env in node_envs
        ]
        try:
            outs = [node.communicate(timeout=timeout) for node in nodes]
        finally:
            for node in nodes:
                node.kill()
        return [(node.returncode, out, err) for node, (out, err) in zip(nodes, outs, strict=True)]


@pytest.fixture
def workdir(tmp_path: Path) -> Workdir:
    return Workdir(tmp_path)


@pytest.fixture
def wait_s() -> float:
    """How long a test waits for a process or a thread: a guard against hangs, not a timing assertion."""
    return WAIT_S


# ---- the fake agent API of test_agent.py and test_warm_start.py ----------------------------------------


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture
def settings(tmp_path: Path, api: FakeApi) -> Settings:
    return Settings(
        api_url=api.url,
        agent_id="agent-1",
        pool="default",
        slots=2,
        work_dir=tmp_path / "work",
        token=TOKEN,
        heartbeat_interval=0.05,
        kill_grace=1.0,
        log_flush_interval=0.1,
        log_flush_timeout=5.0,
        shutdown_timeout=5.0,
        request_timeout=5.0,
        retry_max_backoff=0.2,
    )
