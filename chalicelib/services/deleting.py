"""`det experiment delete ID`, as Determined does it: only an experiment that has ended (COMPLETED,
CANCELED or ERROR) is deleted, and not while an experiment that has not ended starts its trials from one of
its checkpoints (`chalicelib.services.warm_start`); it goes DELETING (a conditional write, `domain.states`),
then its checkpoints (S3 and their records), metrics, logs, runs, trials, its CloudWatch dashboard
(`det experiment dashboard`) and finally its own record are removed, after which it is a 404 like any
unknown id.

Where the work runs: the request removes up to `IN_REQUEST_TRIALS` trials, which finishes a small
experiment before it answers. A larger one would not fit: API Gateway gives a request 29 s, and each
trial costs a few dozen S3 / DynamoDB / CloudWatch calls (~0.5 s), so a random search of a few hundred
trials must not be deleted in one request. What is left goes on through the events queue
(`stratus.contract.messages.DeleteExperiment`), `PER_MESSAGE_TRIALS` trials a message, each message sending the
next one until nothing is left.

Every step is idempotent and resumable: a trial's record is removed last among its data, so a repeat (a
redelivered message, a second `det experiment delete`, a crash in between) finds what is left and goes
on; the experiment's record goes last of all, so an experiment in DELETING always still shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from chalicelib.domain import dashboards, keys
from chalicelib.domain.records import Trial
from chalicelib.domain.states import ExperimentState
from chalicelib.errors import ConflictError, NotFoundError
from chalicelib.services import warm_start
from chalicelib.services.ports import Ports
from stratus.contract import messages

IN_REQUEST_TRIALS = 10
PER_MESSAGE_TRIALS = 100


@dataclass(frozen=True)
class Deletion:
    """Where a deletion stands: `deleted` once the experiment's record is gone, else the trials left."""

    experiment_id: int
    deleted: bool
    trials_left: int


def delete_experiment(
    ports: Ports, experiment_id: int, *, in_request_trials: int = IN_REQUEST_TRIALS
) -> Deletion:
    """Move an ended experiment to DELETING and remove what one request may; the rest goes on through the
    events queue. An experiment in DELETING already is carried on (a repeated or resumed delete)."""
    experiment = ports.experiments.get(experiment_id)
    if experiment is None:
        raise NotFoundError(
            f"experiment {experiment_id} not found; `det experiment list --all` shows the ids"
        )
    if experiment.state != ExperimentState.DELETING:
        if not experiment.state.terminal:
            raise ConflictError(
                f"experiment {experiment_id} is {experiment.state}: only an experiment that has ended "
                f"(COMPLETED, CANCELED or ERROR) can be deleted; stop it first with "
                f"`det experiment cancel {experiment_id}` (or `det experiment kill {experiment_id}`), "
                "then delete it"
            )
        warm_start.refuse_deleting_experiment(ports, experiment_id)  # 409 while another starts from it
        if ports.experiments.transition(experiment_id, ExperimentState.DELETING) is None:
            again = ports.experiments.get(experiment_id)
            if again is None or again.state != ExperimentState.DELETING:
                raise ConflictError(
                    f"experiment {experiment_id} changed state meanwhile; run `det experiment delete "
                    f"{experiment_id}` again"
                )
    return carry_on(ports, experiment_id, max_trials=in_request_trials)


def carry_on(ports: Ports, experiment_id: int, *, max_trials: int = PER_MESSAGE_TRIALS) -> Deletion:
    """Remove up to `max_trials` trials of an experiment in DELETING with everything they hold, and the
    experiment itself once none is left; when some are, send the message that goes on. An experiment
    that is gone (done already) or not in DELETING (a stray message) is left as it is."""
    experiment = ports.experiments.get(experiment_id)
    if experiment is None:
        return Deletion(experiment_id, deleted=True, trials_left=0)
    if experiment.state != ExperimentState.DELETING:
        return Deletion(experiment_id, deleted=False, trials_left=experiment.num_trials)
    trials = ports.trials.for_experiment(experiment_id)
    for trial in trials[:max_trials]:
        _delete_trial(ports, trial)
    left = max(0, len(trials) - max_trials)
    if left:
        ports.queues.to_events(messages.DeleteExperiment(experiment_id=experiment_id).to_body())
        return Deletion(experiment_id, deleted=False, trials_left=left)
    # Files of checkpoints uploaded but never reported (a trial that died mid-upload) lie here too.
    ports.blobs.delete_prefix(keys.experiment_checkpoints_prefix(experiment_id))
    # Billed by the month until deleted (one made by `det experiment dashboard`; none: nothing to do).
    ports.telemetry.delete_dashboard(dashboards.dashboard_name(ports.settings.stack, experiment_id))
    ports.experiments.delete(experiment_id)
    return Deletion(experiment_id, deleted=True, trials_left=0)


def _delete_trial(ports: Ports, trial: Trial) -> None:
    ports.blobs.delete_prefix(keys.trial_checkpoints_prefix(trial.experiment_id, trial.id))
    for checkpoint in ports.checkpoints.for_trial(trial.id):
        ports.checkpoints.delete(checkpoint.uuid)
    ports.metrics.delete_for_trial(trial.id)
    ports.logs.delete(trial.id)
    for attempt in range(1, trial.attempts + 1):
        run_id = keys.run_id(trial.id, attempt)
        run = ports.runs.get(run_id)
        if run is not None:
            for rank in range(len(run.nodes)):
                ports.runs.delete(keys.node_id(run_id, rank))
        ports.runs.delete(run_id)
    if trial.request_id:
        ports.ids.forget(keys.trial_request_claim(trial.experiment_id, trial.request_id))
    ports.trials.delete(trial.id)  # last: what is left of a trial is found through its record
