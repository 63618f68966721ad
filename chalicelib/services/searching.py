"""Running an experiment's searcher: feed it events, persist its snapshot, carry out its operations.

The snapshot is saved with a conditional write on `searcher_version` before any operation is carried
out, so two consumers racing on the same experiment cannot both act; the loser raises and SQS delivers
the event again, by which time the winner's snapshot already holds it (so it is a no-op). Operations are
idempotent on their own too: a trial is created once per searcher request id, executions are named.

Per trial, the searcher's wishes live on the trial record: `target_length` (train until there),
`searcher_action` (`train`, `pause` or `stop`) and `searcher_pending` (a validation at the target has
been reported and the searcher has not answered yet). The trial reads them through
`GET /trials/{id}/searcher` (see `trial_reports.searcher_state`).
"""

from __future__ import annotations

from chalicelib import config as cfg
from chalicelib.domain import keys, searchers
from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.states import ExperimentState, TrialState
from chalicelib.errors import ConflictError
from chalicelib.services import retention, stopping
from chalicelib.services.ports import Ports
from contract import messages


class StaleSearcherError(ConflictError):
    """Another consumer updated the searcher first; the event will be delivered again."""


def time_metric(config: cfg.ExperimentConfig) -> str | None:
    """What the trial measures the searcher's lengths in when it is not batches (adaptive_asha's
    `time_metric`, or `records` / `epochs` that do not convert into batches), or None for batches."""
    length = config.searcher_length()
    return length.unit if length is not None and length.unit != "batches" else None


def search_spec(config: cfg.ExperimentConfig) -> searchers.SearchSpec:
    """The searcher's inputs from an experiment's config."""
    searcher = config.searcher
    length = config.searcher_length()
    return searchers.SearchSpec(
        space=config.model_dump(mode="json", include={"hyperparameters"})["hyperparameters"],
        settings=searcher.model_dump(mode="json"),
        max_length=length.value if length is not None else None,
        seed=config.reproducibility.experiment_seed or 0,
    )


def start(ports: Ports, experiment: Experiment) -> None:
    """Start the experiment's searcher: its first trials. Once: a searcher already started is kept."""
    if experiment.searcher_started:
        return  # already started (a redelivered activation)
    spec = search_spec(experiment.parsed_config)
    searcher = searchers.new_searcher(spec)
    _save_and_apply(ports, experiment, spec, searcher, searcher.initial_operations(), version=0)


def handle_event(ports: Ports, message: messages.TrialEvent) -> None:
    experiment = ports.experiments.get(message.experiment_id)
    if experiment is None or experiment.searcher is None or _gone(experiment):
        return
    if experiment.state in stopping.STOPPING_TO_CANCELED:
        stopping.on_trial_event(ports, experiment)  # canceled: the searcher creates nothing more
        return
    if experiment.state in (ExperimentState.STOPPING_COMPLETED, ExperimentState.STOPPING_ERROR):
        _end_experiment_once_trials_stopped(ports, experiment, message)
        return
    spec = search_spec(experiment.parsed_config)  # parsed once per event
    if experiment.parsed_config.past_time_limit(experiment.start_time, ports.clock.now()):
        _on_searcher_shutdown(ports, experiment, spec, failure=False)  # NNI's maxExperimentDuration: no more
        return
    searcher = searchers.restore_searcher(experiment.searcher, spec)
    trial_id = message.trial_id
    if isinstance(message, messages.TrialPaused):
        _carry_out_decision_on_paused_trial(ports, experiment, trial_id)
        _tell_pause(ports, experiment, spec, searcher, message)
        return
    if isinstance(message, messages.TrialExited):
        trial = ports.trials.get(trial_id)
        failed = trial is None or trial.state != TrialState.COMPLETED
        invalid = trial is not None and trial.invalid_hp
        event: searchers.TrialExited | searchers.ValidationReported = searchers.TrialExited(
            event_id=message.event_id,
            trial_id=trial_id,
            failed=failed and not invalid,
            invalid_hp=invalid,
        )
    else:
        event = searchers.ValidationReported(
            event_id=message.event_id,
            trial_id=trial_id,
            length=message.length,
            metric=message.metric,
        )
    ops = searcher.on_event(event)
    _save_and_apply(ports, experiment, spec, searcher, ops, version=experiment.searcher_version)
    if isinstance(event, searchers.ValidationReported):
        # Answered (possibly with nothing: the target stands, or the trial is done).
        ports.trials.clear_searcher_pending(trial_id)


