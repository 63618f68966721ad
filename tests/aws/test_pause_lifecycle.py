"""Pause, activate, preemption and an agent's stop through the real state machine in moto: a paused
trial's clean exit pauses it (not completes it), activate resumes it in a new execution from its
checkpoint, a requeued run goes back to the queue without using a restart, and slot requests carry
their priority, pool and experiment as SQS message attributes."""

from __future__ import annotations

import json
import time

import pytest

from chalicelib.services import pausing, runs, scheduler, trial_reports
from stratus.contract import messages

pytestmark = pytest.mark.aws

CHECKPOINT = "0b7c1c50-8e0e-4c8a-9d7e-2f1a3b4c5d6e"


def test_a_paused_trial_pauses_on_its_clean_exit_and_resumes_from_its_checkpoint(stack):
    p = stack.ports
    experiment = stack.submit_experiment()
    spec = stack.launch_on_agent()
    trial_id = spec["trial_id"]
    runs.started(p, "agent-1", spec["run_id"], pid=123)

    assert pausing.pause_experiment(p, experiment.id).state == "PAUSED"
    assert trial_reports.heartbeat(p, p.runs.get(spec["run_id"])) == {"preempt": True}
    p.trials.set_latest_checkpoint(trial_id, CHECKPOINT, 7)  # the trial's checkpoint before it exits
    runs.exited(p, "agent-1", spec["run_id"], 0, "exited with code 0")
    stack.pump_until(lambda: p.trials.get(trial_id).state == "PAUSED")
    stack.pump_until(lambda: stack.execution_status(trial_id) == "SUCCEEDED")
    assert p.runs.allocated("default") == []  # its slot is free
    assert p.experiments.get(experiment.id).state == "PAUSED"

    pausing.activate_experiment(p, experiment.id)
    resumed = stack.launch_on_agent()
    assert resumed["run_id"] == f"{trial_id}.2"
    assert resumed["environment"]["STRATUS_LATEST_CHECKPOINT"] == CHECKPOINT
    runs.started(p, "agent-1", resumed["run_id"], pid=124)
    runs.exited(p, "agent-1", resumed["run_id"], 0, "exited with code 0")
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "COMPLETED")
    assert p.trials.get(trial_id).restarts == 0


def test_requeued_runs_use_no_restart_and_failures_still_end_the_trial(stack):
    p = stack.ports
    experiment = stack.submit_experiment(max_restarts=1)
    first = stack.launch_on_agent()
    trial_id = first["trial_id"]
    # The agent stops (a scale-in): its run is SIGTERMed and requeued, whatever its exit code.
    runs.exited(p, "agent-1", first["run_id"], 143, "agent stopped", requeue=True)
    second = stack.launch_on_agent()
    # The scheduler preempts it for a higher-priority job: it checkpoints and exits 0.
    pausing.preempt_run(p, p.runs.get(second["run_id"]))
    runs.exited(p, "agent-1", second["run_id"], 0, "preempted")
    third = stack.launch_on_agent()
    assert p.trials.get(trial_id).restarts == 0
    runs.exited(p, "agent-1", third["run_id"], 3, "exited with code 3")  # a real failure: one restart
    fourth = stack.launch_on_agent()
    assert fourth["run_id"] == f"{trial_id}.4" and p.trials.get(trial_id).restarts == 1
    runs.exited(p, "agent-1", fourth["run_id"], 3, "exited with code 3")  # no restarts left
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "ERROR")
    trial = p.trials.get(trial_id)
    assert (trial.state, trial.attempts, trial.restarts) == ("ERROR", 4, 1)


def test_slot_requests_carry_priority_pool_and_experiment_as_message_attributes(stack):
    sqs = stack.client("sqs")
    url = stack.env["STRATUS_SCHEDULER_QUEUE_URL"]
    experiment = stack.submit_experiment(resources={"priority": 7})
    deadline = time.monotonic() + 30
    received: list[dict] = []
    while not received and time.monotonic() < deadline:
        received = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=1, MessageAttributeNames=["All"]
        ).get("Messages", [])
    assert received, "no slot request reached the scheduler queue"
    (message,) = received
    attributes = {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}
    assert attributes == {"priority": "7", "pool": "default", "experiment": str(experiment.id)}
    body = json.loads(message["Body"])
    assert body["type"] == "request" and body["priority"] == 7
    scheduler.handle_message(stack.ports, messages.parse_scheduler(body))
