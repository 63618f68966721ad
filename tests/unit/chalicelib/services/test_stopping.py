"""Cancel and kill on the in-memory twin: queued trials end at once, running ones are told to stop
(cancel) or have their run ended (kill), and the experiment ends CANCELED once every trial has."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.domain import keys
from chalicelib.domain.states import ExperimentState, RunState, TrialState
from chalicelib.errors import ConflictError, NotFoundError
from chalicelib.services import runs, searching, stopping, trial_reports
from stratus.contract import messages

RANDOM: dict[str, Any] = {
    "name": "stoppable",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
    "searcher": {
        "name": "random",
        "metric": "loss",
        "max_trials": 5,
        "max_concurrent_trials": 2,
        "max_length": {"batches": 10},
    },
}


def _workflow_ends(ports, flow, run_id: str) -> None:
    """The workflow's Cancel (the run's exit said canceled) and its trial_exited event, delivered."""
    answer = flow.exit_answer(run_id)
    assert answer["canceled"] is True
    trial_id, _ = keys.parse_run_id(run_id)
    ports.trials.transition(trial_id, TrialState.CANCELED, end_time=ports.clock.now_iso())
    trial = ports.trials.get(trial_id)
    event = messages.TrialExited(f"exited-{run_id}", trial_id, trial.experiment_id, "CANCELED")
    searching.handle_event(ports, event)


def test_cancel_drops_queued_trials_and_tells_running_ones_to_stop(ports, flow):
    experiment, first, second, first_run, second_run = flow.running_and_queued(RANDOM)
    rings = len(ports.bells.rung)
    canceled = stopping.cancel_experiment(ports, experiment.id)

    assert canceled.state == ExperimentState.STOPPING_CANCELED
    assert ports.trials.get(second).state == TrialState.CANCELED  # never started
    assert ports.runs.get(second_run).state == RunState.EXITED
    assert ports.workflows.answers[f"slots-{second_run}"] == {"agent_id": "", "num_nodes": 0}
    assert ports.trials.get(first).state == TrialState.STOPPING_CANCELED
    run = ports.runs.get(first_run)
    assert trial_reports.heartbeat(ports, run) == {"preempt": True}  # should_preempt() turns true
    assert trial_reports.searcher_state(ports, run)["action"] == "stop"
    # Its agent is rung and passes the stop on at once, as for a pause (not at the trial's own next
    # heartbeat, a minute away under an agent); the run is not marked for a requeue or a pause.
    assert ports.bells.rung[rings:] == [ports.runs.get(first_run).agent_id]
    assert runs.heartbeat(ports, "agent-1", "default", 1, [first_run])["preempt"] == [first_run]
    assert not run.requeue and not run.pausing

    # The trial checkpoints and exits 0: the workflow cancels it, and the experiment ends.
    runs.exited(ports, "agent-1", first_run, 0, "exited with code 0")
    _workflow_ends(ports, flow, first_run)
    assert ports.experiments.get(experiment.id).state == ExperimentState.CANCELED
    assert len(flow.trial_ids(experiment.id)) == 2  # the searcher created nothing more


def test_a_queued_runs_launch_after_the_cancel_never_starts_it(ports, flow):
    experiment, _, second, _, second_run = flow.running_and_queued(RANDOM)
    stopping.cancel_experiment(ports, experiment.id)
    # The workflow goes on with the answered slot token: its launch finds the run ended.
    launch = messages.Launch(f"launch-{second_run}", second_run, second, experiment.id, "")
    runs.handle_launch(ports, launch)
    assert ports.workflows.answers[f"launch-{second_run}"]["canceled"] is True
    assert ports.trials.get(second).state == TrialState.CANCELED


def test_kill_ends_running_runs_without_a_checkpoint_and_their_agent_kills_them(ports, flow):
    experiment, first, second, first_run, _ = flow.running_and_queued(RANDOM)
    stopping.kill_experiment(ports, experiment.id)

    assert ports.runs.get(first_run).state == RunState.EXITED
    answer = flow.exit_answer(first_run)
    assert answer["exit_code"] == stopping.KILLED_EXIT_CODE and answer["canceled"] is True
    assert answer["reason"].startswith("killed by the user")
    # The agent still runs it: its next heartbeat kills it (SIGTERM, then SIGKILL after the grace).
    assert runs.heartbeat(ports, "agent-1", "default", 1, [first_run])["kill"] == [first_run]
    runs.exited(ports, "agent-1", first_run, -15, "killed")  # its later report changes nothing
    assert flow.exit_answer(first_run) == answer
    assert ports.trials.get(first).searcher_action == "train"  # not asked to checkpoint

    _workflow_ends(ports, flow, first_run)
    assert ports.trials.get(second).state == TrialState.CANCELED
    assert ports.experiments.get(experiment.id).state == ExperimentState.CANCELED


def test_cancel_then_kill_kills_the_trials_still_stopping(ports, flow):
    experiment, _, _, first_run, _ = flow.running_and_queued(RANDOM)
    stopping.cancel_experiment(ports, experiment.id)
    stopping.kill_experiment(ports, experiment.id)
    assert flow.exit_answer(first_run)["exit_code"] == stopping.KILLED_EXIT_CODE


def test_cancel_and_kill_are_idempotent(ports, flow):
    experiment, _, _, first_run, _ = flow.running_and_queued(RANDOM)
    stopping.cancel_experiment(ports, experiment.id)
    before = {t.id: t.state for t in ports.trials.for_experiment(experiment.id)}
    again = stopping.cancel_experiment(ports, experiment.id)
    assert again.state == ExperimentState.STOPPING_CANCELED
    assert {t.id: t.state for t in ports.trials.for_experiment(experiment.id)} == before
    runs.exited(ports, "agent-1", first_run, 0, "exited with code 0")
    _workflow_ends(ports, flow, first_run)
    assert stopping.cancel_experiment(ports, experiment.id).state == ExperimentState.CANCELED
    assert stopping.kill_experiment(ports, experiment.id).state == ExperimentState.CANCELED


def test_an_experiment_whose_trials_all_waited_ends_canceled_at_once(ports, flow):
    experiment = flow.submit(RANDOM)
    canceled = stopping.cancel_experiment(ports, experiment.id)
    assert canceled.state == ExperimentState.CANCELED and canceled.end_time
    assert {t.state for t in ports.trials.for_experiment(experiment.id)} == {TrialState.CANCELED}


def test_unknown_and_ended_experiments_are_refused_with_their_id_and_state(ports, flow):
    with pytest.raises(NotFoundError, match="experiment 99 not found"):
        stopping.cancel_experiment(ports, 99)
    experiment = flow.submit(RANDOM)
    for trial_id in flow.trial_ids(experiment.id):
        flow.end_trial(trial_id, "ERROR")
    ports.experiments.transition(experiment.id, ExperimentState.ERROR)
    with pytest.raises(ConflictError, match=f"experiment {experiment.id} is ERROR"):
        stopping.kill_experiment(ports, experiment.id)
    with pytest.raises(NotFoundError, match="trial 99 not found"):
        stopping.kill_trial(ports, 99)


def test_a_killed_trial_ends_and_its_experiment_goes_on(ports, flow):
    experiment, first, second, first_run, _ = flow.running_and_queued(RANDOM)
    stopping.kill_trial(ports, first)
    assert ports.trials.get(first).state == TrialState.STOPPING_KILLED
    assert ports.experiments.get(experiment.id).state == ExperimentState.ACTIVE
    _workflow_ends(ports, flow, first_run)
    assert ports.trials.get(first).state == TrialState.CANCELED
    assert len(flow.trial_ids(experiment.id)) == 3  # the searcher replaced it with its next trial

    stopping.kill_trial(ports, second)  # waiting for slots: ends at once, the searcher is told
    assert ports.trials.get(second).state == TrialState.CANCELED
    assert flow.deliver_events() == 1
    assert len(flow.trial_ids(experiment.id)) == 4
    assert stopping.kill_trial(ports, second).state == TrialState.CANCELED  # again: no error
    flow.end_trial(flow.trial_ids(experiment.id)[2], "COMPLETED")
    with pytest.raises(ConflictError, match=r"trial \d+ is COMPLETED"):
        stopping.kill_trial(ports, flow.trial_ids(experiment.id)[2])


def test_a_trial_the_searcher_creates_while_the_experiment_is_canceled_never_starts(ports, flow):
    """The race: the searcher read the experiment ACTIVE, the cancel listed the trials, then the searcher
    created one more. It is canceled at once, no workflow starts for it, and the experiment ends."""
    experiment, first, second, first_run, _ = flow.running_and_queued(RANDOM)
    claim = ports.ids.claim
    canceled: list[int] = []

    def claim_after_a_cancel(key: str, kind: str) -> int:
        if kind == "trial" and not canceled:
            canceled.append(stopping.cancel_experiment(ports, experiment.id).id)
        return claim(key, kind)

    ports.ids.claim = claim_after_a_cancel
    runs.exited(ports, "agent-1", first_run, 0, "exited with code 0")
    flow.end_trial(first, "COMPLETED")  # its event: the searcher creates the next trial

    assert canceled == [experiment.id]
    (late,) = [t for t in flow.trial_ids(experiment.id) if t not in (first, second)]
    assert ports.trials.get(late).state == TrialState.CANCELED
    assert keys.execution_name(late, 0) not in ports.workflows.executions
    assert ports.experiments.get(experiment.id).state == ExperimentState.CANCELED


def test_a_trial_created_during_a_cancel_with_another_still_running_waits_for_nothing(ports, flow):
    experiment = flow.submit(RANDOM)
    first, second = flow.trial_ids(experiment.id)
    flow.place(first, slots=2)
    second_run = flow.request_slots(second)
    flow.launch(second_run)
    claim = ports.ids.claim

    def claim_after_a_cancel(key: str, kind: str) -> int:
        if kind == "trial" and ports.experiments.get(experiment.id).state == ExperimentState.ACTIVE:
            stopping.cancel_experiment(ports, experiment.id)
        return claim(key, kind)

    ports.ids.claim = claim_after_a_cancel
    runs.exited(ports, "agent-1", keys.run_id(first, 1), 0, "exited with code 0")
    flow.end_trial(first, "COMPLETED")

    (late,) = [t for t in flow.trial_ids(experiment.id) if t not in (first, second)]
    assert ports.trials.get(late).state == TrialState.CANCELED
    assert keys.execution_name(late, 0) not in ports.workflows.executions
    assert ports.experiments.get(experiment.id).state == ExperimentState.STOPPING_CANCELED
    runs.exited(ports, "agent-1", second_run, 0, "exited with code 0")  # the running one stops
    _workflow_ends(ports, flow, second_run)
    assert ports.experiments.get(experiment.id).state == ExperimentState.CANCELED
