"""Every queue message a sender writes is one the contract parses: the state machine's bodies (built from
JSONPath, so not by `to_body`) name exactly their class's fields, and the EventBridge sweep parses."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from chalicelib.workflow import WorkflowResources, compile_trial_workflow
from infra.aws.template import template
from stratus.contract import messages

RES = WorkflowResources(
    trials_table="t-trials",
    scheduler_queue_url="https://sqs.example/t-scheduler.fifo",
    launch_queue_url="https://sqs.example/t-launch",
    events_queue_url="https://sqs.example/t-trial-events",
)
QUEUE_TYPES = {
    RES.scheduler_queue_url: messages.SCHEDULER_TYPES,
    RES.launch_queue_url: messages.LAUNCH_TYPES,
    RES.events_queue_url: messages.EVENT_TYPES,
}


def _sent_bodies(states: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for name, state in states.items():
        parameters = state.get("Parameters") or {}
        if "MessageBody" in parameters:
            yield name, parameters["QueueUrl"], parameters["MessageBody"]


def test_the_state_machine_sends_the_contracts_messages_to_their_queues() -> None:
    sent = list(_sent_bodies(compile_trial_workflow(RES)["States"]))
    assert {body["type"] for _, _, body in sent} == {
        "request",
        "launch",
        "release",
        "trial_exited",
        "trial_paused",
    }
    for name, queue, body in sent:
        kind = messages.MessageType(body["type"])
        assert kind in QUEUE_TYPES[queue], f"{name} sends {kind} to {queue}"
        fields = {f.name for f in dataclasses.fields(messages.MESSAGE_CLASSES[kind])}
        required = {
            f.name
            for f in dataclasses.fields(messages.MESSAGE_CLASSES[kind])
            if f.default is dataclasses.MISSING
        }
        given = {key.removesuffix(".$") for key in body} - {"type"}
        assert required <= given <= fields, f"{name}: {sorted(given)} vs {sorted(fields)}"


def test_the_sweep_rule_sends_a_sweep() -> None:
    rule = template()["Resources"]["SweepRule"]["Properties"]
    (target,) = rule["Targets"]
    body = target["InputTransformer"]["InputTemplate"].replace("<time>", "2026-11-22T13:00:00Z")
    every_pool = messages.Sweep("*", at="2026-11-22T13:00:00Z")
    assert messages.parse_scheduler(json.loads(body)) == every_pool
