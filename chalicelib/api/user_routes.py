"""User-facing routes (IAM-authorized in AWS): contexts, experiments, trials, logs, the API document."""

from __future__ import annotations

from chalice.app import Blueprint, Response

from chalicelib.api import models, views
from chalicelib.api.openapi import VERSION, document
from chalicelib.api.routing import answer, parse, path_id, query_int, query_str, route
from chalicelib.domain import keys
from chalicelib.domain.records import Trial
from chalicelib.errors import BadRequestError, NotFoundError
from chalicelib.services import experiments
from chalicelib.wiring import ports

bp = Blueprint(__name__)


@route(bp, "/health", "GET", response=models.Health, auth="none")
def health() -> Response:
    """Liveness of the API."""
    return answer(models.Health(status="ok", version=VERSION))


@route(bp, "/openapi.json", "GET", response=models.Empty, auth="none")
def openapi() -> Response:
    """This API as an OpenAPI 3 document."""
    return Response(body=document(), status_code=200, headers={"Content-Type": "application/json"})


@route(
    bp,
    "/contexts",
    "POST",
    request=models.ContextUploadRequest,
    response=models.ContextUploadResponse,
    auth="iam",
)
def create_context() -> Response:
    """Where to upload a packed context (nothing to upload when S3 already has it)."""
    body = parse(bp, models.ContextUploadRequest)
    p = ports()
    key = keys.context_key(body.sha256)
    if p.blobs.exists(key):
        return answer(models.ContextUploadResponse(key=key, exists=True, upload=None))
    upload = models.PresignedUpload(url=p.blobs.presign_put(key))
    return answer(models.ContextUploadResponse(key=key, exists=False, upload=upload))


@route(
    bp,
    "/experiments",
    "POST",
    request=models.CreateExperimentRequest,
    response=models.CreateExperimentResponse,
    auth="iam",
)
def create_experiment() -> Response:
    """Validate a config and, unless validate_only, create and start the experiment."""
    body = parse(bp, models.CreateExperimentRequest)
    result = experiments.create(
        ports(), body.config, body.context_sha256, validate_only=body.validate_only, activate=body.activate
    )
    experiment = views.experiment(result.experiment) if result.experiment else None
    return answer(models.CreateExperimentResponse(experiment=experiment, warnings=result.warnings))


@route(bp, "/experiments", "GET", response=models.ExperimentList, auth="iam")
def list_experiments() -> Response:
    """Experiments, newest first."""
    limit = query_int(bp, "limit", 100, minimum=1, maximum=1000) or 100
    offset = query_int(bp, "offset", 0) or 0
    records = ports().experiments.list(limit, offset)
    return answer(models.ExperimentList(experiments=[views.experiment(r) for r in records]))


@route(bp, "/experiments/{experiment_id}", "GET", response=models.ExperimentDetail, auth="iam")
def describe_experiment(experiment_id: str) -> Response:
    """One experiment with its trials."""
    p = ports()
    record = experiments.get(p, path_id(experiment_id, "experiment"))
    trials = [views.trial(p, t) for t in p.trials.for_experiment(record.id)]
    return answer(models.ExperimentDetail(experiment=views.experiment(record), trials=trials))


@route(bp, "/experiments/{experiment_id}/activate", "POST", response=models.ExperimentOnly, auth="iam")
def activate_experiment(experiment_id: str) -> Response:
    """Start (or resume) a paused experiment."""
    record = experiments.activate(ports(), path_id(experiment_id, "experiment"))
    return answer(models.ExperimentOnly(experiment=views.experiment(record)))


@route(bp, "/trials/{trial_id}", "GET", response=models.TrialDetail, auth="iam")
def describe_trial(trial_id: str) -> Response:
    """One trial with its checkpoints."""
    p = ports()
    record = _trial(trial_id)
    checkpoints = [views.checkpoint(p, c) for c in p.checkpoints.for_trial(record.id)]
    return answer(models.TrialDetail(trial=views.trial(p, record), checkpoints=checkpoints))


@route(bp, "/trials/{trial_id}/metrics", "GET", response=models.MetricList, auth="iam")
def trial_metrics(trial_id: str) -> Response:
    """A trial's training or validation metrics, by steps completed."""
    record = _trial(trial_id)
    group = query_str(bp, "group") or "validation"
    if group not in ("training", "validation"):
        raise BadRequestError(f"group={group!r} must be 'training' or 'validation'")
    reports = ports().metrics.list(record.id, group)
    return answer(models.MetricList(metrics=[views.metric(r) for r in reports]))


@route(bp, "/trials/{trial_id}/logs", "GET", response=models.LogPage, auth="iam")
def trial_logs(trial_id: str) -> Response:
    """A page of a trial's logs; pass next_token back to follow."""
    record = _trial(trial_id)
    limit = query_int(bp, "limit", 1000, minimum=1, maximum=10_000) or 1000
    tail = query_int(bp, "tail", None, minimum=1, maximum=10_000)
    rank = query_int(bp, "rank", None, minimum=0, maximum=100_000)
    token = query_str(bp, "next_token")
    lines, next_token = ports().logs.get(record.id, limit, token, tail)
    if rank is not None:
        lines = [line for line in lines if line.get("rank") == rank]
    page = models.LogPage(
        logs=[models.LogLine.model_validate(line) for line in lines],
        next_token=next_token,
        trial_state=str(record.state),
    )
    return answer(page)


def _trial(trial_id: str) -> Trial:
    number = path_id(trial_id, "trial")
    record = ports().trials.get(number)
    if record is None:
        raise NotFoundError(
            f"trial {number} not found; `det experiment describe` lists an experiment's trials"
        )
    return record
