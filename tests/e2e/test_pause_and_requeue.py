"""Pause, activate and an agent's stop, end to end on a local pool of two one-slot agents: the real CLI,
API, state machine, agents and trial processes.

- `det experiment pause` stops a running trial at its next check of `should_preempt()`: it checkpoints,
  exits and frees its slot (`det job list` shows the job gone); `det experiment activate` resumes it
  from its checkpoint, and it ends with exactly the metrics and weights of the same trial run
  uninterrupted beside it: no step lost, none repeated.
- `det agent disable` tells the agent's trial to checkpoint and exit (not a kill): it is requeued, resumes
  on the other agent and completes with every step once; `det agent enable` takes the agent back.
- An agent that is stopped (SIGTERM: a scale-in, a spot reclaim) SIGTERMs its trial, which checkpoints
  and exits 0: the trial is requeued (not completed), resumes on the other agent and completes, with no
  restart used.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory, one_slot_agents) -> Iterator[dict[str, str]]:
    with one_slot_agents(tmp_path_factory.mktemp("pause"), agents=2) as stack:
        yield stack


@pytest.fixture
def det(pool, det_runner) -> Any:
    return det_runner(pool["api_url"])


def test_a_paused_trial_frees_its_slot_and_resumes_to_exactly_the_uninterrupted_result(
    det, probe, tmp_path: Path, wait_for
):
    straight = probe.submit(tmp_path, "straight")
    paused = probe.submit(tmp_path, "paused")
    trial = wait_for(
        lambda: (t := probe.trial(paused))["state"] == "RUNNING" and t, timeout=120, what="the trial to run"
    )
    wait_for(lambda: probe.reported_steps(trial["id"]) >= 5, timeout=60, what="a few steps")

    result = det("experiment", "pause", str(paused))
    assert result.code == 0, result.err
    assert f"det experiment activate {paused}" in result.out
    wait_for(lambda: probe.trial(paused)["state"] == "PAUSED", timeout=60, what="the trial to pause")
    jobs = json.loads(det("job", "list", "--json").out)["jobs"]
    assert str(paused) not in [job["id"] for job in jobs]  # its slot is free
    stopped_at = probe.reported_steps(trial["id"])
    assert 5 <= stopped_at < probe.steps
    assert f"preempted at step {stopped_at}" in det("trial", "logs", str(trial["id"])).out

    assert det("experiment", "activate", str(paused)).code == 0
    for experiment_id in (paused, straight):
        wait_for(
            lambda e=experiment_id: det.describe_experiment(e)["experiment"]["state"] == "COMPLETED",
            timeout=180,
            what=f"experiment {experiment_id} to complete",
        )
    logs = det("trial", "logs", str(trial["id"])).out
    assert f"resumed at step {stopped_at}" in logs

    resumed, uninterrupted = probe.metrics(trial["id"]), probe.metrics(probe.trial(straight)["id"])
    assert [steps for steps, _ in resumed["training"]] == list(
        range(1, probe.steps + 1)
    )  # none lost or repeated
    assert resumed == uninterrupted  # every loss and every final weight, exactly
    described = probe.trial(paused)
    assert described["restarts"] == 0


def running_on_an_agent(probe, pool, folder: Path, name: str, wait_for, run_record) -> tuple[int, dict, dict]:
    """A steps experiment ``name`` running a few steps in: its id, its trial, its first run's record."""
    experiment_id = probe.submit(folder, name)
    trial = wait_for(
        lambda: (t := probe.trial(experiment_id))["state"] == "RUNNING" and t,
        timeout=120,
        what="the trial to run",
    )
    first_run = f"{trial['id']}.1"
    record = wait_for(
        lambda: (r := run_record(pool["moto_url"], first_run)) and r.get("agent_id") and r,
        timeout=30,
        what="the first run's agent",
    )
    wait_for(lambda: probe.reported_steps(trial["id"]) >= 5, timeout=60, what="a few steps")
    return experiment_id, trial, record


