"""Cancel and kill, as Determined does them: `det experiment cancel | kill ID`, `det trial kill ID`.

Cancel: the searcher creates nothing more; a trial waiting in the queue (or paused) ends CANCELED at
once, its slot request dropped; a running trial is told to stop (`should_preempt()` turns true, the
searcher says stop): it checkpoints and exits. The experiment waits in STOPPING_CANCELED and ends
CANCELED once every trial has ended.

Kill (STOPPING_KILLED): the same, except that a running trial's run is ended here (its agents kill its processes at their
next heartbeat: SIGTERM, then SIGKILL after the grace) and no checkpoint is taken.

The experiment (and each trial) waits in STOPPING_CANCELED for a cancel, STOPPING_KILLED for a kill.
A run's exit ends a STOPPING_CANCELED or STOPPING_KILLED trial CANCELED (`runs._report_run_exit` tells the workflow, whose
Cancel writes it), whatever its exit code; the trial's exit event then reaches `on_trial_event`.
Everything here is idempotent: a repeated cancel or kill finds each trial as far as the first took it.
A kill after a cancel kills the trials still stopping.
"""

from __future__ import annotations

from chalicelib.domain import keys
from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.run_records import Run
from chalicelib.domain.states import ExperimentState, RunState, TrialState
from chalicelib.errors import ConflictError
from chalicelib.services import lookups, retention, runs, watchlist
from chalicelib.services.ports import Ports
from stratus.contract import messages

#: The exit code recorded for a run the user killed (as a process killed by SIGKILL reports it).
KILLED_EXIT_CODE = -9

_STOPPABLE = (
    ExperimentState.ACTIVE,
    ExperimentState.PAUSED,
    ExperimentState.STOPPING_CANCELED,
    ExperimentState.STOPPING_KILLED,
)
#: The states of an experiment (and of a trial) on its way to CANCELED.
STOPPING_TO_CANCELED = (ExperimentState.STOPPING_CANCELED, ExperimentState.STOPPING_KILLED)
_TRIAL_STOPPING = (TrialState.STOPPING_CANCELED, TrialState.STOPPING_KILLED)


def cancel_experiment(ports: Ports, experiment_id: int) -> Experiment:
    return _stop_experiment(ports, experiment_id, kill=False)


def kill_experiment(ports: Ports, experiment_id: int) -> Experiment:
    return _stop_experiment(ports, experiment_id, kill=True)


def kill_trial(ports: Ports, trial_id: int) -> Trial:
    """Kill one trial; its experiment goes on (the searcher learns of the trial's end as of any exit)."""
    trial = runs.get_trial(ports, trial_id)
    if trial.state == TrialState.CANCELED:
        # A repeat: what the first did after the trial's end may not have happened (its queued run's
        # answer is given again; a searcher that missed the end hears of it from the sweep).
        _stop_trial(ports, trial, kill=True)
        watchlist.mark(ports, trial.experiment_id)
        return trial
    if trial.state.terminal:
        raise ConflictError(
            f"trial {trial_id} is {trial.state}: it has ended already; there is nothing to kill"
        )
    if _stop_trial(ports, trial, kill=True):
        # Ended here, with no run to report it: the searcher is told as of any trial that exits.
        ports.queues.to_events(
            messages.TrialExited(
                event_id=f"killed-{trial_id}",
                trial_id=trial_id,
                experiment_id=trial.experiment_id,
                state=str(TrialState.CANCELED),
            ).to_body()
        )
    return runs.get_trial(ports, trial_id)


def on_trial_event(ports: Ports, experiment: Experiment) -> None:
    """A trial event of an experiment in STOPPING_CANCELED: end it once every trial has ended.

    A stopping trial whose run has exited ends CANCELED here too: its exit may have been reported just
    before the cancel (so without the flag that makes the workflow cancel it)."""
    # Consistent: the consumer of a trial's last event must see that trial as its event left it (the
    # index could show it as it was before, and the experiment would never end).
    for trial in ports.trials.for_experiment(experiment.id, consistent=True):
        if trial.state in _TRIAL_STOPPING:
            run = _latest_run(ports, trial)
            if run is None or run.state == RunState.EXITED:
                ports.trials.transition(trial.id, TrialState.CANCELED, end_time=ports.clock.now_iso())
    trials = ports.trials.for_experiment(experiment.id, consistent=True)
    if all(t.state.terminal for t in trials):
        retention.apply(ports, experiment, trials)
        ports.experiments.transition(experiment.id, ExperimentState.CANCELED, end_time=ports.clock.now_iso())


