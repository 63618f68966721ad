"""A machine that dies mid-trial: on a local pool of two agents, the agent running a trial is killed
with its processes (as a crashed instance would take them). Its heartbeats stop, the control plane ends
the run, and the trial restarts on the other agent and completes instead of waiting forever."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from det.deploy.background import BackgroundStack

pytestmark = pytest.mark.e2e

# The first run waits forever (as a trial on a dead machine would, for a report that never comes);
# the second completes.
SCRIPT = """
import os, sys, time
print("attempt", os.environ["STRATUS_RUN_ID"], flush=True)
if os.environ["STRATUS_RUN_ID"].endswith(".1"):
    time.sleep(600)
"""
AGENT_TIMEOUT_S = "8"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    stack = BackgroundStack(
        tmp_path_factory.mktemp("lost-agent"),
        slots=1,
        agents=2,
        env={"STRATUS_AGENT_TIMEOUT_S": AGENT_TIMEOUT_S},
    )
    try:
        yield stack.state
    finally:
        stack.stop()


def test_a_trial_on_a_dead_agent_restarts_on_a_live_one(
    pool, tmp_path: Path, det_runner, wait_for, run_record, agent_pid
):
    det = det_runner(pool["api_url"])
    (tmp_path / "wait.py").write_text(SCRIPT)
    (tmp_path / "wait.yaml").write_text(
        "name: lost-agent\n"
        "entrypoint: python3 wait.py\n"
        "searcher: {name: single, metric: loss, max_length: 1}\n"
        "max_restarts: 1\n"
    )
    created = det("experiment", "create", str(tmp_path / "wait.yaml"), str(tmp_path))
    assert created.code == 0, created.out + created.err
    experiment_id = det.created_experiment_id(created.out)
    trial_id = experiment_id  # the first trial of a fresh stack's first experiment
    first = wait_for(
        lambda: (r := run_record(pool["moto_url"], f"{trial_id}.1")) and r["state"] == "RUNNING" and r,
        timeout=60,
        what="the first run to start",
    )
    wait_for(
        lambda: f"attempt {trial_id}.1" in det.read("trial", "logs", str(trial_id)).out,
        timeout=60,
        what="the first run's output",
    )
    # The machine dies: the agent and the run's process group, at once, with no exit report.
    os.kill(agent_pid(pool["api_url"], first["agent_id"]), signal.SIGKILL)
    os.killpg(int(first["pid"]), signal.SIGKILL)

    ended = wait_for(
        lambda: (r := run_record(pool["moto_url"], f"{trial_id}.1")) and r["state"] == "EXITED" and r,
        timeout=60,
        what="the control plane to end the lost agent's run",
    )
    assert ended["reason"].startswith(f"lost agent {first['agent_id']}: no heartbeat for 8 s")
    wait_for(lambda: run_record(pool["moto_url"], f"{trial_id}.2"), timeout=60, what="the restart")
    wait_for(
        lambda: (
            det.read("experiment", "describe", str(experiment_id), "--json").out.count('"COMPLETED"') >= 2
        ),
        timeout=120,
        what="the experiment to complete",
    )
    second = run_record(pool["moto_url"], f"{trial_id}.2")
    assert second is not None and second["agent_id"] != first["agent_id"]
    logs = det("trial", "logs", str(trial_id)).out
    assert f"attempt {trial_id}.1" in logs and f"attempt {trial_id}.2" in logs
