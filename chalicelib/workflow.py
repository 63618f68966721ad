"""The trial-run state machine, compiled to Amazon States Language as a plain dict.

One Standard execution drives one trial from the queue to its end:

    Enqueue ─► RequestSlots ─► Launch ─► Release ─► Exited? ─0─► Complete ─► NotifyCompleted
                                                             ─0, paused by the searcher─► Pause
       ▲          (token to the      (token to the                 │
       │           scheduler queue)   launch queue, answered       └─≠0─► CountRestart ─► Errored ─► NotifyErrored
       └──────── restart ◄──────────  by the agent's exit)                    │
                                                                              └─ restarts left: back to Enqueue
    Exited? ─canceled (the user canceled or killed the trial)─► Cancel ─► NotifyCanceled
    Exited? ─requeue (preempted by the scheduler, or its agent stopped)─► Enqueue (not a restart)
    Exited? ─≠0─► CountRestart (restarts < max_restarts: count one, Enqueue; else Errored)

Waiting is done with `sqs:sendMessage.waitForTaskToken`, never with polling loops (an execution's
history is capped at 25,000 events). State writes use the DynamoDB integration directly, with
conditions built from the transition tables in `chalicelib.domain.states`, so a trial that was
canceled meanwhile is never resurrected. No Lambda invoke is used: moto cannot run Lambda code without
Docker, and direct integrations are cheaper anyway.

Input: {"trial_id", "experiment_id", "pool", "slots", "priority", "max_restarts"}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chalicelib.domain.states import TRIAL_TRANSITIONS, TrialState, allowed_sources
from stratus.contract.messages import MessageType

#: The launch wait's HeartbeatSeconds; the passes beat every `TASK_BEAT_INTERVAL_S` (the pool's sweep runs
#: every minute), so a wait times out only when nothing schedules the pool for 10 minutes. The wait for
#: slots has none: beating every queued request would make each pass's work grow with the queue (100,000
#: queued requests would need 800 heartbeats a second); its request is kept in DynamoDB from the moment
#: the scheduler takes the message, and a message the scheduler cannot take lands in the dead-letter
#: queue, where it is seen and redriven, instead of being lost.
TASK_HEARTBEAT_S = 600
TASK_BEAT_INTERVAL_S = 120
#: The task-token waits' TimeoutSeconds: as long as Step Functions allows. A trial may wait in the queue
#: or train for weeks; the heartbeat is what ends a wait nobody keeps alive. Without it the States
#: Language's default applies, 60 s, which moto enforces: every run longer than a minute failed.
TASK_TIMEOUT_S = 99_999_999


@dataclass(frozen=True)
class WorkflowResources:
    trials_table: str
    scheduler_queue_url: str
    launch_queue_url: str
    events_queue_url: str
    #: How long the launch wait (for the run's exit) may go without a heartbeat: the
    #: scheduling passes send them (`services.scheduler`); a lost message or a dead consumer then ends
    #: the wait (NotLaunched: the run ends and the trial restarts or errors) instead of a year's wait.
    task_heartbeat_s: int = TASK_HEARTBEAT_S
    #: The ARN partition of the service integrations (`aws`, `aws-cn`, `aws-us-gov`); the template passes
    #: `${AWS::Partition}`, which CloudFormation fills in.
    partition: str = "aws"


_TRIAL_KEY = {"id": {"N.$": "States.Format('{}', $.trial_id)"}}

#: SQS message attributes of a slot request: what it is for, readable without parsing its body
#: (a consumer's filter, a trace in the console).
_QUEUE_ATTRIBUTES = {
    "priority": {"DataType": "Number", "StringValue.$": "States.Format('{}', $.priority)"},
    "pool": {"DataType": "String", "StringValue.$": "$.pool"},
    "experiment": {"DataType": "Number", "StringValue.$": "States.Format('{}', $.experiment_id)"},
}


def _set_trial_state(
    table: str, target: TrialState, extra: str = "", extra_values: dict[str, Any] | None = None
) -> dict[str, Any]:
    sources = allowed_sources(TRIAL_TRANSITIONS, target)
    values: dict[str, Any] = {
        ":target": {"S": str(target)},
        ":one": {"N": "1"},
        ":zero": {"N": "0"},
    }
    placeholders = []
    for i, source in enumerate(sources):
        values[f":s{i}"] = {"S": str(source)}
        placeholders.append(f":s{i}")
    values.update(extra_values or {})
    update = "SET #state = :target, #version = if_not_exists(#version, :zero) + :one" + extra
    return {
        "TableName": table,
        "Key": _TRIAL_KEY,
        "UpdateExpression": update,
        "ConditionExpression": f"#state IN ({', '.join(placeholders)})",
        "ExpressionAttributeNames": {"#state": "state", "#version": "version"},
        "ExpressionAttributeValues": values,
    }


def _notify(
    queue_url: str, state: TrialState, next_state: str, kind: MessageType = MessageType.TRIAL_EXITED
) -> dict[str, Any]:
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::sqs:sendMessage",
        "Parameters": {
            "QueueUrl": queue_url,
            "MessageBody": {
                "type": kind.value,
                "event_id.$": "States.Format('" + kind.value.split("_")[1] + "-{}', $.run.run_id)",
                "trial_id.$": "$.trial_id",
                "experiment_id.$": "$.experiment_id",
                "state": str(state),
            },
        },
        "ResultPath": None,
        "Next": next_state,
        "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "NotifyFailed"}],
    }


#: A write whose condition failed is an answer (the trial moved on meanwhile), never retried.
_CONDITION_FAILED = "DynamoDB.ConditionalCheckFailedException"
#: Throttling and service errors of a DynamoDB write or an SQS send: retried with backoff and jitter,
#: for about a minute and a half in all, before the state's Catch takes over.
_RETRY = [
    {"ErrorEquals": [_CONDITION_FAILED], "MaxAttempts": 0},
    {
        "ErrorEquals": ["States.ALL"],
        "IntervalSeconds": 1,
        "BackoffRate": 2.0,
        "MaxAttempts": 6,
        "MaxDelaySeconds": 30,
        "JitterStrategy": "FULL",
    },
]


def _with_retries(states: dict[str, Any]) -> dict[str, Any]:
    """Every Task retries throttling and service errors, except the two task-token waits: a retried
    send could not be told apart from a late delivery of the first (their failures go through
    NotLaunched: the run ends and the trial restarts)."""
    for state in states.values():
        if state["Type"] == "Task" and not state["Resource"].endswith(".waitForTaskToken"):
            state["Retry"] = _RETRY
    return states


def compile_trial_workflow(res: WorkflowResources) -> dict[str, Any]:
    """The trial's state machine (Amazon States Language) over the stack's resources."""
    definition = _compile(res)
    for state in definition["States"].values():
        if state["Type"] == "Task":
            state["Resource"] = state["Resource"].replace("arn:aws:", f"arn:{res.partition}:", 1)
    return definition


def _compile(res: WorkflowResources) -> dict[str, Any]:
    enqueue = _set_trial_state(res.trials_table, TrialState.QUEUED, " ADD attempts :one")
    enqueue["ReturnValues"] = "UPDATED_NEW"
    ended = {":t": {"S.$": "$$.State.EnteredTime"}}
    complete = _set_trial_state(res.trials_table, TrialState.COMPLETED, ", end_time = :t", ended)
    errored = _set_trial_state(res.trials_table, TrialState.ERROR, ", end_time = :t", ended)
    paused = _set_trial_state(res.trials_table, TrialState.PAUSED)
    canceled = _set_trial_state(res.trials_table, TrialState.CANCELED, ", end_time = :t", ended)
    condition_failed = ["DynamoDB.ConditionalCheckFailedException"]
    return {
        "Comment": "Stratus trial run: queue, launch, wait for exit, complete, restart or fail.",
        "StartAt": "Enqueue",
        "States": _with_retries(
            {
                "Enqueue": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::dynamodb:updateItem",
                    "Parameters": enqueue,
                    "ResultSelector": {"attempt.$": "States.StringToJson($.Attributes.attempts.N)"},
                    "ResultPath": "$.run",
                    "Next": "NameRun",
                    # The trial is no longer runnable (canceled, already ended): nothing to do.
                    "Catch": [
                        {"ErrorEquals": condition_failed, "ResultPath": "$.error", "Next": "Abandoned"}
                    ],
                },
                "NameRun": {
                    "Type": "Pass",
                    "Parameters": {
                        "attempt.$": "$.run.attempt",
                        "run_id.$": "States.Format('{}.{}', $.trial_id, $.run.attempt)",
                    },
                    "ResultPath": "$.run",
                    "Next": "RequestSlots",
                },
                "RequestSlots": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "TimeoutSeconds": TASK_TIMEOUT_S,
                    "Parameters": {
                        "QueueUrl": res.scheduler_queue_url,
                        "MessageGroupId.$": "$.pool",
                        "MessageDeduplicationId.$": "States.Format('{}-request', $.run.run_id)",
                        "MessageAttributes": _QUEUE_ATTRIBUTES,
                        "MessageBody": {
                            "type": MessageType.REQUEST.value,
                            "token.$": "$$.Task.Token",
                            "run_id.$": "$.run.run_id",
                            "trial_id.$": "$.trial_id",
                            "experiment_id.$": "$.experiment_id",
                            "pool.$": "$.pool",
                            "slots.$": "$.slots",
                            "priority.$": "$.priority",
                        },
                    },
                    "ResultPath": "$.assignment",
                    "Next": "Launch",
                    "Catch": [
                        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "NotLaunched"}
                    ],
                },
                "Launch": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "HeartbeatSeconds": res.task_heartbeat_s,
                    "TimeoutSeconds": TASK_TIMEOUT_S,
                    "Parameters": {
                        "QueueUrl": res.launch_queue_url,
                        "MessageBody": {
                            "type": MessageType.LAUNCH.value,
                            "token.$": "$$.Task.Token",
                            "run_id.$": "$.run.run_id",
                            "trial_id.$": "$.trial_id",
                            "experiment_id.$": "$.experiment_id",
                            "agent_id.$": "$.assignment.agent_id",
                        },
                    },
                    "ResultPath": "$.exit",
                    "Next": "Release",
                    "Catch": [
                        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "NotLaunched"}
                    ],
                },
                "NotLaunched": {
                    "Type": "Pass",
                    "Parameters": {"exit_code": -1, "reason.$": "$.error.Error", "paused": False},
                    "ResultPath": "$.exit",
                    "Next": "Release",
                },
                "Release": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::sqs:sendMessage",
                    "Parameters": {
                        "QueueUrl": res.scheduler_queue_url,
                        "MessageGroupId.$": "$.pool",
                        "MessageDeduplicationId.$": "States.Format('{}-release', $.run.run_id)",
                        "MessageAttributes": {"pool": _QUEUE_ATTRIBUTES["pool"]},
                        "MessageBody": {
                            "type": MessageType.RELEASE.value,
                            "run_id.$": "$.run.run_id",
                            "pool.$": "$.pool",
                        },
                    },
                    "ResultPath": None,
                    "Next": "Exited",
                    # The release only asks for a scheduling pass; the pool's sweep does it if this fails.
                    "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Exited"}],
                },
                "Exited": {
                    "Type": "Choice",
                    "Choices": [
                        # The trial was canceled or killed while it ran: it ends CANCELED, whatever the exit.
                        {
                            "And": [
                                {"Variable": "$.exit.canceled", "IsPresent": True},
                                {"Variable": "$.exit.canceled", "BooleanEquals": True},
                            ],
                            "Next": "Cancel",
                        },
                        # A clean exit the control plane asked for (the searcher paused the trial): it may
                        # be resumed later by a new execution, from its latest checkpoint.
                        {
                            "And": [
                                {"Variable": "$.exit.exit_code", "NumericEquals": 0},
                                {"Variable": "$.exit.paused", "IsPresent": True},
                                {"Variable": "$.exit.paused", "BooleanEquals": True},
                            ],
                            "Next": "Pause",
                        },
                        # Preempted to make room, or stopped by its agent (a scale-in, a spot reclaim): back
                        # to the queue, to resume from its latest checkpoint; not a restart.
                        {
                            "And": [
                                {"Variable": "$.exit.requeue", "IsPresent": True},
                                {"Variable": "$.exit.requeue", "BooleanEquals": True},
                            ],
                            "Next": "Enqueue",
                        },
                        {"Variable": "$.exit.exit_code", "NumericEquals": 0, "Next": "Complete"},
                    ],
                    "Default": "CountRestart",
                },
                "Pause": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::dynamodb:updateItem",
                    "Parameters": paused,
                    "ResultPath": None,
                    "Next": "NotifyPaused",
                    "Catch": [
                        {"ErrorEquals": condition_failed, "ResultPath": "$.error", "Next": "NotifyPaused"}
                    ],
                },
                # The searcher may have promoted (or closed) the trial while it was stopping: the consumer
                # of this event resumes (or closes) it.
                "NotifyPaused": _notify(
                    res.events_queue_url, TrialState.PAUSED, "Paused", kind=MessageType.TRIAL_PAUSED
                ),
                "Paused": {"Type": "Succeed"},
                # A failed run: restart if the trial has restarts left (counted on the trial, so resumes after
                # a pause and requeues after a preemption never use them up), else the trial errors.
                "CountRestart": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::dynamodb:updateItem",
                    "Parameters": {
                        "TableName": res.trials_table,
                        "Key": _TRIAL_KEY,
                        "UpdateExpression": "ADD restarts :one",
                        "ConditionExpression": "attribute_not_exists(restarts) OR restarts < :max",
                        "ExpressionAttributeValues": {
                            ":one": {"N": "1"},
                            ":max": {"N.$": "States.Format('{}', $.max_restarts)"},
                        },
                    },
                    "ResultPath": None,
                    "Next": "Enqueue",
                    "Catch": [{"ErrorEquals": condition_failed, "ResultPath": "$.error", "Next": "Errored"}],
                },
                "Complete": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::dynamodb:updateItem",
                    "Parameters": complete,
                    "ResultPath": None,
                    "Next": "NotifyCompleted",
                    "Catch": [
                        {"ErrorEquals": condition_failed, "ResultPath": "$.error", "Next": "NotifyCompleted"}
                    ],
                },
                "NotifyCompleted": _notify(res.events_queue_url, TrialState.COMPLETED, "Completed"),
                "Completed": {"Type": "Succeed"},
                "Errored": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::dynamodb:updateItem",
                    "Parameters": errored,
                    "ResultPath": None,
                    "Next": "NotifyErrored",
                    "Catch": [
                        {"ErrorEquals": condition_failed, "ResultPath": "$.error", "Next": "NotifyErrored"}
                    ],
                },
                "NotifyErrored": _notify(res.events_queue_url, TrialState.ERROR, "TrialErrored"),
                "TrialErrored": {
                    "Type": "Fail",
                    "Error": "TrialErrored",
                    "Cause": "the trial exited non-zero and has no restarts left",
                },
                "Cancel": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::dynamodb:updateItem",
                    "Parameters": canceled,
                    "ResultPath": None,
                    "Next": "NotifyCanceled",
                    "Catch": [
                        {"ErrorEquals": condition_failed, "ResultPath": "$.error", "Next": "NotifyCanceled"}
                    ],
                },
                "NotifyCanceled": _notify(res.events_queue_url, TrialState.CANCELED, "Canceled"),
                "Canceled": {"Type": "Succeed"},
                "Abandoned": {"Type": "Succeed"},
                # A searcher notification that could not be sent, even after its retries: the execution
                # fails naming it (a metric and an alarm watch for failed executions); the trial's record
                # already holds its end.
                "NotifyFailed": {
                    "Type": "Fail",
                    "Error": "NotifyFailed",
                    "Cause": "the trial's end could not be sent to the events queue after retries",
                },
            }
        ),
    }
