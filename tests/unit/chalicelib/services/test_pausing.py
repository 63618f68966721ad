"""Pause, activate and preemption on the in-memory twin: running trials are told to stop and pause (or
requeue) on their clean exit, queued ones leave the queue unstarted, nothing starts while paused, and
activate resumes exactly the trials the pause stopped."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.domain import keys
from chalicelib.domain.states import ExperimentState, RunState, TrialState
from chalicelib.errors import ConflictError
from chalicelib.services import pausing, runs, searching, trial_reports
from stratus.contract import messages


def _workflow_pauses(ports, run_id: str, answer: dict[str, Any]) -> None:
    """The workflow's Pause and its trial_paused event, delivered (as the state machine does them)."""
    assert answer["paused"] is True and "requeue" not in answer and "canceled" not in answer
    trial_id, _ = keys.parse_run_id(run_id)
    assert ports.trials.transition(trial_id, TrialState.PAUSED) is not None
    experiment_id = ports.trials.get(trial_id).experiment_id
    searching.handle_event(ports, messages.TrialPaused(f"paused-{run_id}", trial_id, experiment_id, "PAUSED"))


def test_pause_tells_running_trials_to_stop_and_takes_queued_ones_out_of_the_queue(ports, flow):
    experiment, first, second, first_run, second_run = flow.running_and_queued(flow.TWO_AT_ONCE)
    rings = len(ports.bells.rung)

    paused = pausing.pause_experiment(ports, experiment.id)

    assert paused.state == ExperimentState.PAUSED
    running = ports.runs.get(first_run)
    assert running.preempt and running.pausing and not running.requeue
    assert ports.bells.rung[rings:] == [running.agent_id]  # its agent hears of it now, not at a beat
    assert trial_reports.heartbeat(ports, running) == {"preempt": True}  # should_preempt() turns true
    # The queued one never starts: its request is answered with no agent; its launch finds it ended.
    assert ports.runs.get(second_run).state == RunState.EXITED
    assert ports.workflows.answers[f"slots-{second_run}"] == pausing.NO_GRANT
    flow.launch(second_run)
    _workflow_pauses(ports, second_run, flow.exit_answer(second_run))
    # The running one checkpoints and exits 0: paused, not completed.
    runs.exited(ports, "agent-1", first_run, 0, "exited after its checkpoint")
    _workflow_pauses(ports, first_run, flow.exit_answer(first_run))
    assert {t.state for t in ports.trials.for_experiment(experiment.id)} == {TrialState.PAUSED}
    # While paused, nothing resumes: no new execution was started for either trial.
    assert keys.execution_name(first, 1) not in ports.workflows.executions
    assert keys.execution_name(second, 1) not in ports.workflows.executions


def test_activate_resumes_each_paused_trial_once_in_a_new_execution(ports, flow):
    experiment, first, second, first_run, second_run = flow.running_and_queued(flow.TWO_AT_ONCE)
    pausing.pause_experiment(ports, experiment.id)
    flow.launch(second_run)
    _workflow_pauses(ports, second_run, flow.exit_answer(second_run))
    runs.exited(ports, "agent-1", first_run, 0, "checkpointed")
    _workflow_pauses(ports, first_run, flow.exit_answer(first_run))

    active = pausing.activate_experiment(ports, experiment.id)
    again = pausing.activate_experiment(ports, experiment.id)  # a repeat starts nothing more

    assert active.state == again.state == ExperimentState.ACTIVE
    for trial_id in (first, second):
        assert flow.execution(trial_id, generation=1)["trial_id"] == trial_id
        assert keys.execution_name(trial_id, 2) not in ports.workflows.executions
        assert ports.trials.get(trial_id).restarts == 0  # a pause is not a restart


def test_a_run_that_exits_before_it_saw_the_pause_completes_as_usual(ports, flow):
    experiment, first, _, first_run, _ = flow.running_and_queued(flow.TWO_AT_ONCE)
    runs.exited(ports, "agent-1", first_run, 0, "done")  # it finished just before the pause
    pausing.pause_experiment(ports, experiment.id)
    answer = flow.exit_answer(first_run)
    assert answer["paused"] is False and "requeue" not in answer


def test_a_trial_created_or_promoted_while_paused_waits_for_activate(ports, flow):
    experiment, first, second, first_run, second_run = flow.running_and_queued(flow.TWO_AT_ONCE)
    pausing.pause_experiment(ports, experiment.id)
    flow.launch(second_run)
    _workflow_pauses(ports, second_run, flow.exit_answer(second_run))
    runs.exited(ports, "agent-1", first_run, 0, "checkpointed")
    _workflow_pauses(ports, first_run, flow.exit_answer(first_run))
    # A trial ends while paused (killed, say): the searcher creates the third one, PAUSED, unstarted.
    assert ports.trials.transition(first, TrialState.CANCELED) is not None
    flow.deliver_events()
    searching.handle_event(ports, messages.TrialExited(f"killed-{first}", first, experiment.id, "CANCELED"))
    third = [t for t in flow.trial_ids(experiment.id) if t not in (first, second)]
    assert len(third) == 1
    assert ports.trials.get(third[0]).state == TrialState.PAUSED
    assert keys.execution_name(third[0], 0) not in ports.workflows.executions

    pausing.activate_experiment(ports, experiment.id)

    assert flow.execution(third[0], generation=1)["trial_id"] == third[0]


