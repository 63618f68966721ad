"""User-facing routes (IAM-authorized in AWS): contexts, experiments, trials, logs, the API document.

Each route's registration parses the body and the path's ids; a view gets the principal (`UserPrincipal`,
or `Anonymous` on the open routes) and the parsed body, and answers with its response model."""

from __future__ import annotations

from chalice.app import Blueprint, Response

from chalicelib.api import models, views
from chalicelib.api.auth import Anonymous, UserPrincipal
from chalicelib.api.openapi import document
from chalicelib.api.routing import int_query, query_int, query_str, route, str_query
from chalicelib.errors import BadRequestError
from chalicelib.services import contexts, experiments, jobs, pausing, runs, trial_reports
from chalicelib.wiring import ports
from stratus.contract.log_levels import LEVELS, at_or_above
from stratus.contract.metric_groups import VALIDATION
from stratus.contract.versions import api_health, api_info

bp = Blueprint(__name__)


@route(bp, "/health", "GET", response=models.Health, auth="none")
def health(principal: Anonymous) -> models.Health:
    """Liveness of the API (on AWS, API Gateway answers it itself: `infra/aws/template_app.py`)."""
    return models.Health(**api_health())


@route(bp, "/info", "GET", response=models.Info, auth="none")
def info(principal: Anonymous) -> models.Info:
    """The API's version (its code's: `stratus.contract.versions`), the oldest CLI and agent it answers, and
    the stack it belongs to (as Determined's master answers `GET /info`)."""
    settings = ports().settings
    return models.Info(**api_info(settings.stack, settings.region))  # on AWS, API Gateway answers it


@route(bp, "/openapi.json", "GET", response=models.Empty, auth="none")
def openapi(principal: Anonymous) -> Response:
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
def create_context(user: UserPrincipal, body: models.ContextUploadRequest) -> models.ContextUploadResponse:
    """Where to upload a packed context (nothing to upload when S3 already has it, verified)."""
    offer = contexts.offer_upload(ports(), body.sha256, body.size)
    if offer.exists or offer.url is None:
        return models.ContextUploadResponse(key=offer.key, exists=True, upload=None)
    upload = models.PresignedUpload(url=offer.url, headers=offer.headers or {})
    return models.ContextUploadResponse(key=offer.key, exists=False, upload=upload)


@route(
    bp,
    "/experiments",
    "POST",
    request=models.CreateExperimentRequest,
    response=models.CreateExperimentResponse,
    auth="iam",
)
def create_experiment(
    user: UserPrincipal, body: models.CreateExperimentRequest
) -> models.CreateExperimentResponse:
    """Validate a config and, unless validate_only, create and start the experiment."""
    result = experiments.create(
        ports(),
        body.config,
        body.context_sha256,
        validate_only=body.validate_only,
        activate=body.activate,
        owner=user.owner,
        archived=body.archived,
    )
    experiment = views.experiment(result.experiment) if result.experiment else None
    return models.CreateExperimentResponse(experiment=experiment, warnings=result.warnings)


@route(
    bp,
    "/experiments",
    "GET",
    response=models.ExperimentList,
    auth="iam",
    query={
        "limit": int_query(1, 1000, "experiments per page (100)"),
        "cursor": str_query("the next_cursor of the page before", maxLength=200),
        "archived": str_query("false: hide the archived ones; true: only them", enum=["true", "false"]),
    },
)
def list_experiments(user: UserPrincipal) -> models.ExperimentList:
    """Experiments, newest first; archived=false hides the archived ones, archived=true shows only them.
    Pages with `cursor`: the `next_cursor` of the page before (null: it was the last)."""
    limit = query_int(bp, "limit", 100, minimum=1, maximum=1000) or 100
    records, cursor = experiments.list_experiments(
        ports(), limit, query_str(bp, "cursor"), archived=_query_bool("archived")
    )
    return models.ExperimentList(experiments=[views.experiment(r) for r in records], next_cursor=cursor)


@route(bp, "/experiments/{experiment_id}", "GET", response=models.ExperimentDetail, auth="iam")
def describe_experiment(user: UserPrincipal, experiment_id: int) -> models.ExperimentDetail:
    """One experiment with its trials."""
    p = ports()
    record = experiments.get(p, experiment_id)
    stored = p.trials.for_experiment(record.id)
    trials = [views.trial(p, t) for t in stored]
    return models.ExperimentDetail(
        experiment=views.experiment(record), trials=trials, cost=views.experiment_cost(stored)
    )


@route(bp, "/experiments/{experiment_id}/activate", "POST", response=models.ExperimentOnly, auth="iam")
def activate_experiment(user: UserPrincipal, experiment_id: int) -> models.ExperimentOnly:
    """Start (or resume) a paused experiment."""
    record = pausing.activate_experiment(ports(), experiment_id)
    return models.ExperimentOnly(experiment=views.experiment(record))


