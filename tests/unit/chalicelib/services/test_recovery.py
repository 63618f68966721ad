"""Recovery after the embedded stack restarted (`chalicelib.services.recovery`), on the in-memory twin: the
records survived, the queues' messages and the executions did not. Each test builds the records a stack
leaves when it stops at some moment, forgets the executions (as a new moto does), and checks what
`recover` makes of them."""

from __future__ import annotations

from chalicelib.domain import keys
from chalicelib.domain.states import ExperimentState, RunState, TrialState
from chalicelib.services import pausing, recovery, runs, stopping
from stratus.contract import messages

REASON = "lost: the local stack stopped while the run was in flight"


def _restart(ports) -> recovery.Recovery:
    """What a restart loses (executions, queued messages), then the stack's recovery."""
    ports.workflows.executions.clear()
    ports.queues.take_events()
    ports.queues.take_scheduler()
    return recovery.recover(ports, REASON)


def test_running_and_queued_trials_resume_in_new_executions_and_their_runs_end_as_lost(ports, flow):
    experiment, first, second, first_run, second_run = flow.running_and_queued(flow.TWO_AT_ONCE)
    before = {trial_id: flow.execution(trial_id) for trial_id in (first, second)}

    report = _restart(ports)

    assert sorted(report.runs_ended) == sorted([first_run, second_run])
    for run_id in (first_run, second_run):
        run = ports.runs.get(run_id)
        assert run.state == RunState.EXITED and run.reason == REASON
    # Each trial goes on from its latest checkpoint in a new execution: a resume, not a restart.
    assert sorted(report.resumed) == sorted([first, second])
    assert ports.trials.get(first).exit_reason == REASON  # `det trial describe` says what happened
    for trial_id in (first, second):
        trial = ports.trials.get(trial_id)
        assert trial.state == TrialState.PAUSED  # until the new execution's Enqueue queues it
        assert trial.generation == 1 and trial.restarts == 0
        # The same job as before: pool, slots, priority, restarts allowed.
        assert flow.execution(trial_id, generation=1) == before[trial_id]
    assert ports.experiments.get(experiment.id).state == ExperimentState.ACTIVE


def test_an_agent_of_the_old_stack_still_running_a_lost_run_is_told_to_kill_it(ports, flow):
    _, _, _, first_run, _ = flow.running_and_queued(flow.TWO_AT_ONCE)

    _restart(ports)

    # Nothing runs twice at once: the old process is killed wherever it still lives.
    answer = runs.heartbeat(ports, "agent-1", "default", 1, [first_run])
    assert answer["kill"] == [first_run] and answer["launch"] == []


def test_a_resume_claimed_by_an_execution_lost_before_its_enqueue_starts_again(ports, flow):
    experiment, first, *_ = flow.running_and_queued(flow.TWO_AT_ONCE)
    _restart(ports)
    # The stack stopped again before the new execution's Enqueue: the trial is PAUSED, resume claimed.
    assert ports.trials.get(first).generation == 1

    report = _restart(ports)

    assert first in report.resumed
    assert ports.trials.get(first).generation == 2
    assert flow.execution(first, generation=2)["experiment_id"] == experiment.id


def test_a_paused_experiment_keeps_its_trials_paused_until_activated(ports, flow):
    experiment, first, second, *_ = flow.running_and_queued(flow.TWO_AT_ONCE)
    pausing.pause_experiment(ports, experiment.id)

    report = _restart(ports)

    assert sorted(report.paused) == sorted([first, second]) and report.resumed == []
    assert {t.state for t in ports.trials.for_experiment(experiment.id)} == {TrialState.PAUSED}
    assert ports.workflows.executions == {}
    pausing.activate_experiment(ports, experiment.id)
    assert {keys.execution_name(first, 1), keys.execution_name(second, 1)} <= set(ports.workflows.executions)


def test_trials_of_a_stopping_experiment_end_and_the_experiment_ends_with_them(ports, flow):
    experiment, first, second, *_ = flow.running_and_queued(flow.TWO_AT_ONCE)
    stopping.cancel_experiment(ports, experiment.id)
    assert ports.experiments.get(experiment.id).state == ExperimentState.STOPPING_CANCELED

    report = _restart(ports)

    assert first in report.ended  # it was running: told to stop, its process is gone now
    assert {t.state for t in ports.trials.for_experiment(experiment.id)} == {TrialState.CANCELED}
    flow.deliver_events()
    assert ports.experiments.get(experiment.id).state == ExperimentState.CANCELED


def test_an_exit_the_searcher_never_saw_is_announced_again_once(ports, flow):
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    flow.place(trial_id)
    run_id = keys.run_id(trial_id, 1)
    # The workflow completed the trial, but the stack stopped before its trial_exited event was read.
    ports.trials.transition(trial_id, TrialState.RUNNING)
    ports.trials.transition(trial_id, TrialState.COMPLETED, end_time=ports.clock.now_iso())
    ports.runs.exit(run_id, 0, "exited with code 0")

    report = _restart(ports)

    assert report.exits_announced == [trial_id]
    (event,) = ports.queues.events
    assert messages.parse_event(event) == messages.TrialExited(
        f"exited-{run_id}", trial_id, experiment.id, "COMPLETED"
    )
    flow.deliver_events()
    assert ports.experiments.get(experiment.id).state == ExperimentState.COMPLETED
    assert recovery.recover(ports, REASON).exits_announced == []  # the searcher has it now


def test_an_experiment_being_deleted_goes_on_being_deleted(ports, flow):
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    flow.end_trial(trial_id, "COMPLETED")
    assert ports.experiments.transition(experiment.id, ExperimentState.DELETING) is not None

    report = _restart(ports)

    assert report.deletions == [experiment.id]
    assert ports.queues.events == [messages.DeleteExperiment(experiment_id=experiment.id).to_body()]
