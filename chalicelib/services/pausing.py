"""Pause and activate, as Determined does them (`det experiment pause | activate ID`), and the stop that
preemption and pausing share.

Pause: the experiment goes PAUSED (a conditional write) and each of its trials is told to stop:
- a running trial's run is marked `preempt` and `pausing`: its processes' `should_preempt()` turns true,
  the trainer stops at the end of its scheduling unit, checkpoints and exits 0; the workflow then pauses
  the trial (PAUSED) and the run's release frees its slots;
- a trial waiting for slots (or for its launch) never starts: its run ends unstarted and the workflow
  pauses the trial the same way;
- while the experiment is PAUSED no trial starts: one the searcher creates is created PAUSED, a
  promotion leaves its trial PAUSED, and a slot request that reaches the scheduler anyway (an execution
  started just before the pause) is paused there.

Activate: the experiment goes ACTIVE and every trial that is PAUSED while its searcher wants it to train
resumes in a new execution, from its latest checkpoint. A trial the searcher paused (PBT between rounds,
ASHA waiting for a promotion) stays paused: that pause is the searcher's.

Preemption (`preempt_run`) is the same stop with `requeue` instead of `pausing`: the clean exit sends the
trial straight back to the queue.
"""

from __future__ import annotations

from chalicelib.domain import keys
from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.run_records import Run
from chalicelib.domain.states import ExperimentState, RunState, TrialState
from chalicelib.errors import ConflictError
from chalicelib.services import experiments, runs, searching
from chalicelib.services.ports import Ports

#: The grant that tells a waiting slot request it will never get slots (its workflow goes on at once).
NO_GRANT = runs.NO_GRANT


def pause_experiment(ports: Ports, experiment_id: int) -> Experiment:
    experiment = experiments.get(ports, experiment_id)
    if experiment.state == ExperimentState.PAUSED:
        _pause_trials(ports, experiment)  # a repeated request: finish what the first may not have
        return experiment
    if experiment.state != ExperimentState.ACTIVE:
        raise ConflictError(
            f"experiment {experiment_id} is {experiment.state}; only an ACTIVE experiment can be paused"
        )
    if ports.experiments.transition(experiment_id, ExperimentState.PAUSED) is None:
        raise ConflictError(
            f"experiment {experiment_id} changed state meanwhile; run `det experiment pause` again"
        )
    _pause_trials(ports, experiment)
    return experiments.get(ports, experiment_id)


def activate_experiment(ports: Ports, experiment_id: int) -> Experiment:
    """Start a paused experiment's searcher (created with --paused), or resume its paused trials."""
    experiment = experiments.get(ports, experiment_id)
    if experiment.state != ExperimentState.ACTIVE:
        if ports.experiments.transition(experiment_id, ExperimentState.ACTIVE) is None:
            raise ConflictError(
                f"experiment {experiment_id} is {experiment.state} and cannot be activated; only a "
                "PAUSED experiment can"
            )
        experiment = experiments.get(ports, experiment_id)
    # Starts a searcher created paused; carries on what a started one left pending (its outbox), and
    # has the sweep look at the experiment again (a paused one is not looked at).
    started = experiment.searcher_started
    searching.start(ports, experiment)
    if started:
        # Also on a repeated activate: a trial whose pause ended after the first is resumed now.
        for trial in ports.trials.for_experiment(experiment_id):
            if trial.state == TrialState.PAUSED and trial.searcher_action == "train":
                searching.resume_paused_trial(ports, experiment, trial)
    return experiments.get(ports, experiment_id)


def preempt_run(ports: Ports, run: Run) -> None:
    """Stop a run to make room for another (the scheduler's preemption): it checkpoints and exits, and
    its trial goes back to the queue. A run still waiting for its launch gives its slots back unstarted."""
    ports.runs.tell_to_stop(run.run_id, pause=False)
    ports.compute.nudge(run.run_id)


def pause_request_of_paused_experiment(ports: Ports, run: Run) -> None:
    """A slot request of an experiment that is PAUSED: it is answered at once, unstarted, and its trial
    paused (the execution was started just before the pause)."""
    _pause_run(ports, run)


def drop_request_of_canceled_trial(ports: Ports, run: Run) -> None:
    """A slot request of a trial canceled or killed meanwhile: answered at once with no agent, so its
    workflow finds the run ended and the trial canceled (its Cancel), instead of waiting for slots."""
    runs.leave_queue(ports, run, -1, "canceled while it waited for slots")


def _pause_trials(ports: Ports, experiment: Experiment) -> None:
    for trial in ports.trials.for_experiment(experiment.id):
        if trial.state.terminal or trial.state == TrialState.PAUSED:
            continue
        run = _current_run(ports, trial)
        if run is not None:
            _pause_run(ports, run)
        # No run yet: its slot request is paused when it reaches the scheduler.


def _pause_run(ports: Ports, run: Run) -> None:
    if run.state != RunState.EXITED:  # else it ended unstarted already: only its answer may be missing
        ports.runs.tell_to_stop(run.run_id, pause=True)
        ports.compute.nudge(run.run_id)
    runs.leave_queue(ports, run, 0, "paused while it waited for slots")
    # ASSIGNED: the launch consumer ends it unstarted. LAUNCHING or RUNNING: its processes stop.


def _current_run(ports: Ports, trial: Trial) -> Run | None:
    """The trial's current run (the workflow names its runs after the trial's attempts). One that ended
    unstarted, never granted, is kept: its slot request's answer may have been lost (a repeat gives it)."""
    run = ports.runs.get(keys.run_id(trial.id, trial.attempts)) if trial.attempts > 0 else None
    if run is None or (run.state == RunState.EXITED and run.assigned_at is not None):
        return None
    return run
