"""User-facing routes (IAM-authorized in AWS) that read an experiment's trials and checkpoints, hand out a
checkpoint's files, change an experiment's name, description, labels or slot limit, and delete an ended
experiment (`chalicelib.services.checkpoints`, `.experiment_edits`, `.deleting`)."""

from __future__ import annotations

from chalice.app import Blueprint

from chalicelib.api import models, views
from chalicelib.api import queue_models as qm
from chalicelib.api.auth import UserPrincipal
from chalicelib.api.routing import int_query, query_int, route
from chalicelib.services import checkpoint_deletion, checkpoints, deleting, experiment_edits, experiments
from chalicelib.wiring import ports

bp = Blueprint(__name__)


@route(bp, "/experiments/{experiment_id}/trials", "GET", response=models.TrialList, auth="iam")
def list_trials(user: UserPrincipal, experiment_id: int) -> models.TrialList:
    """An experiment's trials, by id."""
    p = ports()
    record = experiments.get(p, experiment_id)
    return models.TrialList(trials=[views.trial(p, t) for t in p.trials.for_experiment(record.id)])


@route(
    bp,
    "/experiments/{experiment_id}/checkpoints",
    "GET",
    response=models.ExperimentCheckpointList,
    auth="iam",
    query={"best": int_query(1, 100_000, "the N best by the searcher metric")},
)
def list_checkpoints(user: UserPrincipal, experiment_id: int) -> models.ExperimentCheckpointList:
    """An experiment's checkpoints by report time, or (`?best=N`) its N best by the searcher metric."""
    p = ports()
    best = query_int(bp, "best", None, minimum=1, maximum=100_000)
    experiment, found = checkpoints.for_experiment(p, experiment_id, best)
    searcher = experiment.parsed_config.searcher
    listed = [
        models.ValidatedCheckpoint(
            **views.checkpoint(p, c.checkpoint).model_dump(),
            validation_metrics=c.validation,
            searcher_metric_value=c.searcher_value,
        )
        for c in found
    ]
    return models.ExperimentCheckpointList(
        searcher_metric=searcher.metric, smaller_is_better=searcher.smaller_is_better, checkpoints=listed
    )


@route(
    bp,
    "/experiments/{experiment_id}",
    "PATCH",
    request=qm.ExperimentChange,
    response=models.ExperimentOnly,
    auth="iam",
)
def edit_experiment(
    user: UserPrincipal, body: qm.ExperimentChange, experiment_id: int
) -> models.ExperimentOnly:
    """Change an experiment's name, description, labels (added and removed by name) or slot limit
    (`max_slots`, 0: none); fields left out stay as they are."""
    change = experiment_edits.ExperimentEdit(**body.model_dump())
    return models.ExperimentOnly(
        experiment=views.experiment(experiment_edits.edit(ports(), experiment_id, change))
    )


@route(bp, "/experiments/{experiment_id}", "DELETE", response=models.ExperimentDeletion, auth="iam")
def delete_experiment(user: UserPrincipal, experiment_id: int) -> models.ExperimentDeletion:
    """Delete an ended experiment with its checkpoints, metrics, logs and trials (409 unless ended)."""
    done = deleting.delete_experiment(ports(), experiment_id)
    return models.ExperimentDeletion(
        experiment_id=done.experiment_id, deleted=done.deleted, trials_left=done.trials_left
    )


@route(bp, "/checkpoints/{uuid}", "GET", response=models.CheckpointOnly, auth="iam")
def describe_checkpoint(user: UserPrincipal, uuid: str) -> models.CheckpointOnly:
    """One checkpoint."""
    p = ports()
    return models.CheckpointOnly(checkpoint=views.checkpoint(p, checkpoints.get(p, uuid)))


@route(bp, "/checkpoints/{uuid}/files", "GET", response=models.CheckpointDownloads, auth="iam")
def checkpoint_files(user: UserPrincipal, uuid: str) -> models.CheckpointDownloads:
    """A checkpoint and a presigned GET URL for each of its files (409 once its files were deleted)."""
    p = ports()
    checkpoint, urls = checkpoints.download_urls(p, uuid)
    return models.CheckpointDownloads(checkpoint=views.checkpoint(p, checkpoint), urls=urls)


@route(
    bp,
    "/checkpoint-deletions",
    "POST",
    request=qm.CheckpointDeletionRequest,
    response=qm.CheckpointDeletion,
    auth="iam",
)
def delete_checkpoints(user: UserPrincipal, body: qm.CheckpointDeletionRequest) -> qm.CheckpointDeletion:
    """Delete checkpoints' files and mark them DELETED (not the latest of a trial that has not ended: it
    resumes from it); every uuid is checked before any is deleted."""
    done = checkpoint_deletion.delete(ports(), body.uuids)
    return qm.CheckpointDeletion(deleted=done.deleted, already_deleted=done.already_deleted)
