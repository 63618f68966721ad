"""User-facing routes that stop work (IAM-authorized in AWS): pause an experiment
(`chalicelib.services.pausing`), cancel or kill an experiment, kill a trial (`chalicelib.services.stopping`). Each answers the record as it stands once the request is carried out;
repeating a request is not an error."""

from __future__ import annotations

from chalice.app import Blueprint

from chalicelib.api import models, views
from chalicelib.api.auth import UserPrincipal
from chalicelib.api.routing import route
from chalicelib.services import pausing, stopping
from chalicelib.wiring import ports

bp = Blueprint(__name__)


@route(bp, "/experiments/{experiment_id}/pause", "POST", response=models.ExperimentOnly, auth="iam")
def pause_experiment(user: UserPrincipal, experiment_id: int) -> models.ExperimentOnly:
    """Stop every trial at its next checkpoint and free its slots; queued ones wait unstarted.
    `POST /experiments/{id}/activate` resumes them from their checkpoints."""
    record = pausing.pause_experiment(ports(), experiment_id)
    return models.ExperimentOnly(experiment=views.experiment(record))


@route(bp, "/experiments/{experiment_id}/cancel", "POST", response=models.ExperimentOnly, auth="iam")
def cancel_experiment(user: UserPrincipal, experiment_id: int) -> models.ExperimentOnly:
    """Create no more trials; stop the running ones at their next checkpoint; drop the queued ones."""
    record = stopping.cancel_experiment(ports(), experiment_id)
    return models.ExperimentOnly(experiment=views.experiment(record))


@route(bp, "/experiments/{experiment_id}/kill", "POST", response=models.ExperimentOnly, auth="iam")
def kill_experiment(user: UserPrincipal, experiment_id: int) -> models.ExperimentOnly:
    """Create no more trials; kill the running ones without a checkpoint; drop the queued ones."""
    record = stopping.kill_experiment(ports(), experiment_id)
    return models.ExperimentOnly(experiment=views.experiment(record))


@route(bp, "/trials/{trial_id}/kill", "POST", response=models.TrialOnly, auth="iam")
def kill_trial(user: UserPrincipal, trial_id: int) -> models.TrialOnly:
    """Kill one trial (no checkpoint); its experiment goes on."""
    p = ports()
    record = stopping.kill_trial(p, trial_id)
    return models.TrialOnly(trial=views.trial(p, record))