def test_a_slot_request_that_arrives_after_the_pause_is_paused_by_the_scheduler(ports, flow):
    experiment = flow.submit(flow.TWO_AT_ONCE)
    first, second = flow.trial_ids(experiment.id)
    runs.heartbeat(ports, "agent-1", "default", 4, [])
    pausing.pause_experiment(ports, experiment.id)  # neither execution had asked for slots yet

    run_id = flow.request_slots(first)

    assert ports.runs.get(run_id).state == RunState.EXITED
    assert ports.workflows.answers[f"slots-{run_id}"] == pausing.NO_GRANT
    flow.launch(run_id)
    assert flow.exit_answer(run_id)["paused"] is True


def test_only_an_active_experiment_can_be_paused_and_a_repeat_is_harmless(ports, flow):
    experiment = flow.submit(flow.TWO_AT_ONCE)
    assert pausing.pause_experiment(ports, experiment.id).state == ExperimentState.PAUSED
    assert pausing.pause_experiment(ports, experiment.id).state == ExperimentState.PAUSED
    for trial_id in flow.trial_ids(experiment.id):
        flow.end_trial(trial_id, "ERROR")
    ports.experiments.transition(experiment.id, ExperimentState.ERROR)
    with pytest.raises(ConflictError, match=f"experiment {experiment.id} is ERROR"):
        pausing.pause_experiment(ports, experiment.id)
    with pytest.raises(ConflictError, match="cannot be activated"):
        pausing.activate_experiment(ports, experiment.id)


def test_a_preempted_run_requeues_on_its_clean_exit_and_fails_as_usual_otherwise(ports, flow):
    _, first, _, first_run, _ = flow.running_and_queued(flow.TWO_AT_ONCE)
    pausing.preempt_run(ports, ports.runs.get(first_run))
    assert trial_reports.heartbeat(ports, ports.runs.get(first_run)) == {"preempt": True}
    runs.exited(ports, "agent-1", first_run, 0, "checkpointed")
    assert flow.exit_answer(first_run)["requeue"] is True

    run = keys.run_id(first, 2)
    flow.request_slots(first, attempt=2)
    flow.launch(run)
    runs.started(ports, "agent-1", run, pid=1)
    pausing.preempt_run(ports, ports.runs.get(run))
    runs.exited(ports, "agent-1", run, 3, "crashed while checkpointing")
    answer = flow.exit_answer(run)
    assert "requeue" not in answer and answer["exit_code"] == 3  # a failure: counted as a restart


def test_an_agent_that_stops_requeues_its_runs_whatever_their_exit_code(ports, flow):
    _, first, _, first_run, _ = flow.running_and_queued(flow.TWO_AT_ONCE)
    runs.exited(ports, "agent-1", first_run, 143, "killed by signal SIGTERM", requeue=True)
    answer = flow.exit_answer(first_run)
    assert answer["requeue"] is True and answer["exit_code"] == 143
    assert ports.trials.get(first).exit_reason.startswith("requeued:")


def test_an_agents_last_beat_grants_it_nothing_and_requeues_what_it_has_not_started(ports, flow):
    experiment = flow.submit(flow.TWO_AT_ONCE)
    first, second = flow.trial_ids(experiment.id)
    flow.place(first)  # launched on agent-1, whose process has not started yet
    first_run = keys.run_id(first, 1)

    answer = runs.heartbeat(ports, "agent-1", "default", 1, [], stopping=True)

    assert answer == {"launch": [], "kill": [], "preempt": []}
    assert ports.bells.forgotten == ["agent-1"]  # its doorbell goes with it
    assert ports.runs.get(first_run).state == RunState.EXITED
    assert flow.exit_answer(first_run)["requeue"] is True
    second_run = flow.request_slots(second)
    assert ports.runs.get(second_run).state == RunState.PENDING  # the stopping agent offers no slots


def test_a_lost_agent_requeues_a_run_it_never_started_and_restarts_one_it_ran(ports, flow):
    experiment = flow.submit(flow.TWO_AT_ONCE)
    first, second = flow.trial_ids(experiment.id)
    flow.place(first)
    runs.heartbeat(ports, "agent-2", "default", 1, [])
    flow.launch(flow.request_slots(second))
    started_run, unstarted_run = keys.run_id(second, 1), keys.run_id(first, 1)
    runs.started(ports, "agent-2", started_run, pid=7)

    assert runs.agents_lost(ports, ports.runs.get(unstarted_run), ["agent-1"], 30)
    assert runs.agents_lost(ports, ports.runs.get(started_run), ["agent-2"], 30)

    assert flow.exit_answer(unstarted_run)["requeue"] is True
    assert "requeue" not in flow.exit_answer(started_run)  # its process may have taken the machine down