def _gone(experiment: Experiment) -> bool:
    """Ended, or being deleted (a late event: its searcher creates nothing more)."""
    return experiment.state.terminal or experiment.state == ExperimentState.DELETING


def _tell_pause(
    ports: Ports,
    experiment: Experiment,
    spec: searchers.SearchSpec,
    searcher: searchers.Searcher,
    message: messages.TrialPaused,
) -> None:
    """Tell a searcher that observes pauses (PBT) that the trial's pause checkpoint is stored."""
    if not isinstance(searcher, searchers.PauseObserver):
        return
    trial = ports.trials.get(message.trial_id)
    if trial is None or trial.state != TrialState.PAUSED:
        return  # the pause was not recorded (the trial was canceled meanwhile)
    if trial.searcher_action != "pause":
        return  # paused by the user (`det experiment pause`), not by the searcher: not a round's end
    ops = searcher.on_trial_paused(searchers.TrialPaused(message.event_id, message.trial_id))
    _save_and_apply(ports, experiment, spec, searcher, ops, version=experiment.searcher_version)


def _save_and_apply(
    ports: Ports,
    experiment: Experiment,
    spec: searchers.SearchSpec,
    searcher: searchers.Searcher,
    ops: list[searchers.Operation],
    version: int,
) -> None:
    version = _save(ports, experiment.id, searcher, version)
    for op in ops:
        if isinstance(op, searchers.CreateTrial):
            trial_id = _create_trial(ports, experiment, op)
            # Tell the searcher the trial's id; saved before the next operation runs.
            searcher.on_event(searchers.TrialCreated(f"created-{op.request_id}", op.request_id, trial_id))
            version = _save(ports, experiment.id, searcher, version)
        elif isinstance(op, searchers.ContinueTrial):
            _continue_trial(ports, experiment, op)
        elif isinstance(op, searchers.PauseTrial):
            ports.trials.set_searcher_action(op.trial_id, "pause")
        elif isinstance(op, searchers.StopTrial):
            _stop_trial(ports, op.trial_id, spec)
        elif isinstance(op, searchers.Shutdown):
            _on_searcher_shutdown(ports, experiment, spec, failure=op.failure)
    if not any(isinstance(op, searchers.Shutdown) for op in ops):
        # A searcher that shut down counts itself done: the experiment's end records what was done.
        ports.experiments.record_progress(experiment.id, round(searcher.progress(), 4))


def _save(ports: Ports, experiment_id: int, searcher: searchers.Searcher, version: int) -> int:
    if not ports.experiments.save_searcher(experiment_id, searcher.snapshot(), expected_version=version):
        raise StaleSearcherError(f"searcher of experiment {experiment_id} changed meanwhile; retrying")
    return version + 1


