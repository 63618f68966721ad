"""Routes for the compute side: agents (agent token) and trial processes (run token, own trial only)."""

from __future__ import annotations

from chalice.app import Blueprint, Response

from chalicelib.api import models, views
from chalicelib.api.routing import answer, parse, path_id, route
from chalicelib.domain.run_records import Run
from chalicelib.errors import ForbiddenError
from chalicelib.services import runs, tokens, trial_reports
from chalicelib.settings import get_settings
from chalicelib.wiring import ports

bp = Blueprint(__name__)


def _agent(agent_id: str) -> str:
    tokens.check_agent_token(get_settings().agent_token, _authorization())
    if not agent_id or len(agent_id) > 128:
        raise ForbiddenError(f"agent id {agent_id!r} must be 1 to 128 characters")
    return agent_id


def _run(trial_id: str) -> Run:
    return trial_reports.authorize_run(ports(), _authorization(), path_id(trial_id, "trial"))


def _authorization() -> str | None:
    headers = bp.current_request.headers
    value = headers.get("authorization")
    return str(value) if value is not None else None


# ---- agents ---------------------------------------------------------------------------------------


@route(
    bp,
    "/agents/{agent_id}/heartbeat",
    "POST",
    request=models.AgentHeartbeat,
    response=models.AgentInstructions,
    auth="agent",
)
def agent_heartbeat(agent_id: str) -> Response:
    """An agent's capacity and running runs in; runs to launch and to kill out."""
    body = parse(bp, models.AgentHeartbeat)
    instructions = runs.heartbeat(ports(), _agent(agent_id), body.pool, body.slots, body.running)
    return answer(models.AgentInstructions.model_validate(instructions))


@route(
    bp,
    "/agents/{agent_id}/runs/{run_id}/started",
    "POST",
    request=models.RunStarted,
    response=models.Empty,
    auth="agent",
)
def run_started(agent_id: str, run_id: str) -> Response:
    """The agent started a run's process."""
    body = parse(bp, models.RunStarted)
    runs.started(ports(), _agent(agent_id), run_id, body.pid)
    return answer(models.Empty())


@route(
    bp,
    "/agents/{agent_id}/runs/{run_id}/exit",
    "POST",
    request=models.RunExited,
    response=models.Empty,
    auth="agent",
)
def run_exited(agent_id: str, run_id: str) -> Response:
    """A run's process ended; the trial's workflow moves on."""
    body = parse(bp, models.RunExited)
    runs.exited(ports(), _agent(agent_id), run_id, body.exit_code, body.reason, body.failed_rank)
    return answer(models.Empty())


@route(bp, "/trials/{trial_id}/logs", "POST", request=models.LogBatch, response=models.Empty, auth="agent")
def put_logs(trial_id: str) -> Response:
    """Log lines of a run, shipped by its agent."""
    tokens.check_agent_token(get_settings().agent_token, _authorization())
    body = parse(bp, models.LogBatch)
    lines = [line.model_dump() for line in body.lines]
    runs.store_logs(ports(), path_id(trial_id, "trial"), body.run_id, body.seq, lines)
    return answer(models.Empty())


# ---- trials ---------------------------------------------------------------------------------------


@route(bp, "/trials/{trial_id}/info", "GET", response=models.TrialInfo, auth="run")
def trial_info(trial_id: str) -> Response:
    """What a trial needs to start: hyperparameters, latest checkpoint, config."""
    return answer(models.TrialInfo.model_validate(trial_reports.trial_info(ports(), _run(trial_id))))


@route(
    bp, "/trials/{trial_id}/metrics", "POST", request=models.MetricReport, response=models.Empty, auth="run"
)
def report_metrics(trial_id: str) -> Response:
    """Training or validation metrics at a number of steps completed (idempotent)."""
    run = _run(trial_id)
    body = parse(bp, models.MetricReport)
    trial_reports.report_metrics(ports(), run, body.group, body.steps_completed, body.metrics)
    return answer(models.Empty())


@route(
    bp,
    "/trials/{trial_id}/progress",
    "POST",
    request=models.ProgressReport,
    response=models.Empty,
    auth="run",
)
def report_progress(trial_id: str) -> Response:
    """The trial's own estimate of its progress, 0 to 1."""
    run = _run(trial_id)
    body = parse(bp, models.ProgressReport)
    trial_reports.report_progress(ports(), run, body.progress)
    return answer(models.Empty())


