"""How an experiment ends once its searcher has shut down (`searching` carries out the `Shutdown`): its
running trials are told to stop and it waits for them in STOPPING_COMPLETED or STOPPING_ERROR, then it
ends COMPLETED (a trial completed and the searcher did not fail) or ERROR, its paused trials finished
where they are and its checkpoint retention applied."""

from __future__ import annotations

from chalicelib.domain import searchers
from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.states import ExperimentState, TrialState
from chalicelib.services import retention
from chalicelib.services.ports import Ports
from chalicelib.services.search_specs import search_spec
from stratus.contract import messages


def stops_early(trial: Trial, spec: searchers.SearchSpec) -> bool:
    return spec.max_length is not None and (trial.searcher_length or 0) < spec.max_length


def on_searcher_shutdown(
    ports: Ports,
    experiment: Experiment,
    spec: searchers.SearchSpec,
    *,
    failure: bool,
    seq: int | None = None,
) -> None:
    """The searcher shut down. Trials still running (typically on their way to a pause) are told to stop
    and the experiment waits in STOPPING_* for them, as Determined's does; otherwise it ends now."""
    running = [
        t
        for t in ports.trials.for_experiment(experiment.id, consistent=True)
        if not t.state.terminal and t.state != TrialState.PAUSED
    ]
    if not running:
        _end_experiment(ports, experiment, failure=failure)
        return
    for trial in running:
        ports.trials.set_searcher_action(trial.id, "stop", early_stopped=stops_early(trial, spec), seq=seq)
    stopping = ExperimentState.STOPPING_ERROR if failure else ExperimentState.STOPPING_COMPLETED
    ports.experiments.transition(experiment.id, stopping)


def end_experiment(ports: Ports, experiment_id: int) -> None:
    """End an active experiment as its searcher's shutdown would (no failure): its running trials are
    told to stop and it waits for them in STOPPING_COMPLETED, or it ends now."""
    experiment = ports.experiments.get(experiment_id)
    if experiment is None or gone(experiment):
        return
    on_searcher_shutdown(ports, experiment, search_spec(experiment.parsed_config), failure=False)


def finish_stopping(ports: Ports, experiment_id: int, message: messages.TrialEvent | None = None) -> None:
    """An experiment waiting in STOPPING_COMPLETED or STOPPING_ERROR (its searcher shut down): end it
    once no trial is running any more. `message`: the trial event that asks (a trial that paused is
    finished where it is)."""
    experiment = ports.experiments.get(experiment_id)
    if experiment is None or experiment.state not in (
        ExperimentState.STOPPING_COMPLETED,
        ExperimentState.STOPPING_ERROR,
    ):
        return
    if isinstance(message, messages.TrialPaused):
        trial = ports.trials.get(message.trial_id)
        if trial is not None and trial.state == TrialState.PAUSED:
            _complete_paused_trial_as_experiment_ends(ports, trial)
    trials = ports.trials.for_experiment(experiment.id, consistent=True)
    if all(t.state.terminal or t.state == TrialState.PAUSED for t in trials):
        _end_experiment(ports, experiment, failure=experiment.state == ExperimentState.STOPPING_ERROR)


def _complete_paused_trial_as_experiment_ends(ports: Ports, trial: Trial) -> None:
    """A paused trial the searcher will not resume is finished where it is, stopped early (the searcher
    has shut down: nobody is told)."""
    ports.trials.set_searcher_action(trial.id, "stop", early_stopped=True)
    ports.trials.transition(trial.id, TrialState.COMPLETED, end_time=ports.clock.now_iso())


def _end_experiment(ports: Ports, experiment: Experiment, *, failure: bool) -> None:
    """COMPLETED if a trial completed and the searcher did not fail, ERROR otherwise; retention applied."""
    for trial in ports.trials.for_experiment(experiment.id, consistent=True):
        if trial.state == TrialState.PAUSED:
            _complete_paused_trial_as_experiment_ends(ports, trial)
    trials = ports.trials.for_experiment(experiment.id, consistent=True)
    any_completed = any(t.state == TrialState.COMPLETED for t in trials)
    target = ExperimentState.COMPLETED if any_completed and not failure else ExperimentState.ERROR
    # Retention first: if it fails, the event comes again while the experiment has not ended.
    retention.apply(ports, experiment, trials)
    ports.experiments.record_progress(experiment.id, _final_progress(target, trials))
    ports.experiments.transition(experiment.id, target, end_time=ports.clock.now_iso())


def _final_progress(state: ExperimentState, trials: list[Trial]) -> float:
    """All of it for an experiment that COMPLETED; else the work its trials did (an ERROR experiment
    whose trial trained nothing is at 0%, not at 100% for having ended)."""
    if state == ExperimentState.COMPLETED:
        return 1.0
    if not trials:
        return 0.0
    return round(sum(t.work_done for t in trials) / len(trials), 4)


def gone(experiment: Experiment) -> bool:
    """Ended, or being deleted (a late event: its searcher creates nothing more)."""
    return experiment.state.terminal or experiment.state == ExperimentState.DELETING