def _create_trial(ports: Ports, experiment: Experiment, op: searchers.CreateTrial) -> int:
    # Claimed once per request id, so a redelivered event finds the trial it already created.
    trial_id = ports.ids.claim(keys.trial_request_claim(experiment.id, op.request_id), "trial")
    seed = experiment.parsed_config.reproducibility.experiment_seed or 0
    warm_start = _warm_start_checkpoint(ports, op)
    # While the experiment is paused, a new trial waits PAUSED for `det experiment activate`.
    paused = experiment.state == ExperimentState.PAUSED
    ports.trials.create(
        Trial(
            id=trial_id,
            experiment_id=experiment.id,
            request_id=op.request_id,
            state=TrialState.PAUSED if paused else TrialState.QUEUED,
            hparams=op.hparams,
            start_time=ports.clock.now_iso(),
            trial_seed=(seed + trial_id) % 2**31,
            target_length=op.length,
            warm_start_trial_id=op.warm_start_trial_id,
            # The trial starts from it (its launch spec's latest_checkpoint) until it stores its own.
            latest_checkpoint=warm_start,
            warm_start_checkpoint=warm_start,
        )
    )
    ports.experiments.record_trial_count(experiment.id, len(ports.trials.for_experiment(experiment.id)))
    current = ports.experiments.get(experiment.id)
    if current is not None and (current.state in stopping.STOPPING_TO_CANCELED or current.state.terminal):
        # Canceled or killed while the searcher decided (the cancel listed the trials before this one
        # existed): it never starts, and the experiment ends once its other trials have.
        ports.trials.transition(trial_id, TrialState.CANCELED, end_time=ports.clock.now_iso())
        if not current.state.terminal:
            stopping.on_trial_event(ports, current)
        return trial_id
    if not paused:
        _start_run(ports, experiment, trial_id, generation=0)
    return trial_id


def _warm_start_checkpoint(ports: Ports, op: searchers.CreateTrial) -> str | None:
    """The latest checkpoint of the trial a new one starts from (None: it starts from scratch)."""
    if op.warm_start_trial_id is None:
        return None
    parent = ports.trials.get(op.warm_start_trial_id)
    return parent.latest_checkpoint if parent is not None else None


def _start_run(ports: Ports, experiment: Experiment, trial_id: int, generation: int) -> None:
    config = experiment.parsed_config
    ports.workflows.start(
        keys.execution_name(trial_id, generation),
        {
            "trial_id": trial_id,
            "experiment_id": experiment.id,
            "pool": experiment.job_pool,  # `det job update` may have moved or reprioritized the job
            "slots": config.resources.slots_per_trial or 1,
            "priority": experiment.job_priority,
            "max_restarts": config.max_restarts,
        },
    )


def _continue_trial(ports: Ports, experiment: Experiment, op: searchers.ContinueTrial) -> None:
    trial = ports.trials.get(op.trial_id)
    if trial is None:
        return
    ports.trials.set_searcher_action(op.trial_id, "train", target_length=op.length)
    if trial.state == TrialState.PAUSED:
        # A promotion: resume the paused trial from its latest checkpoint in a new execution. The
        # generation moves on only if the trial is still paused, so a redelivery starts it once.
        resume_paused_trial(ports, experiment, trial)


def resume_paused_trial(ports: Ports, experiment: Experiment, trial: Trial) -> None:
    """Start a paused trial's next execution, once per pause: a promotion and the pause's own event (or
    its redelivery) may both get here while the trial is still PAUSED. While the experiment is paused the
    trial stays PAUSED (`det experiment activate` resumes it)."""
    if experiment.state == ExperimentState.PAUSED:
        return
    if ports.trials.resume_paused(trial.id, trial.generation, trial.attempts):
        _start_run(ports, experiment, trial.id, trial.generation + 1)


def restart_lost_trial(ports: Ports, experiment: Experiment, trial: Trial) -> None:
    """Start a paused trial's next execution after its own was lost with the stack (recovery): as a
    resume, also when a resume of this attempt was claimed by an execution lost before it enqueued."""
    if ports.trials.resume_paused(trial.id, trial.generation, trial.attempts, once=False):
        _start_run(ports, experiment, trial.id, trial.generation + 1)


def _stops_early(trial: Trial, spec: searchers.SearchSpec) -> bool:
    return spec.max_length is not None and (trial.searcher_length or 0) < spec.max_length