@route(
    bp,
    "/trials/{trial_id}/heartbeat",
    "POST",
    request=models.TrialHeartbeat,
    response=models.HeartbeatAnswer,
    auth="run",
)
def trial_heartbeat(trial_id: str) -> Response:
    """Liveness of a trial; answers whether it should checkpoint and stop."""
    return answer(models.HeartbeatAnswer.model_validate(trial_reports.heartbeat(ports(), _run(trial_id))))


@route(
    bp,
    "/trials/{trial_id}/checkpoints/uploads",
    "POST",
    request=models.CheckpointUploadRequest,
    response=models.CheckpointUploadAnswer,
    auth="run",
)
def checkpoint_uploads(trial_id: str) -> Response:
    """Presigned PUT URLs for a new checkpoint's files, under the trial's own prefix."""
    run = _run(trial_id)
    body = parse(bp, models.CheckpointUploadRequest)
    urls = trial_reports.checkpoint_uploads(ports(), run, body.uuid, body.files)
    return answer(models.CheckpointUploadAnswer.model_validate(urls))


@route(
    bp,
    "/trials/{trial_id}/checkpoints",
    "POST",
    request=models.CheckpointReport,
    response=models.CheckpointOnly,
    auth="run",
)
def report_checkpoint(trial_id: str) -> Response:
    """Record a checkpoint whose files (metadata.json last) are in S3."""
    run = _run(trial_id)
    body = parse(bp, models.CheckpointReport)
    p = ports()
    record = trial_reports.report_checkpoint(
        p, run, body.uuid, body.steps_completed, body.resources, body.metadata
    )
    return answer(models.CheckpointOnly(checkpoint=views.checkpoint(p, record)))


@route(bp, "/checkpoints/{uuid}/downloads", "GET", response=models.CheckpointDownloads, auth="run")
def checkpoint_downloads(uuid: str) -> Response:
    """Presigned GET URLs of a checkpoint of the calling trial's experiment."""
    p = ports()
    run = trial_reports.authorize_run(p, _authorization(), trial_id=None)
    found = trial_reports.checkpoint_downloads(p, run, uuid)
    return answer(
        models.CheckpointDownloads(checkpoint=views.checkpoint(p, found["checkpoint"]), urls=found["urls"])
    )


@route(
    bp,
    "/trials/{trial_id}/rendezvous",
    "POST",
    request=models.RendezvousJoin,
    response=models.Rendezvous,
    auth="run",
)
def rendezvous_join(trial_id: str) -> Response:
    """A node of a multi-node run adds its address (the chief its port) and gets the record back."""
    run = _run(trial_id)
    body = parse(bp, models.RendezvousJoin)
    record = runs.rendezvous(ports(), run, body.node_rank, body.addr, body.port)
    return answer(models.Rendezvous.model_validate(record))


@route(bp, "/trials/{trial_id}/rendezvous", "GET", response=models.Rendezvous, auth="run")
def rendezvous_read(trial_id: str) -> Response:
    """The run's rendezvous record: which nodes are in, and whether all of them are."""
    return answer(models.Rendezvous.model_validate(runs.rendezvous(ports(), _run(trial_id))))


@route(bp, "/trials/{trial_id}/searcher", "GET", response=models.SearcherOp, auth="run")
def searcher_op(trial_id: str) -> Response:
    """What the searcher wants of the trial now: train to a length, wait, or stop."""
    return answer(models.SearcherOp.model_validate(trial_reports.searcher_state(ports(), _run(trial_id))))


@route(
    bp,
    "/trials/{trial_id}/searcher/completed",
    "POST",
    request=models.SearcherCompleted,
    response=models.Empty,
    auth="run",
)
def searcher_completed(trial_id: str) -> Response:
    """The trial reached `length` with this searcher metric (Determined's `report_completed`)."""
    run = _run(trial_id)
    body = parse(bp, models.SearcherCompleted)
    trial_reports.report_searcher_result(ports(), run, body.length, body.metric)
    return answer(models.Empty())


@route(
    bp,
    "/trials/{trial_id}/searcher/invalid_hp",
    "POST",
    request=models.InvalidHP,
    response=models.Empty,
    auth="run",
)
def searcher_invalid_hp(trial_id: str) -> Response:
    """The trial's hyperparameters cannot work; the searcher replaces the trial."""
    run = _run(trial_id)
    body = parse(bp, models.InvalidHP)
    trial_reports.report_invalid_hp(ports(), run, body.message)
    return answer(models.Empty())
