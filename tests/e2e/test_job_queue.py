"""The job queue end to end on a local pool of one one-slot agent (a plain `det deploy local up`: the
priority scheduler with preemption on).

- A higher-priority experiment submitted to the full pool preempts the running lower-priority trial: it
  checkpoints, exits and is requeued; the high one runs to completion, then the low one resumes from its
  checkpoint and completes with every step once and no restart used. `det job list` shows the order.
- A queued trial is killed without ever starting, and the running one is killed too.
- A trial bigger than the pool can ever hold is refused at submission, naming the pool and its size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory, one_slot_agents) -> Iterator[dict[str, str]]:
    with one_slot_agents(tmp_path_factory.mktemp("job-queue"), agents=1) as stack:
        yield stack


@pytest.fixture
def det(pool, det_runner) -> Any:
    return det_runner(pool["api_url"])


def _jobs(det: Any) -> list[dict]:
    listed = det.read("job", "list", "--json")
    assert listed.code == 0, listed.err
    return list(json.loads(listed.out)["jobs"])


def test_a_higher_priority_experiment_preempts_a_running_one_which_resumes_after_it(
    det, probe, tmp_path: Path, wait_for, run_record, pool
):
    low = probe.submit(tmp_path, "low", "resources: {priority: 60}")
    low_trial = wait_for(
        lambda: (t := probe.trial(low))["state"] == "RUNNING" and t, timeout=120, what="the low trial to run"
    )
    wait_for(lambda: probe.reported_steps(low_trial["id"]) >= 5, timeout=60, what="a few low steps")

    high = probe.submit(tmp_path, "high", "resources: {priority: 10}")

    # The low trial checkpoints and goes back to the queue; the high one gets the slot.
    high_trial = wait_for(
        lambda: (t := probe.trial(high))["state"] == "RUNNING" and t,
        timeout=120,
        what="the high trial to run",
    )
    first = run_record(pool["moto_url"], f"{low_trial['id']}.1")
    assert first is not None and first["state"] == "EXITED" and int(first["exit_code"]) == 0
    assert "preempted at step" in det("trial", "logs", str(low_trial["id"])).out
    jobs = wait_for(
        lambda: (j := _jobs(det)) and len(j) == 2 and j, timeout=60, what="both jobs in the queue"
    )
    assert [(j["id"], j["status"]) for j in jobs] == [(str(high), "SCHEDULED"), (str(low), "QUEUED")]
    assert [j["priority"] for j in jobs] == [10, 60]

    for experiment_id in (high, low):
        wait_for(
            lambda e=experiment_id: probe.state(e) == "COMPLETED",
            timeout=240,
            what=f"experiment {experiment_id} to complete",
        )
    high_done = run_record(pool["moto_url"], f"{high_trial['id']}.1")
    resumed = run_record(pool["moto_url"], f"{low_trial['id']}.2")
    assert high_done is not None and resumed is not None
    assert resumed["started_at"] > high_done["exited_at"]  # it waited for the higher-priority job
    done = probe.trial(low)
    assert done["restarts"] == 0
    steps = [s for s, _ in probe.metrics(low_trial["id"])["training"]]
    assert steps == list(range(1, probe.steps + 1))  # none lost, none repeated


def test_a_queued_trial_is_killed_without_starting_and_a_running_one_is_killed(
    det, probe, tmp_path: Path, wait_for, run_record, pool
):
    running = probe.submit(tmp_path, "running")
    wait_for(lambda: probe.trial(running)["state"] == "RUNNING", timeout=120, what="a trial to run")
    queued = probe.submit(tmp_path, "queued")
    queued_trial = wait_for(
        lambda: (t := probe.trial(queued))["state"] == "QUEUED" and t, timeout=60, what="a queued trial"
    )

    assert det("trial", "kill", str(queued_trial["id"])).code == 0
    wait_for(
        lambda: probe.state(queued) == "COMPLETED" or probe.trial(queued)["state"] == "CANCELED",
        timeout=60,
        what="the queued trial to end",
    )
    assert probe.trial(queued)["state"] == "CANCELED"
    never_ran = run_record(pool["moto_url"], f"{queued_trial['id']}.1")
    assert never_ran is None or never_ran.get("started_at") is None  # it never started

    assert det("experiment", "kill", str(running)).code == 0
    wait_for(lambda: probe.state(running) == "CANCELED", timeout=60, what="the killed experiment to end")
    assert probe.trial(running)["state"] == "CANCELED"
    assert _jobs(det) == []  # nothing holds or waits for the slot


def test_a_trial_bigger_than_the_pool_is_refused_at_submission(det, probe, tmp_path: Path):
    (tmp_path / "steps.py").write_text("print('never runs')\n")
    (tmp_path / "huge.yaml").write_text(
        "name: huge\n"
        "entrypoint: python3 steps.py\n"
        "searcher: {name: single, metric: loss, max_length: 1}\n"
        "resources: {slots_per_trial: 4}\n"
    )
    refused = det("experiment", "create", str(tmp_path / "huge.yaml"), str(tmp_path))
    assert refused.code != 0
    assert "slots_per_trial 4" in refused.err and "can ever offer (1 slots)" in refused.err
    assert "Created experiment" not in refused.out