@route(bp, "/experiments/{experiment_id}/archive", "POST", response=models.ExperimentOnly, auth="iam")
def archive_experiment(user: UserPrincipal, experiment_id: int) -> models.ExperimentOnly:
    """Archive an experiment that has ended: `det experiment list` hides it unless --all."""
    return models.ExperimentOnly(experiment=views.experiment(experiments.archive(ports(), experiment_id)))


@route(bp, "/experiments/{experiment_id}/unarchive", "POST", response=models.ExperimentOnly, auth="iam")
def unarchive_experiment(user: UserPrincipal, experiment_id: int) -> models.ExperimentOnly:
    """Unarchive an archived experiment."""
    return models.ExperimentOnly(experiment=views.experiment(experiments.unarchive(ports(), experiment_id)))


@route(
    bp,
    "/jobs",
    "GET",
    response=models.JobList,
    auth="iam",
    query={"resource_pool": str_query("the pool (default)", minLength=1, maxLength=64)},
)
def list_jobs(user: UserPrincipal) -> models.JobList:
    """A resource pool's job queue (`?resource_pool=`, default unless given), in scheduling order."""
    pool = query_str(bp, "resource_pool") or "default"
    return models.JobList(jobs=[views.job(j) for j in jobs.list_jobs(ports(), pool)])


@route(bp, "/trials/{trial_id}", "GET", response=models.TrialDetail, auth="iam")
def describe_trial(user: UserPrincipal, trial_id: int) -> models.TrialDetail:
    """One trial with its checkpoints."""
    p = ports()
    record = runs.get_trial(ports(), trial_id)
    checkpoints = [views.checkpoint(p, c) for c in p.checkpoints.for_trial(record.id)]
    return models.TrialDetail(trial=views.trial(p, record), checkpoints=checkpoints)


@route(
    bp,
    "/trials/{trial_id}/metrics",
    "GET",
    response=models.MetricList,
    auth="iam",
    query={"group": str_query("training, validation (default) or a custom group", minLength=1, maxLength=64)},
)
def trial_metrics(user: UserPrincipal, trial_id: int) -> models.MetricList:
    """A trial's metrics of one group (`?group=`, validation unless given), by steps completed."""
    record = runs.get_trial(ports(), trial_id)
    group = trial_reports.metric_group(query_str(bp, "group") or VALIDATION)
    reports = ports().metrics.list(record.id, group)
    return models.MetricList(metrics=[views.metric(r) for r in reports])


@route(bp, "/trials/{trial_id}/metric-groups", "GET", response=models.MetricGroupList, auth="iam")
def trial_metric_groups(user: UserPrincipal, trial_id: int) -> models.MetricGroupList:
    """The groups a trial reported metrics under: training, validation, then custom groups by name."""
    record = runs.get_trial(ports(), trial_id)
    return models.MetricGroupList(groups=ports().metrics.groups(record.id))


@route(
    bp,
    "/trials/{trial_id}/logs",
    "GET",
    response=models.LogPage,
    auth="iam",
    query={
        "limit": int_query(1, 10_000, "lines per page (1000)"),
        "tail": int_query(1, 10_000, "the last N lines"),
        "rank": int_query(0, 100_000, "only the lines of this rank"),
        "level": str_query("only lines of this level or higher", enum=list(LEVELS)),
        "next_token": str_query("the next_token of the page before", maxLength=512),
    },
)
def trial_logs(user: UserPrincipal, trial_id: int) -> models.LogPage:
    """A page of a trial's logs; pass next_token back to follow. rank and level (the lines of that level
    or higher, `stratus.contract.log_levels`) filter the page, so a filtered page may be empty mid-stream."""
    record = runs.get_trial(ports(), trial_id)
    limit = query_int(bp, "limit", 1000, minimum=1, maximum=10_000) or 1000
    tail = query_int(bp, "tail", None, minimum=1, maximum=10_000)
    rank = query_int(bp, "rank", None, minimum=0, maximum=100_000)
    level = (query_str(bp, "level") or "").upper() or None
    if level is not None and level not in LEVELS:
        raise BadRequestError(f"level={level!r} must be one of {', '.join(LEVELS)}")
    token = query_str(bp, "next_token")
    lines, next_token = ports().logs.get(record.id, limit, token, tail)
    lines_read = len(lines)
    if rank is not None:
        lines = [line for line in lines if line.rank == rank]
    if level is not None:
        lines = [line for line in lines if at_or_above(line.message, level)]
    return models.LogPage(
        logs=[views.log_line(line) for line in lines],
        next_token=next_token,
        trial_state=str(record.state),
        lines_read=lines_read,
    )


def _query_bool(name: str) -> bool | None:
    value = query_str(bp, name)
    if value is None:
        return None
    if value.lower() not in ("true", "false"):
        raise BadRequestError(f"query parameter {name}={value!r} must be true or false")
    return value.lower() == "true"
