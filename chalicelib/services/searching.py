"""Running an experiment's searcher: feed it events, persist its snapshot, carry out its operations.

The snapshot is saved with a conditional write on `searcher_version` before any operation is carried
out, so two consumers racing on the same experiment cannot both act; the loser raises and SQS delivers
the event again, by which time the winner's snapshot already holds it (so it is a no-op). Operations are
idempotent on their own too: a trial is created once per searcher request id, executions are named.

Per trial, the searcher's wishes live on the trial record: `target_length` (train until there),
`searcher_action` (`train`, `pause` or `stop`) and `searcher_pending` (a validation at the target has
been reported and the searcher has not answered yet). The trial reads them through
`GET /trials/{id}/searcher` (see `trial_api.searcher_state`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib import config as cfg
from chalicelib.domain import keys
from chalicelib.domain.searchers import (
    ContinueTrial,
    CreateTrial,
    Operation,
    PauseTrial,
    Searcher,
    SearchSpec,
    Shutdown,
    StopTrial,
    TrialCreated,
    TrialExited,
    ValidationReported,
    new_searcher,
    restore_searcher,
)
from chalicelib.domain.states import ExperimentState, TrialState
from chalicelib.errors import ConflictError
from chalicelib.services import retention
from chalicelib.services.clock import now_iso
from chalicelib.services.ports import Ports, Record
from contract import messages


class StaleSearcherError(ConflictError):
    """Another consumer updated the searcher first; the event will be delivered again."""


def search_spec(config: Mapping[str, Any]) -> SearchSpec:
    """The searcher's inputs from a stored (JSON) config."""
    parsed = cfg.parse_experiment_config(config).config
    settings = parsed.searcher.model_dump(mode="json")
    max_length = (
        settings.get("max_time") if settings.get("time_metric") else parsed.searcher_max_length_batches()
    )
    seed = int((config.get("reproducibility") or {}).get("experiment_seed") or 0)
    return SearchSpec(
        space=config.get("hyperparameters") or {},
        settings=settings,
        max_length=int(max_length) if max_length is not None else None,
        seed=seed,
    )


def start(ports: Ports, experiment_id: int) -> None:
    experiment = ports.experiments.get(experiment_id)
    if experiment is None or "searcher" in experiment:
        return  # already started (a redelivered activation)
    spec = search_spec(experiment["config"])
    searcher = new_searcher(spec)
    _save_and_apply(ports, experiment, spec, searcher, searcher.initial_operations(), version=0)


def handle_event(ports: Ports, message: messages.TrialEvent) -> None:
    experiment = ports.experiments.get(message.experiment_id)
    if experiment is None or "searcher" not in experiment:
        return
    state = ExperimentState(experiment["state"])
    if state.terminal:
        return
    if state in (ExperimentState.STOPPING_COMPLETED, ExperimentState.STOPPING_ERROR):
        _settle_stopping(ports, experiment, message)
        return
    spec = search_spec(experiment["config"])  # parsed once per event
    searcher = restore_searcher(experiment["searcher"], spec)
    trial_id = message.trial_id
    if isinstance(message, messages.TrialPaused):
        _settle_paused(ports, experiment, trial_id)
        return
    if isinstance(message, messages.TrialExited):
        trial = ports.trials.get(trial_id)
        failed = trial is None or trial["state"] != TrialState.COMPLETED
        invalid = bool(trial and trial.get("invalid_hp"))
        event: TrialExited | ValidationReported = TrialExited(
            event_id=message.event_id,
            trial_id=trial_id,
            failed=failed and not invalid,
            invalid_hp=invalid,
        )
    else:
        event = ValidationReported(
            event_id=message.event_id,
            trial_id=trial_id,
            length=message.length,
            metric=message.metric,
        )
    ops = searcher.on_event(event)
    _save_and_apply(
        ports, experiment, spec, searcher, ops, version=int(experiment.get("searcher_version", 0))
    )
    if isinstance(event, ValidationReported):
        # Answered (possibly with nothing: the target stands, or the trial is done).
        ports.trials.update(trial_id, searcher_pending=False)


