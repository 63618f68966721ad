"""The trial state machine is a plain dict; its ASL is golden-tested (regenerate with
STRATUS_UPDATE_GOLDEN=1 after a deliberate change) and checked against the transition tables."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from chalicelib.domain.states import TRIAL_TRANSITIONS, TrialState, allowed_sources
from chalicelib.workflow import WorkflowResources, compile_trial_workflow

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "trial_workflow.json"
RES = WorkflowResources(
    trials_table="stratus-trials",
    scheduler_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/stratus-scheduler.fifo",
    launch_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/stratus-launch",
    events_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/stratus-trial-events",
)


def test_matches_the_golden_file():
    compiled = json.dumps(compile_trial_workflow(RES), indent=2, sort_keys=True) + "\n"
    if os.environ.get("STRATUS_UPDATE_GOLDEN"):
        GOLDEN.write_text(compiled)
    assert compiled == GOLDEN.read_text()


def test_every_transition_target_exists_and_every_state_is_reachable():
    states = compile_trial_workflow(RES)["States"]
    targets = {"Enqueue"}
    for state in states.values():
        targets.update(t for t in (state.get("Next"), state.get("Default")) if t)
        targets.update(c["Next"] for c in state.get("Choices", []))
        targets.update(c["Next"] for c in state.get("Catch", []))
    assert targets == set(states)


def test_state_writes_are_guarded_by_the_transition_table():
    states = compile_trial_workflow(RES)["States"]
    for name, target in (
        ("Enqueue", TrialState.QUEUED),
        ("Complete", TrialState.COMPLETED),
        ("Errored", TrialState.ERROR),
        ("Pause", TrialState.PAUSED),
    ):
        params = states[name]["Parameters"]
        placeholders = re.findall(r":s\d+", params["ConditionExpression"])
        sources = sorted(params["ExpressionAttributeValues"][p]["S"] for p in placeholders)
        assert sources == sorted(str(s) for s in allowed_sources(TRIAL_TRANSITIONS, target))
        assert params["ExpressionAttributeValues"][":target"] == {"S": str(target)}


def test_waits_use_task_tokens_and_no_lambda():
    states = compile_trial_workflow(RES)["States"]
    resources = {s.get("Resource") for s in states.values() if s["Type"] == "Task"}
    assert "arn:aws:states:::sqs:sendMessage.waitForTaskToken" in resources
    assert not any("lambda" in r for r in resources)
    assert states["RequestSlots"]["Parameters"]["MessageBody"]["token.$"] == "$$.Task.Token"
    assert states["Launch"]["Parameters"]["MessageBody"]["token.$"] == "$$.Task.Token"


def test_the_task_token_waits_last_as_long_as_step_functions_allows():
    # The States Language's default TimeoutSeconds is 60 s (moto enforces it): a trial that trained for
    # more than a minute failed with States.Timeout on the local stack until the waits said otherwise.
    states = compile_trial_workflow(RES)["States"]
    waits = [s for s in states.values() if s.get("Resource", "").endswith(".waitForTaskToken")]
    assert len(waits) == 2
    for wait in waits:
        assert wait["TimeoutSeconds"] == 99_999_999
    # The launch wait has a heartbeat (the passes beat the runs holding slots: as many as the pool has
    # slots); the wait for slots has none, so that no pass has to touch every queued request.
    assert states["Launch"]["HeartbeatSeconds"] < states["Launch"]["TimeoutSeconds"]
    assert "HeartbeatSeconds" not in states["RequestSlots"]


def test_every_task_retries_service_errors_and_catches_what_is_left():
    states = compile_trial_workflow(RES)["States"]
    tasks = {name: s for name, s in states.items() if s["Type"] == "Task"}
    for name, task in tasks.items():
        assert task.get("Catch"), f"{name} has no Catch"
        if task["Resource"].endswith(".waitForTaskToken"):
            assert "Retry" not in task, name  # a resend could not be told from a late first delivery
            continue
        first, rest = task["Retry"][0], task["Retry"][1]
        # A failed condition is an answer (the trial moved on), never retried.
        assert first == {"ErrorEquals": ["DynamoDB.ConditionalCheckFailedException"], "MaxAttempts": 0}
        assert rest["ErrorEquals"] == ["States.ALL"] and rest["MaxAttempts"] > 0 and rest["BackoffRate"] > 1
