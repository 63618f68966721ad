"""The real state machine in moto, driven through the services the way the pump and an agent drive it:
slot request → grant → launch → exit → complete, restart or fail."""

from __future__ import annotations

import json
import time

import pytest

from chalicelib.services import experiments, runs, scheduler, searching
from contract import messages

pytestmark = pytest.mark.aws

SHA = "b" * 64
CONFIG = {
    "name": "lifecycle",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def _consumers(stack):
    p = stack.ports
    return {
        stack.env["STRATUS_SCHEDULER_QUEUE_URL"]: lambda body: scheduler.handle_message(
            p, messages.parse_scheduler(body)
        ),
        stack.env["STRATUS_LAUNCH_QUEUE_URL"]: lambda body: runs.handle_launch(
            p, messages.parse_launch(body)
        ),
        stack.env["STRATUS_EVENTS_QUEUE_URL"]: lambda body: searching.handle_event(
            p, messages.parse_event(body)
        ),
    }


def pump_until(stack, condition, timeout=30.0):
    """Deliver queued messages to their consumers until `condition()` holds."""
    sqs = stack.client("sqs")
    deadline = time.monotonic() + timeout
    consumers = _consumers(stack)
    while time.monotonic() < deadline:
        if condition():
            return
        for url, consume in consumers.items():
            for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
                "Messages", []
            ):
                consume(json.loads(message["Body"]))
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    raise AssertionError(f"condition not met within {timeout} s")


def _submit(stack, **overrides):
    stack.client("s3").put_object(Bucket=stack.names.bucket, Key=f"contexts/{SHA}.tar.zst", Body=b"ctx")
    return experiments.create(stack.ports, {**CONFIG, **overrides}, SHA).experiment


def _launch(stack, agent="agent-1"):
    p = stack.ports
    runs.heartbeat(p, agent, "default", 1, [])
    pump_until(stack, lambda: any(r["state"] == "LAUNCHING" for r in p.runs.for_agent(agent)))
    specs = runs.heartbeat(p, agent, "default", 1, [])["launch"]
    assert len(specs) == 1
    return specs[0]


def _execution_status(stack, trial_id):
    sfn = stack.client("stepfunctions")
    arn = (
        stack.env["STRATUS_STATE_MACHINE_ARN"].replace(":stateMachine:", ":execution:")
        + f":trial-{trial_id}-0"
    )
    return sfn.describe_execution(executionArn=arn)["status"]


def test_a_trial_that_exits_zero_completes_the_experiment(stack):
    p = stack.ports
    experiment = _submit(stack)
    spec = _launch(stack)
    assert spec["entrypoint"] == ["python3", "train.py"]
    assert spec["environment"]["STRATUS_TRIAL_ID"] == str(spec["trial_id"])
    assert "STRATUS_AGENT_TOKEN" not in spec["environment"]
    assert p.trials.get(spec["trial_id"])["state"] == "PULLING"
    runs.started(p, "agent-1", spec["run_id"], pid=123)
    assert p.trials.get(spec["trial_id"])["state"] == "RUNNING"
    line = {"timestamp": int(time.time() * 1000), "message": "hello", "rank": None}
    assert runs.store_logs(p, spec["trial_id"], spec["run_id"], 1, [line])
    assert not runs.store_logs(p, spec["trial_id"], spec["run_id"], 1, [line])  # a retried batch
    assert [x["message"] for x in p.logs.get(spec["trial_id"], 100, None, None)[0]] == ["hello"]
    runs.exited(p, "agent-1", spec["run_id"], 0, "exited with code 0")
    runs.exited(p, "agent-1", spec["run_id"], 0, "exited with code 0")  # a retried report is harmless
    pump_until(stack, lambda: p.experiments.get(experiment["id"])["state"] == "COMPLETED")
    trial = p.trials.get(spec["trial_id"])
    assert trial["state"] == "COMPLETED" and trial["attempts"] == 1 and trial["end_time"]
    pump_until(stack, lambda: _execution_status(stack, trial["id"]) == "SUCCEEDED")
    assert p.runs.allocated("default") == []  # slots given back


def test_a_failing_trial_is_restarted_then_errors(stack):
    p = stack.ports
    experiment = _submit(stack, max_restarts=1)
    first = _launch(stack)
    runs.exited(p, "agent-1", first["run_id"], 3, "exited with code 3")
    second = _launch(stack)
    assert second["run_id"] == f"{first['trial_id']}.2"
    runs.exited(p, "agent-1", second["run_id"], 3, "exited with code 3")
    pump_until(stack, lambda: p.experiments.get(experiment["id"])["state"] == "ERROR")
    trial = p.trials.get(first["trial_id"])
    assert trial["state"] == "ERROR" and trial["attempts"] == 2 and trial["exit_code"] == 3
    pump_until(stack, lambda: _execution_status(stack, trial["id"]) == "FAILED")


def test_no_agent_means_the_trial_waits_in_the_queue(stack):
    p = stack.ports
    _submit(stack)
    pump_until(stack, lambda: len(p.runs.pending("default")) == 1)
    assert scheduler.schedule_pool(p, "default") == []
    runs.heartbeat(p, "late-agent", "default", 2, [])
    pump_until(stack, lambda: p.runs.pending("default") == [])
    assert [r["agent_id"] for r in p.runs.allocated("default")] == ["late-agent"]