def completes_on_the_other_agent(
    det, probe, pool, experiment_id: int, trial: dict, first: dict, wait_for, run_record
) -> None:
    """The trial requeued (no restart used), resumed on the other agent and completed with every step once."""
    wait_for(
        lambda: det.describe_experiment(experiment_id)["experiment"]["state"] == "COMPLETED",
        timeout=180,
        what="the experiment to complete on the other agent",
    )
    second = run_record(pool["moto_url"], f"{trial['id']}.2")
    assert second is not None and second["agent_id"] != first["agent_id"]
    done = probe.trial(experiment_id)
    assert done["state"] == "COMPLETED" and done["restarts"] == 0
    training = probe.metrics(trial["id"])["training"]
    assert [steps for steps, _ in training] == list(range(1, probe.steps + 1))
    assert "resumed at step" in det("trial", "logs", str(trial["id"])).out


def test_a_disabled_agents_trial_checkpoints_and_resumes_on_another_without_losing_a_step(
    det, probe, pool, tmp_path: Path, wait_for, run_record
):
    """`det agent disable` (no --drain): where Determined kills the agent's tasks, ours checkpoint and move;
    the agent takes nothing new until `det agent enable`."""
    experiment_id, trial, record = running_on_an_agent(
        probe, pool, tmp_path, "agent-disable", wait_for, run_record
    )
    disabled = det("agent", "disable", record["agent_id"])
    assert disabled.code == 0, disabled.err
    assert f"run {trial['id']}.1 checkpoints and goes back to the queue" in disabled.err
    try:
        completes_on_the_other_agent(det, probe, pool, experiment_id, trial, record, wait_for, run_record)
        agents = json.loads(det.read("agent", "list", "--json").out)["agents"]
        assert [a["enabled"] for a in agents if a["id"] == record["agent_id"]] == [False]
    finally:
        enabled = det("agent", "enable", record["agent_id"])  # the next tests use both agents
    assert enabled.code == 0, enabled.err


def test_a_stopped_agent_requeues_its_trial_which_resumes_on_another_and_completes(
    det, probe, pool, tmp_path: Path, wait_for, run_record, agent_pid
):
    experiment_id, trial, record = running_on_an_agent(
        probe, pool, tmp_path, "agent-stop", wait_for, run_record
    )
    os.kill(agent_pid(pool["api_url"], record["agent_id"]), signal.SIGTERM)  # a scale-in
    completes_on_the_other_agent(det, probe, pool, experiment_id, trial, record, wait_for, run_record)


def test_a_request_the_remaining_agents_cannot_hold_waits_with_its_reason_and_blocks_nobody(
    det, probe, pool, tmp_path: Path, wait_for, agent_pid
):
    # A pool of two one-slot agents that has lost one (stopped, as above, or now): a two-slot trial
    # passes the submission check (the pool's shape has two slots) but the agents left cannot hold it.
    # It waits with its reason (the pool could grow back) and, preemption being on, a lower-priority
    # trial runs behind it (it could take that slot back by preemption, so it is not starved).
    # An agent that stopped without its last beat reaching the API keeps its slots in the list but is
    # not alive (no beat within the agent timeout): only live agents' slots count.
    def agents() -> list[dict]:
        return list(json.loads(det.read("agent", "list", "--json").out)["agents"])

    def live_agents() -> list[dict]:
        return [a for a in agents() if a["alive"] and a["slots"] > 0]

    # Run alone, on a stack just started, the second agent may not have beaten yet.
    wait_for(lambda: len(agents()) == 2, timeout=60, what="both agents to have registered")
    for agent in live_agents()[1:]:
        os.kill(agent_pid(pool["api_url"], agent["id"]), signal.SIGTERM)
    wait_for(
        lambda: sum(a["slots"] for a in live_agents()) == 1,
        timeout=90,
        what="one live slot left in the pool",
        seen=lambda: det("agent", "list").out,
    )
    big = probe.submit(tmp_path, "two-slots", "resources: {slots_per_trial: 2, priority: 1}")
    small = probe.submit(tmp_path, "one-slot")

    # The big one is first in the queue, yet the small one runs to completion behind it.
    wait_for(lambda: probe.state(small) == "COMPLETED", timeout=180, what="the small experiment")
    listed = det("job", "list")
    assert f"job {big} waits: needs 2 slots; the largest agent has 1" in listed.out
    assert probe.trial(big)["state"] == "QUEUED"
    assert det("experiment", "kill", str(big)).code == 0
    wait_for(lambda: probe.state(big) == "CANCELED", timeout=60, what="the big one to be killed")
