"""The agent draining (`Agent.drain`): in-process agents against the fake control plane
(`stratus.harness.agent.testing.FakeApi`), and real ``python -m stratus.harness.agent --aws`` processes against the fake
metadata service (`infra.local.fake_imds`), whose spot notice or SIGTERM sends a real ``harness.init()`` trial
to checkpoint and back to the queue. Every wait is on a condition with a deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from infra.local.fake_imds import FakeImds
from stratus.harness.agent._agent import Agent
from stratus.harness.agent._aws import ImdsClient, SpotWatcher
from stratus.harness.agent._settings import Settings
from stratus.harness.agent._spawn import PREEMPT_MARKER
from stratus.harness.agent.testing import TOKEN, FakeApi, spec_for

REPO = Path(__file__).resolve().parents[2]

# A plain process that exits 0 once its stop file (STRATUS_PREEMPT_FILE) appears.
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

IGNORES_STOP_FILE = "import time; print('ready', flush=True); time.sleep(60)"

# A real trial: trains until asked to stop, then checkpoints and exits.
TRIAL = """
import time
from stratus import harness

with harness.init() as core:
    print("ready", flush=True)
    steps = 0
    while not core.preempt.should_preempt():
        steps += 1
        time.sleep(0.02)
    with core.checkpoint.store_path({"steps_completed": steps}) as (path, storage_id):
        (path / "state.txt").write_text(str(steps))
    print("checkpointed", storage_id, flush=True)