def _save_and_apply(
    ports: Ports, experiment: Record, spec: SearchSpec, searcher: Searcher, ops: list[Operation], version: int
) -> None:
    experiment_id = int(experiment["id"])
    version = _save(ports, experiment_id, searcher, version)
    for op in ops:
        if isinstance(op, CreateTrial):
            trial_id = _create_trial(ports, experiment, op)
            # Tell the searcher the trial's id; saved before the next operation runs.
            searcher.on_event(TrialCreated(f"created-{op.request_id}", op.request_id, trial_id))
            version = _save(ports, experiment_id, searcher, version)
        elif isinstance(op, ContinueTrial):
            _continue_trial(ports, experiment, op)
        elif isinstance(op, PauseTrial):
            ports.trials.update(op.trial_id, searcher_action="pause")
        elif isinstance(op, StopTrial):
            _stop_trial(ports, op.trial_id, spec)
        elif isinstance(op, Shutdown):
            _finish(ports, experiment, spec, failure=op.failure)
    ports.experiments.update(experiment_id, progress=round(searcher.progress(), 4))


def _save(ports: Ports, experiment_id: int, searcher: Searcher, version: int) -> int:
    if not ports.experiments.save_searcher(experiment_id, searcher.snapshot(), expected_version=version):
        raise StaleSearcherError(f"searcher of experiment {experiment_id} changed meanwhile; retrying")
    return version + 1


def _create_trial(ports: Ports, experiment: Record, op: CreateTrial) -> int:
    config = experiment["config"]
    experiment_id = int(experiment["id"])
    # Claimed once per request id, so a redelivered event finds the trial it already created.
    trial_id = ports.ids.claim(f"trial-request:{experiment_id}:{op.request_id}", "trial")
    ports.trials.create(
        {
            "id": trial_id,
            "experiment_id": experiment_id,
            "request_id": op.request_id,
            "state": str(TrialState.QUEUED),
            "hparams": op.hparams,
            "attempts": 0,
            "generation": 0,
            "start_time": now_iso(),
            "trial_seed": (int(config["reproducibility"]["experiment_seed"]) + trial_id) % 2**31,
            "searcher_action": "train",
            **({"target_length": op.length} if op.length is not None else {}),
        }
    )
    ports.experiments.update(experiment_id, num_trials=len(ports.trials.for_experiment(experiment_id)))
    _start_run(ports, experiment, trial_id, generation=0)
    return trial_id


def _start_run(ports: Ports, experiment: Record, trial_id: int, generation: int) -> None:
    config = experiment["config"]
    resources = config.get("resources") or {}
    ports.workflows.start(
        keys.execution_name(trial_id, generation),
        {
            "trial_id": trial_id,
            "experiment_id": int(experiment["id"]),
            "pool": resources.get("resource_pool") or "default",
            "slots": int(resources.get("slots_per_trial") or 1),
            "priority": int(resources.get("priority") or 42),
            "max_restarts": int(config.get("max_restarts", 5)),
        },
    )


def _continue_trial(ports: Ports, experiment: Record, op: ContinueTrial) -> None:
    trial = ports.trials.get(op.trial_id)
    if trial is None:
        return
    ports.trials.update(op.trial_id, target_length=op.length, searcher_action="train")
    if trial["state"] == TrialState.PAUSED:
        # A promotion: resume the paused trial from its latest checkpoint in a new execution. The
        # generation moves on only if the trial is still paused, so a redelivery starts it once.
        generation = int(trial.get("generation", 0)) + 1
        if ports.trials.bump_generation(op.trial_id, expected=generation - 1):
            _start_run(ports, experiment, op.trial_id, generation)


def _stop_trial(ports: Ports, trial_id: int, spec: SearchSpec) -> None:
    trial = ports.trials.get(trial_id)
    if trial is None:
        return
    early = spec.max_length is not None and int(trial.get("searcher_length", 0)) < spec.max_length
    ports.trials.update(trial_id, searcher_action="stop", early_stopped=early)
    if trial["state"] == TrialState.PAUSED:
        _close_paused(ports, trial)


