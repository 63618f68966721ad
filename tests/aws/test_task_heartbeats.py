"""The workflow's task-token waits on the real state machine in moto: a wait that gets no heartbeat
(a lost message, a consumer that was down) times out into NotLaunched and the trial errors with the
reason, instead of waiting a year; and a heartbeat from the adapter keeps a wait alive."""

from __future__ import annotations

import json
import time

import pytest

from chalicelib.domain.records import Trial
from chalicelib.domain.states import TrialState
from chalicelib.workflow import WorkflowResources, compile_trial_workflow

pytestmark = pytest.mark.aws


def _short_heartbeat_machine(stack, seconds: int) -> str:
    """A second state machine of the stack's resources whose waits time out after ``seconds``. The wait
    for slots gets a heartbeat here too (the product's has none: a queued request is never beaten, see
    `chalicelib.workflow`), so that a test can reach the timeout without granting slots first: both
    waits end the same way, through NotLaunched."""
    sfn = stack.client("stepfunctions")
    role = stack.client("iam").get_role(RoleName=f"{stack.names.stack}-states")["Role"]["Arn"]
    definition = compile_trial_workflow(
        WorkflowResources(
            trials_table=stack.names.table("trials"),
            scheduler_queue_url=stack.env["STRATUS_SCHEDULER_QUEUE_URL"],
            launch_queue_url=stack.env["STRATUS_LAUNCH_QUEUE_URL"],
            events_queue_url=stack.env["STRATUS_EVENTS_QUEUE_URL"],
            task_heartbeat_s=seconds,
        )
    )
    definition["States"]["RequestSlots"]["HeartbeatSeconds"] = seconds
    return str(
        sfn.create_state_machine(
            name=f"{stack.names.stack}-short", definition=json.dumps(definition), roleArn=role
        )["stateMachineArn"]
    )


def test_a_slot_request_nobody_answers_or_beats_times_out_and_the_trial_errors_with_the_reason(stack):
    machine = _short_heartbeat_machine(stack, seconds=2)
    stack.ports.trials.create(Trial(id=901, experiment_id=1, state=TrialState.QUEUED))
    sfn = stack.client("stepfunctions")
    payload = {"trial_id": 901, "experiment_id": 1, "pool": "default", "slots": 1, "priority": 42}
    execution = sfn.start_execution(
        stateMachineArn=machine, name="trial-901-0", input=json.dumps({**payload, "max_restarts": 0})
    )["executionArn"]
    deadline = time.monotonic() + 60
    while stack.ports.trials.get(901).state != TrialState.ERROR:
        assert time.monotonic() < deadline, "the wait did not time out within 60 s"
        time.sleep(0.2)
    trial = stack.ports.trials.get(901)
    assert trial.state == TrialState.ERROR and trial.attempts == 1
    events = sfn.get_execution_history(executionArn=execution)["events"]
    errors = [
        e.get("taskTimedOutEventDetails", {}).get("error") for e in events if e["type"] == "TaskTimedOut"
    ]
    # AWS names it States.HeartbeatTimeout; moto's interpreter reports the same timeout as States.Timeout.
    assert errors in (["States.HeartbeatTimeout"], ["States.Timeout"])


def test_the_adapter_reports_a_wait_that_is_gone(stack):
    assert stack.ports.workflows.heartbeat("not-a-token-of-any-execution") is False
