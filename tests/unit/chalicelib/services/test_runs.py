"""Runs on agents: launch, heartbeat, started, exited, logs; on the in-memory twin."""

from __future__ import annotations

import dataclasses

import pytest

from chalicelib.domain.records import LogLine
from chalicelib.errors import ForbiddenError, NotFoundError
from chalicelib.services import run_logs, runs, tokens, trial_reports


def test_a_launch_moves_the_run_to_its_agent_and_the_trial_to_pulling(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    run_id = flow.request_slots(trial_id)
    assert ports.workflows.answers[f"slots-{run_id}"] == {"agent_id": "agent-1", "num_nodes": 1}
    flow.launch(run_id)
    flow.launch(run_id)  # a redelivered launch message changes nothing
    run = ports.runs.get(run_id)
    assert (run.state, run.agent_id, run.launch_token) == ("LAUNCHING", "agent-1", f"launch-{run_id}")
    assert [held.held_id for held in ports.runs.for_agent("agent-1")] == [run_id]
    assert run.launched_at == ports.clock.now_iso()
    assert ports.trials.get(trial_id).state == "PULLING"


def test_the_launch_sets_the_backends_report_interval_unless_the_experiment_does(ports, flow):
    """Issue 12: how often a trial sends its reports is the backend's choice (30 s in AWS, where each send
    costs requests; 5 s on the local stack), unless the experiment's own environment says otherwise."""
    (first,) = flow.trial_ids(flow.submit().id)
    assert (
        flow.place(first)["environment"]["STRATUS_REPORT_INTERVAL"] == f"{ports.settings.report_interval_s:g}"
    )
    own = flow.submit(environment={"environment_variables": ["STRATUS_REPORT_INTERVAL=1"]})
    (second,) = flow.trial_ids(own.id)
    runs.heartbeat(ports, "agent-1", "default", 1, [f"{first}.1"])
    ports.runs.exit(f"{first}.1", 0, "done")
    assert flow.place(second)["environment"]["STRATUS_REPORT_INTERVAL"] == "1"


def test_a_run_that_ended_before_its_launch_answers_the_launch_token(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    run_id = flow.request_slots(trial_id)
    ports.runs.exit(run_id, 9, "gone")
    flow.launch(run_id)
    assert flow.exit_answer(run_id) == {"exit_code": 9, "reason": "gone", "paused": False}


def test_the_heartbeat_hands_out_launch_specs_and_kills_what_is_not_expected(ports, flow):
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    spec = flow.place(trial_id)
    run_id = f"{trial_id}.1"
    assert spec["run_id"] == run_id and spec["trial_id"] == trial_id and spec["slots"] == 1
    assert spec["entrypoint"] == ["python3", "train.py"]
    assert spec["api_url"] == ports.settings.api_url
    assert spec["context_url"] == ports.blobs.presign_get(f"contexts/{flow.SHA}.tar.zst")
    env = spec["environment"]
    assert env["STRATUS_RUN_TOKEN"] == tokens.run_token(ports.settings.token_secret, run_id)
    assert (env["STRATUS_TRIAL_ID"], env["STRATUS_EXPERIMENT_ID"]) == (str(trial_id), str(experiment.id))
    assert "STRATUS_AGENT_TOKEN" not in env and "STRATUS_NUM_NODES" not in env
    assert ports.bells.rung.count("agent-1") == 1  # the launch rang its agent's doorbell
    # Running it: no new launch. A process the control plane does not expect is killed.
    answer = runs.heartbeat(ports, "agent-1", "default", 1, [run_id, "3.1"])
    beat = {"heartbeat_interval_s": ports.settings.agent_heartbeat_s, "bell": None}
    assert answer == {"launch": [], "kill": ["3.1"], "preempt": [], **beat}
    # Paused (or preempted): the next beat tells the agent, which passes it on through the stop file.
    ports.runs.tell_to_stop(run_id, pause=True)
    answer = runs.heartbeat(ports, "agent-1", "default", 1, [run_id])
    assert answer == {"launch": [], "kill": [], "preempt": [run_id], **beat}


def test_a_capacity_change_asks_the_scheduler_for_a_pass(ports):
    runs.heartbeat(ports, "agent-1", "default", 2, [])
    runs.heartbeat(ports, "agent-1", "default", 2, [])  # the same capacity: nothing to schedule
    ports.clock.advance(1)
    runs.heartbeat(ports, "agent-1", "default", 4, [])
    assert [m.body for m in ports.queues.take_scheduler()] == [{"type": "capacity", "pool": "default"}] * 2


def test_started_moves_the_trial_to_running_for_the_runs_own_agent_only(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id)
    with pytest.raises(ForbiddenError, match="not assigned to agent agent-2"):
        runs.started(ports, "agent-2", spec["run_id"], 10)
    with pytest.raises(NotFoundError, match="run 99.1 not found"):
        runs.started(ports, "agent-1", "99.1", 10)
    runs.started(ports, "agent-1", spec["run_id"], 10)
    runs.started(ports, "agent-1", spec["run_id"], 10)  # a retried report
    assert ports.trials.get(trial_id).state == "RUNNING"
    assert ports.runs.get(spec["run_id"]).pid == 10


def test_an_exit_is_recorded_on_the_trial_and_answers_the_workflow_once(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id)
    runs.started(ports, "agent-1", spec["run_id"], 10)
    runs.exited(ports, "agent-1", spec["run_id"], 3, "exited with code 3", failed_rank=1)
    runs.exited(ports, "agent-1", spec["run_id"], 3, "exited with code 3", failed_rank=1)  # retried
    assert flow.exit_answer(spec["run_id"]) == {
        "exit_code": 3,
        "reason": "exited with code 3",
        "paused": False,
    }
    trial = ports.trials.get(trial_id)
    assert (trial.exit_code, trial.exit_reason, trial.failed_rank) == (3, "exited with code 3", 1)
    run = ports.runs.get(spec["run_id"])
    assert (
        run.state == "EXITED"
        and ports.runs.allocated("default") == []
        and ports.runs.for_agent("agent-1") == []
    )
    assert runs.heartbeat(ports, "agent-1", "default", 1, [spec["run_id"]])["kill"] == [spec["run_id"]]


def test_a_clean_exit_after_a_pause_request_pauses_the_trial(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id)
    ports.trials.set_searcher_action(trial_id, "pause")
    run = ports.runs.get(spec["run_id"])
    assert trial_reports.heartbeat(ports, run) == {"preempt": True}  # told to stop: it will pause
    runs.exited(ports, "agent-1", spec["run_id"], 0, "exited with code 0")
    assert flow.exit_answer(spec["run_id"])["paused"] is True


def test_a_clean_exit_of_an_invalid_hp_trial_keeps_the_trials_reason(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id)
    trial_reports.report_invalid_hp(ports, ports.runs.get(spec["run_id"]), "hidden_size too small")
    runs.exited(ports, "agent-1", spec["run_id"], 0, "exited with code 0")
    reason = "invalid hyperparameters: hidden_size too small"
    assert flow.exit_answer(spec["run_id"])["reason"] == reason
    assert ports.trials.get(trial_id).exit_reason == reason


def test_log_batches_are_stored_once_per_sequence_number(ports, flow):
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id)
    line = LogLine(int(ports.clock.now() * 1000), "hello", 0)
    assert run_logs.store_logs(ports, trial_id, spec["run_id"], 1, [line])
    assert not run_logs.store_logs(ports, trial_id, spec["run_id"], 1, [line])  # a retried batch
    assert run_logs.store_logs(
        ports, trial_id, spec["run_id"], None, [dataclasses.replace(line, message="again")]
    )
    assert [x.message for x in ports.logs.get(trial_id, 100, None, None)[0]] == ["hello", "again"]
    with pytest.raises(NotFoundError, match=f"run {spec['run_id']} of trial 99 not found"):
        run_logs.store_logs(ports, 99, spec["run_id"], 2, [line])


def test_log_lines_outside_cloudwatchs_window_are_kept_at_their_arrival():
    now = 1_800_000_000_000
    day = 24 * 3600 * 1000
    lines = [LogLine(now - 20 * day, "old", 1), LogLine(now + day, "ahead", 0), LogLine(now - day, "fine", 0)]

    kept = run_logs.in_log_window(lines, now)

    assert kept[0] == LogLine(now, "[its clock said 2026-12-26T08:00:00.000+00:00] old", 1)
    assert kept[1] == LogLine(now, "[its clock said 2027-01-16T08:00:00.000+00:00] ahead", 0)
    assert kept[2] == lines[2]
    assert run_logs.in_log_window([LogLine(10**18, "far", None)], now)[0].message.startswith(
        "[its clock said "
    )


def test_legacy_entrypoints_run_under_the_harness(flow):
    from chalicelib import config as cfg

    one = cfg.parse_experiment_config({**flow.SINGLE, "entrypoint": "model_def:MyTrial"}).config
    assert runs.entrypoint_argv(one) == [
        "python3",
        "-m",
        "stratus.harness.exec.run_trial",
        "model_def:MyTrial",
    ]
    two = cfg.parse_experiment_config(
        {**flow.SINGLE, "entrypoint": "model_def:MyTrial", "resources": {"slots_per_trial": 2}}
    ).config
    assert runs.entrypoint_argv(two)[:3] == ["python3", "-m", "stratus.launchers.torch_distributed"]