def _settle_paused(ports: Ports, experiment: Record, trial_id: int) -> None:
    """A trial finished pausing. The searcher may have promoted or stopped it meanwhile (its process
    had already been told to stop): carry that out now. Not a searcher event, so nothing is replayed."""
    trial = ports.trials.get(trial_id)
    if trial is None or trial["state"] != TrialState.PAUSED:
        return
    action = trial.get("searcher_action")
    if action == "train":
        generation = int(trial.get("generation", 0)) + 1
        if ports.trials.bump_generation(trial_id, expected=generation - 1):
            _start_run(ports, experiment, trial_id, generation)
    elif action == "stop":
        _close_paused(ports, trial)


def _close_paused(ports: Ports, trial: Record) -> None:
    """A paused trial the searcher will not resume ends here (no process is running to exit)."""
    if ports.trials.transition(int(trial["id"]), str(TrialState.COMPLETED), end_time=now_iso()) is not None:
        ports.queues.to_events(
            messages.TrialExited(
                event_id=f"closed-{trial['id']}",
                trial_id=int(trial["id"]),
                experiment_id=int(trial["experiment_id"]),
                state=str(TrialState.COMPLETED),
            ).to_body()
        )


def _finish(ports: Ports, experiment: Record, spec: SearchSpec, *, failure: bool) -> None:
    """The searcher shut down. Trials still running (typically on their way to a pause) are told to stop
    and the experiment waits in STOPPING_* for them, as Determined's does; otherwise it ends now."""
    experiment_id = int(experiment["id"])
    running = [
        t
        for t in ports.trials.for_experiment(experiment_id)
        if not TrialState(t["state"]).terminal and t["state"] != TrialState.PAUSED
    ]
    if not running:
        _end(ports, experiment, failure=failure)
        return
    for trial in running:
        early = spec.max_length is not None and int(trial.get("searcher_length", 0)) < spec.max_length
        ports.trials.update(int(trial["id"]), searcher_action="stop", early_stopped=early)
    stopping = ExperimentState.STOPPING_ERROR if failure else ExperimentState.STOPPING_COMPLETED
    ports.experiments.transition(experiment_id, str(stopping))


def _settle_stopping(ports: Ports, experiment: Record, message: messages.TrialEvent) -> None:
    """An event for an experiment waiting in STOPPING_*: end it once no trial is running any more."""
    if isinstance(message, messages.TrialPaused):
        trial = ports.trials.get(message.trial_id)
        if trial is not None and trial["state"] == TrialState.PAUSED:
            _close(ports, trial)
    trials = ports.trials.for_experiment(int(experiment["id"]))
    if all(TrialState(t["state"]).terminal or t["state"] == TrialState.PAUSED for t in trials):
        _end(ports, experiment, failure=experiment["state"] == ExperimentState.STOPPING_ERROR)


def _close(ports: Ports, trial: Record) -> None:
    ports.trials.update(int(trial["id"]), searcher_action="stop", early_stopped=True)
    ports.trials.transition(int(trial["id"]), str(TrialState.COMPLETED), end_time=now_iso())


def _end(ports: Ports, experiment: Record, *, failure: bool) -> None:
    experiment_id = int(experiment["id"])
    for trial in ports.trials.for_experiment(experiment_id):
        if trial["state"] == TrialState.PAUSED:
            _close(ports, trial)  # paused trials the searcher will not resume: finished where they are
    trials = ports.trials.for_experiment(experiment_id)
    any_completed = any(t["state"] == TrialState.COMPLETED for t in trials)
    target = ExperimentState.COMPLETED if any_completed and not failure else ExperimentState.ERROR
    # Retention first: if it fails, the event comes again while the experiment has not ended.
    retention.apply(ports, experiment, trials)
    ports.experiments.transition(experiment_id, str(target), end_time=now_iso())
