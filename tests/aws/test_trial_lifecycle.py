"""The real state machine in moto, driven through the services the way the pump and an agent drive it:
slot request → grant → launch → exit → complete, restart or fail."""

from __future__ import annotations

import hashlib
import time
import uuid as uuidlib

import httpx
import pytest

from chalicelib.domain.records import LogLine
from chalicelib.services import run_logs, runs, scheduler, trial_reports

pytestmark = pytest.mark.aws


def test_a_trial_that_exits_zero_completes_the_experiment(stack):
    p = stack.ports
    experiment = stack.submit_experiment()
    spec = stack.launch_on_agent()
    assert spec["entrypoint"] == ["python3", "train.py"]
    assert spec["environment"]["STRATUS_TRIAL_ID"] == str(spec["trial_id"])
    assert "STRATUS_AGENT_TOKEN" not in spec["environment"]
    assert p.trials.get(spec["trial_id"]).state == "PULLING"
    runs.started(p, "agent-1", spec["run_id"], pid=123)
    assert p.trials.get(spec["trial_id"]).state == "RUNNING"
    line = LogLine(int(time.time() * 1000), "hello")
    assert run_logs.store_logs(p, spec["trial_id"], spec["run_id"], 1, [line])
    assert not run_logs.store_logs(p, spec["trial_id"], spec["run_id"], 1, [line])  # a retried batch
    assert [x.message for x in p.logs.get(spec["trial_id"], 100, None, None)[0]] == ["hello"]
    runs.exited(p, "agent-1", spec["run_id"], 0, "exited with code 0")
    runs.exited(p, "agent-1", spec["run_id"], 0, "exited with code 0")  # a retried report is harmless
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "COMPLETED")
    trial = p.trials.get(spec["trial_id"])
    assert trial.state == "COMPLETED" and trial.attempts == 1 and trial.end_time
    stack.pump_until(lambda: stack.execution_status(trial.id) == "SUCCEEDED")
    assert p.runs.allocated("default") == []  # slots given back


def test_a_checkpoint_copies_an_earlier_ones_unchanged_file_in_s3(stack):
    p = stack.ports
    stack.submit_experiment()
    spec = stack.launch_on_agent()
    runs.started(p, "agent-1", spec["run_id"], pid=123)
    run = p.runs.get(spec["run_id"])
    first, second = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    urls = trial_reports.checkpoint_uploads(p, run, first, ["share/data.bin", "metadata.json"])["urls"]
    for name, body in (("share/data.bin", b"dataset"), ("metadata.json", b"{}")):
        httpx.put(urls[name], content=body, timeout=30).raise_for_status()
    trial_reports.report_checkpoint(p, run, first, 1, {"share/data.bin": 7, "metadata.json": 2}, {})

    answer = trial_reports.checkpoint_uploads(p, run, second, ["metadata.json"], {"share/data.bin": first})

    assert answer["copied"] == ["share/data.bin"] and list(answer["urls"]) == ["metadata.json"]
    key = answer["prefix"] + "share/data.bin"
    assert p.blobs.sha256_of(key) == (hashlib.sha256(b"dataset").hexdigest(), 7)


def test_a_failing_trial_is_restarted_then_errors(stack):
    p = stack.ports
    experiment = stack.submit_experiment(max_restarts=1)
    first = stack.launch_on_agent()
    runs.exited(p, "agent-1", first["run_id"], 3, "exited with code 3")
    second = stack.launch_on_agent()
    assert second["run_id"] == f"{first['trial_id']}.2"
    runs.exited(p, "agent-1", second["run_id"], 3, "exited with code 3")
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "ERROR")
    trial = p.trials.get(first["trial_id"])
    assert trial.state == "ERROR" and trial.attempts == 2 and trial.exit_code == 3
    stack.pump_until(lambda: stack.execution_status(trial.id) == "FAILED")


def test_no_agent_means_the_trial_waits_in_the_queue(stack):
    p = stack.ports
    stack.submit_experiment()
    stack.pump_until(lambda: len(p.runs.pending("default")) == 1)
    assert scheduler.schedule_pool(p, "default") == []
    runs.heartbeat(p, "late-agent", "default", 2, [])
    stack.pump_until(lambda: p.runs.pending("default") == [])
    assert [r.agent_id for r in p.runs.allocated("default")] == ["late-agent"]