def _stop_trial(ports: Ports, trial_id: int, spec: searchers.SearchSpec) -> None:
    trial = ports.trials.get(trial_id)
    if trial is None:
        return
    ports.trials.set_searcher_action(trial_id, "stop", early_stopped=_stops_early(trial, spec))
    if trial.state == TrialState.PAUSED:
        _complete_stopped_paused_trial(ports, trial)


def _carry_out_decision_on_paused_trial(ports: Ports, experiment: Experiment, trial_id: int) -> None:
    """A trial finished pausing. The searcher may have promoted or stopped it meanwhile (its process
    had already been told to stop): carry that out now. Not a searcher event, so nothing is replayed."""
    trial = ports.trials.get(trial_id)
    if trial is None or trial.state != TrialState.PAUSED:
        return
    if trial.searcher_action == "train":
        resume_paused_trial(ports, experiment, trial)
    elif trial.searcher_action == "stop":
        _complete_stopped_paused_trial(ports, trial)


def _complete_stopped_paused_trial(ports: Ports, trial: Trial) -> None:
    """A paused trial the searcher stopped ends here (no process is running to exit); the searcher is
    told, as of any trial that exits."""
    ended = ports.trials.transition(trial.id, TrialState.COMPLETED, end_time=ports.clock.now_iso())
    if ended is not None:
        ports.queues.to_events(
            messages.TrialExited(
                event_id=f"closed-{trial.id}",
                trial_id=trial.id,
                experiment_id=trial.experiment_id,
                state=str(TrialState.COMPLETED),
            ).to_body()
        )


def _on_searcher_shutdown(
    ports: Ports, experiment: Experiment, spec: searchers.SearchSpec, *, failure: bool
) -> None:
    """The searcher shut down. Trials still running (typically on their way to a pause) are told to stop
    and the experiment waits in STOPPING_* for them, as Determined's does; otherwise it ends now."""
    running = [
        t
        for t in ports.trials.for_experiment(experiment.id)
        if not t.state.terminal and t.state != TrialState.PAUSED
    ]
    if not running:
        _end_experiment(ports, experiment, failure=failure)
        return
    for trial in running:
        ports.trials.set_searcher_action(trial.id, "stop", early_stopped=_stops_early(trial, spec))
    stopping = ExperimentState.STOPPING_ERROR if failure else ExperimentState.STOPPING_COMPLETED
    ports.experiments.transition(experiment.id, stopping)


def _end_experiment_once_trials_stopped(
    ports: Ports, experiment: Experiment, message: messages.TrialEvent
) -> None:
    """An event for an experiment waiting in STOPPING_*: end it once no trial is running any more."""
    if isinstance(message, messages.TrialPaused):
        trial = ports.trials.get(message.trial_id)
        if trial is not None and trial.state == TrialState.PAUSED:
            _complete_paused_trial_as_experiment_ends(ports, trial)
    trials = ports.trials.for_experiment(experiment.id)
    if all(t.state.terminal or t.state == TrialState.PAUSED for t in trials):
        _end_experiment(ports, experiment, failure=experiment.state == ExperimentState.STOPPING_ERROR)


def _complete_paused_trial_as_experiment_ends(ports: Ports, trial: Trial) -> None:
    """A paused trial the searcher will not resume is finished where it is, stopped early (the searcher
    has shut down: nobody is told)."""
    ports.trials.set_searcher_action(trial.id, "stop", early_stopped=True)
    ports.trials.transition(trial.id, TrialState.COMPLETED, end_time=ports.clock.now_iso())


def _end_experiment(ports: Ports, experiment: Experiment, *, failure: bool) -> None:
    """COMPLETED if a trial completed and the searcher did not fail, ERROR otherwise; retention applied."""
    for trial in ports.trials.for_experiment(experiment.id):
        if trial.state == TrialState.PAUSED:
            _complete_paused_trial_as_experiment_ends(ports, trial)
    trials = ports.trials.for_experiment(experiment.id)
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