"""


@pytest.fixture
def agent_thread(settings: Settings) -> Iterator[Callable[..., tuple[Agent, threading.Thread]]]:
    started: list[tuple[Agent, threading.Thread]] = []

    def start(**changes: Any) -> tuple[Agent, threading.Thread]:
        agent = Agent(replace(settings, **changes))
        t = threading.Thread(target=agent.run, daemon=True)
        t.start()
        started.append((agent, t))
        return agent, t

    yield start
    for agent, t in started:
        agent.request_stop()
        t.join(20)
        assert not t.is_alive(), "the agent did not stop"


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    fake = FakeImds().start()
    yield fake
    fake.stop()


def _draining_beats(api: FakeApi) -> list[dict[str, Any]]:
    return [c["body"] for c in api.of("heartbeat") if c["body"].get("draining")]


# ---- Agent.drain, in process ----------------------------------------------------------------------------


def test_a_drain_preempts_every_run_requeues_its_exit_and_stops_the_agent(
    api: FakeApi, settings: Settings, agent_thread: Callable[..., tuple[Agent, threading.Thread]]
) -> None:
    specs = [spec_for(api, ["python3", "-c", WAIT_FOR_STOP_FILE]) for _ in range(2)]
    api.launch = list(specs)
    agent, t = agent_thread()
    for spec in specs:
        api.wait_log(spec["run_id"], "ready")
    assert _draining_beats(api) == []

    agent.drain(time.monotonic() + 60, "test")
    agent.drain(time.monotonic() + 90, "test again")  # idempotent: a later deadline changes nothing

    api.wait_calls(lambda: bool(_draining_beats(api)), what="a heartbeat that says draining")
    for spec in specs:
        assert api.wait_exit(spec["run_id"]) == {
            "exit_code": 0,
            "reason": "exited with code 0",
            "requeue": True,
        }
        api.wait_log(spec["run_id"], "asked to stop")
        assert (settings.runs_dir / spec["run_id"] / PREEMPT_MARKER).exists()
    t.join(20)
    assert not t.is_alive(), "the drained agent did not stop"
    last = api.of("heartbeat")[-1]["body"]
    assert last == {"pool": "default", "slots": 0, "running": [], "stopping": True, "draining": True}
    assert agent.draining


def test_a_run_that_ignores_the_drain_is_killed_at_the_deadline_less_the_kill_grace(
    api: FakeApi, agent_thread: Callable[..., tuple[Agent, threading.Thread]]
) -> None:
    spec = spec_for(api, ["python3", "-c", IGNORES_STOP_FILE])
    api.launch = [spec]
    agent, t = agent_thread(kill_grace=1.0)
    api.wait_log(spec["run_id"], "ready")
    agent.drain(time.monotonic() + 1.5, "test")  # half a second to checkpoint, then the kill grace
    assert api.wait_exit(spec["run_id"]) == {"exit_code": 143, "reason": "agent stopped", "requeue": True}
    t.join(20)
    assert not t.is_alive()
    assert api.of("heartbeat")[-1]["body"]["stopping"] is True


def test_a_run_the_control_plane_kills_while_draining_is_not_requeued(
    api: FakeApi, agent_thread: Callable[..., tuple[Agent, threading.Thread]]
) -> None:
    spec = spec_for(api, ["python3", "-c", IGNORES_STOP_FILE])
    api.launch = [spec]
    agent, _ = agent_thread()
    api.wait_log(spec["run_id"], "ready")
    agent.drain(time.monotonic() + 60, "test")
    api.wait_calls(lambda: bool(_draining_beats(api)), what="a heartbeat that says draining")
    with api.cond:
        api.kill = [spec["run_id"]]  # the user killed the trial: it ends, it does not come back
    assert api.wait_exit(spec["run_id"]) == {"exit_code": 143, "reason": "killed by signal SIGTERM"}


def test_a_launch_that_arrives_while_draining_is_requeued_unstarted(
    api: FakeApi, agent_thread: Callable[..., tuple[Agent, threading.Thread]]
) -> None:
    holder = spec_for(api, ["python3", "-c", IGNORES_STOP_FILE])
    api.launch = [holder]
    agent, _ = agent_thread()
    api.wait_log(holder["run_id"], "ready")
    agent.drain(time.monotonic() + 60, "test")
    api.wait_calls(lambda: bool(_draining_beats(api)), what="a heartbeat that says draining")

    late = spec_for(api, ["python3", "-c", "print('never')"])
    with api.cond:
        api.launch = [late]
    assert api.wait_exit(late["run_id"]) == {
        "exit_code": 0,
        "reason": "agent draining: not started",
        "requeue": True,
    }
    assert api.of("started", late["run_id"]) == [] and api.log_lines(late["run_id"]) == []
    assert agent.running_ids() == [holder["run_id"]]


def test_the_spot_watcher_drains_the_agent(
    api: FakeApi, imds: FakeImds, agent_thread: Callable[..., tuple[Agent, threading.Thread]]
) -> None:
    imds.add("i-0thread")
    spec = spec_for(api, ["python3", "-c", WAIT_FOR_STOP_FILE])
    api.launch = [spec]
    agent, t = agent_thread()
    api.wait_log(spec["run_id"], "ready")
    client = ImdsClient(imds.url_for("i-0thread"))
    watcher = SpotWatcher(client, agent.drain, interval=0.05)
    watcher.start()
    try:
        imds.interrupt("i-0thread", at=datetime.now(UTC) + timedelta(seconds=60))
        assert api.wait_exit(spec["run_id"])["requeue"] is True
        t.join(20)
        assert not t.is_alive()
    finally:
        watcher.stop()
        client.close()
    assert _draining_beats(api)


# ---- python -m stratus.harness.agent --aws ----------------------------------------------------------------------


def _start_agent(api: FakeApi, imds_url: str, work: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stratus.harness.agent",
            "--api",
            api.url,
            "--pool",
            "p",
            "--work-dir",
            str(work),
            "--aws",
            "--imds-url",
            imds_url,
            "--spot-poll-interval",
            "0.2",
            "--heartbeat-interval",
            "0.1",
            "--kill-grace",
            "2",
        ],
        cwd=REPO,
        env={**os.environ, "STRATUS_AGENT_TOKEN": TOKEN, "CUDA_VISIBLE_DEVICES": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _assert_checkpointed_and_requeued(api: FakeApi, spec: dict[str, Any]) -> None:
    body = api.wait_exit(spec["run_id"], timeout=60)
    assert body == {"exit_code": 0, "reason": "exited with code 0", "requeue": True}
    api.wait_log(spec["run_id"], "checkpointed")
    # The checkpoint was stored (files PUT, then registered) before the exit was reported.
    with api.cond:
        kinds = [c["kind"] for c in api.calls]
    assert kinds.index("trial_checkpoints") < kinds.index("exit")
    registered = api.of("trial_checkpoints")[0]["body"]
    assert registered["metadata"]["steps_completed"] > 0
    uuid = registered["uuid"]
    assert api.objects[f"/s3/{uuid}/state.txt"] == str(registered["metadata"]["steps_completed"]).encode()
    assert json.loads(api.objects[f"/s3/{uuid}/metadata.json"])["steps_completed"] > 0


def test_a_spot_notice_checkpoints_the_trial_requeues_it_and_the_agent_exits(
    api: FakeApi, imds: FakeImds, tmp_path: Path
) -> None:
    imds.add("i-0spot", life_cycle="spot")
    spec = spec_for(api, ["python3", "trial.py"], {"trial.py": TRIAL})
    api.launch = [spec]
    proc = _start_agent(api, imds.url_for("i-0spot"), tmp_path / "w")
    try:
        api.wait_log(spec["run_id"], "ready", timeout=60)
        beat = api.of("heartbeat")[0]
        assert beat["path"] == "/agents/i-0spot/heartbeat" and "draining" not in beat["body"]

        end = datetime.now(UTC) + timedelta(seconds=20)
        imds.interrupt("i-0spot", at=end)

        api.wait_calls(lambda: bool(_draining_beats(api)), what="a heartbeat that says draining")
        _assert_checkpointed_and_requeued(api, spec)
        assert (tmp_path / "w" / "runs" / spec["run_id"] / PREEMPT_MARKER).exists()
        # gone before the instance is: wait for the exit no longer than the notice gave
        out, _ = proc.communicate(timeout=max(1.0, (end - datetime.now(UTC)).total_seconds()))
    finally:
        _stop(proc)
    assert proc.returncode == 0, out.decode()
    assert api.of("heartbeat")[-1]["body"]["stopping"] is True
    assert b"spot interruption: the instance is to terminate" in out
    assert b"i-0spot (spot)" in out
    assert imds.counts[("i-0spot", "PUT latest/api/token", 200)] >= 1
    assert not any(status == 401 for (_, _, status) in imds.counts)


def test_sigterm_in_aws_mode_drains(api: FakeApi, imds: FakeImds, tmp_path: Path) -> None:
    imds.add("i-0term", life_cycle="on-demand")
    spec = spec_for(api, ["python3", "trial.py"], {"trial.py": TRIAL})
    api.launch = [spec]
    proc = _start_agent(api, imds.url_for("i-0term"), tmp_path / "w")
    try:
        api.wait_log(spec["run_id"], "ready", timeout=60)
        proc.send_signal(signal.SIGTERM)
        _assert_checkpointed_and_requeued(api, spec)
        out, _ = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == 0, out.decode()
    assert _draining_beats(api)
    assert api.of("heartbeat")[-1]["body"]["stopping"] is True