def _stop_experiment(ports: Ports, experiment_id: int, *, kill: bool) -> Experiment:
    experiment = lookups.get_experiment(ports, experiment_id)
    verb = "kill" if kill else "cancel"
    if experiment.state == ExperimentState.CANCELED:
        return experiment  # done already: a repeated request
    if experiment.state not in _STOPPABLE:
        raise ConflictError(
            f"experiment {experiment_id} is {experiment.state}: it has ended or is finishing by itself; "
            f"there is nothing to {verb}"
        )
    target = ExperimentState.STOPPING_KILLED if kill else ExperimentState.STOPPING_CANCELED
    if experiment.state == ExperimentState.STOPPING_KILLED:
        target = experiment.state  # a cancel after a kill: the kill stands
    moving = experiment.state != target
    if moving and ports.experiments.transition(experiment_id, target) is None:
        raise ConflictError(
            f"experiment {experiment_id} changed state meanwhile; run `det experiment {verb}` again"
        )
    for trial in ports.trials.for_experiment(experiment_id):
        _stop_trial(ports, trial, kill=kill)
    stopping = ports.experiments.get(experiment_id)
    assert stopping is not None
    on_trial_event(ports, stopping)  # every trial may have ended already (queued, paused, none at all)
    ended = ports.experiments.get(experiment_id)
    assert ended is not None
    return ended


def _stop_trial(ports: Ports, trial: Trial, *, kill: bool) -> bool:
    """Stop one trial; True when it ended here (no run of it was launched)."""
    if trial.state.terminal:
        if trial.state == TrialState.CANCELED and (run := _latest_run(ports, trial)) is not None:
            _drop_queued_run(ports, run)  # a repeat: the first may have lost its slot request's answer
        return False
    run = _latest_run(ports, trial)
    launched = run is not None and run.state in (RunState.LAUNCHING, RunState.RUNNING)
    if not launched and trial.state in (TrialState.QUEUED, TrialState.PAUSED):
        ended = ports.trials.transition(trial.id, TrialState.CANCELED, end_time=ports.clock.now_iso())
        if ended is None:
            # It moved on meanwhile (its launch made it PULLING): stopped as it is now, its run with it.
            fresh = ports.trials.get(trial.id)
            return fresh is not None and fresh.state != trial.state and _stop_trial(ports, fresh, kill=kill)
        if run is not None:
            _drop_queued_run(ports, run)
        return True
    if kill:
        ports.trials.transition(trial.id, TrialState.STOPPING_KILLED)
    elif trial.state != TrialState.STOPPING_KILLED:
        ports.trials.transition(trial.id, TrialState.STOPPING_CANCELED)
    if not kill:
        ports.trials.set_searcher_action(trial.id, "stop")  # should_preempt() turns true
        if run is not None and launched:
            # Told now through its agent (rung: it heartbeats at once and passes the stop on), not at
            # the trial's next heartbeat of its own (every 60 s under an agent).
            ports.runs.ask_to_stop(run.run_id)
            ports.compute.nudge(run.run_id)
    elif run is not None and launched:
        runs.end_run(ports, run, KILLED_EXIT_CODE, "killed by the user (det experiment|trial kill)")
    elif run is not None and run.state == RunState.EXITED:
        runs.report_again(ports, run)  # a repeat: the first kill may have failed before its exit's answer
    return False


def _latest_run(ports: Ports, trial: Trial) -> Run | None:
    """The trial's current run (the workflow names its runs after the trial's attempts)."""
    return ports.runs.get(keys.run_id(trial.id, trial.attempts)) if trial.attempts > 0 else None


def _drop_queued_run(ports: Ports, run: Run) -> None:
    """A run waiting for slots (or for its launch) never starts: it is ended, and a pending one's slot
    request answered with no agent, so its workflow goes on to find the run ended (and the trial
    canceled) instead of waiting. An ASSIGNED one's launch finds it ended."""
    if run.state == RunState.ASSIGNED:
        ports.runs.exit(run.run_id, -1, "canceled while it waited for slots")
    else:
        runs.leave_queue(ports, run, -1, "canceled while it waited for slots")
