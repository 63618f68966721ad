"""Routes for the compute side: agents (agent token; on EC2, the instance's IAM identity first, for that
token) and trial processes (run token, own trial only).

Each route's registration checks the credential (`chalicelib.api.auth`) and parses the body; a view gets
the principal (`AgentPrincipal`, or `RunPrincipal` holding the caller's live run) and the parsed body."""

from __future__ import annotations

from collections.abc import Callable

from chalice.app import Blueprint
from pydantic import BaseModel

from chalicelib.api import agent_models, elastic_models, models, report_models, views
from chalicelib.api.agent_identity import AgentIamCredential, credential_for_caller
from chalicelib.api.auth import AgentPrincipal, RunPrincipal, UserPrincipal
from chalicelib.api.caller_versions import caller_version
from chalicelib.api.routing import View, route
from chalicelib.domain.records import LogLine
from chalicelib.services import draining, elastic, run_logs, runs, trial_reports
from chalicelib.wiring import ports

bp = Blueprint(__name__)


def _agent_route(
    path: str, method: str, *, response: type[BaseModel], request: type[BaseModel] | None = None
) -> Callable[[View], View]:
    """Registers a route an agent calls with its agent token."""
    return route(bp, path, method, request=request, response=response, auth="agent")


def _trial_route(
    path: str, method: str, *, response: type[BaseModel], request: type[BaseModel] | None = None
) -> Callable[[View], View]:
    """Registers a route a trial process calls with its run token, for its own trial only."""
    return route(bp, path, method, request=request, response=response, auth="run")


# ---- agents ---------------------------------------------------------------------------------------


@route(bp, "/agents/{agent_id}/iam-credential", "POST", response=AgentIamCredential, auth="iam")
def agent_iam_credential(caller: UserPrincipal, agent_id: str) -> AgentIamCredential:
    """An EC2 agent's credential, for the instance whose role signed the request (SigV4 only).

    API Gateway's IAM authorizer checks the signature (the agent role may call this route and no other);
    the caller must then be the stack's agent role's session named `agent_id`, as EC2 names an instance
    profile's session after the instance (`chalicelib.domain.agent_identity`); anything else is a 403
    naming the identity. Chalice's local mode and the local stack have no IAM identity: there this route
    answers 403 to every request (their agents get their credential from `--token-file`)."""
    return credential_for_caller(bp.current_request.context, agent_id)


@_agent_route(
    "/agents/{agent_id}/heartbeat",
    "POST",
    request=agent_models.AgentHeartbeat,
    response=agent_models.AgentInstructions,
)
def agent_heartbeat(
    agent: AgentPrincipal, body: agent_models.AgentHeartbeat, agent_id: str
) -> agent_models.AgentInstructions:
    """An agent's capacity and running runs in; runs to launch and to kill out."""
    if body.draining and not body.stopping:
        reason = "its agent reports that its machine is about to go"
        draining.drain_agent(ports(), agent_id, reason, pool=body.pool)
    instructions = runs.heartbeat(
        ports(),
        agent_id,
        body.pool,
        body.slots,
        body.running,
        stopping=body.stopping,
        version=caller_version(bp.current_request.headers),  # its compute package's, `det version` shows it
    )
    return agent_models.AgentInstructions.model_validate(instructions)


@_agent_route(
    "/agents/{agent_id}/runs/{run_id}/started", "POST", request=agent_models.RunStarted, response=models.Empty
)
def run_started(
    agent: AgentPrincipal, body: agent_models.RunStarted, agent_id: str, run_id: str
) -> models.Empty:
    """The agent started a run's process."""
    instance = body.instance.model_dump() if body.instance else None
    runs.started(ports(), agent_id, run_id, body.pid, instance)
    return models.Empty()


@_agent_route(
    "/agents/{agent_id}/runs/{run_id}/exit", "POST", request=agent_models.RunExited, response=models.Empty
)
def run_exited(
    agent: AgentPrincipal, body: agent_models.RunExited, agent_id: str, run_id: str
) -> models.Empty:
    """A run's process ended; the trial's workflow moves on."""
    runs.exited(
        ports(), agent_id, run_id, body.exit_code, body.reason, body.failed_rank, requeue=body.requeue
    )
    return models.Empty()


@_agent_route("/trials/{trial_id}/logs", "POST", request=agent_models.LogBatch, response=models.Empty)
def put_logs(agent: AgentPrincipal, body: agent_models.LogBatch, trial_id: int) -> models.Empty:
    """Log lines of a run, shipped by its agent (403 for a run that agent does not hold)."""
    lines = [LogLine(line.timestamp, line.message, line.rank) for line in body.lines]
    run_logs.store_logs(ports(), trial_id, body.run_id, body.seq, lines, agent_id=agent.agent_id)
    return models.Empty()


# ---- trials ---------------------------------------------------------------------------------------


@_trial_route("/trials/{trial_id}/info", "GET", response=models.TrialInfo)
def trial_info(run: RunPrincipal, trial_id: int) -> models.TrialInfo:
    """What a trial needs to start: hyperparameters, latest checkpoint, config."""
    return models.TrialInfo.model_validate(trial_reports.trial_info(ports(), run.run))


@_trial_route("/trials/{trial_id}/metrics", "POST", request=models.MetricReport, response=models.Empty)
def report_metrics(run: RunPrincipal, body: models.MetricReport, trial_id: int) -> models.Empty:
    """Training or validation metrics at a number of steps completed (idempotent)."""
    trial_reports.report_metrics(ports(), run.run, body.group, body.steps_completed, body.metrics)
    return models.Empty()


@_trial_route("/trials/{trial_id}/reports", "POST", request=report_models.ReportBatch, response=models.Empty)
def report_batch(run: RunPrincipal, body: report_models.ReportBatch, trial_id: int) -> models.Empty:
    """Metrics and progress reports, applied in order (idempotent: a retried batch changes nothing)."""
    reports = [
        trial_reports.MetricsReport(r.group, r.steps_completed, r.metrics)
        if isinstance(r, report_models.MetricsItem)
        else trial_reports.ProgressReport(r.progress)
        for r in body.reports
    ]
    trial_reports.report_batch(ports(), run.run, reports)
    return models.Empty()


@_trial_route("/trials/{trial_id}/progress", "POST", request=models.ProgressReport, response=models.Empty)
def report_progress(run: RunPrincipal, body: models.ProgressReport, trial_id: int) -> models.Empty:
    """The trial's own estimate of its progress, 0 to 1."""
    trial_reports.report_progress(ports(), run.run, body.progress)
    return models.Empty()


@_trial_route(
    "/trials/{trial_id}/heartbeat", "POST", request=models.TrialHeartbeat, response=models.HeartbeatAnswer
)
def trial_heartbeat(run: RunPrincipal, body: models.TrialHeartbeat, trial_id: int) -> models.HeartbeatAnswer:
    """Liveness of a trial; answers whether it should checkpoint and stop."""
    return models.HeartbeatAnswer.model_validate(trial_reports.heartbeat(ports(), run.run))


@_trial_route(
    "/trials/{trial_id}/checkpoints/uploads",
    "POST",
    request=models.CheckpointUploadRequest,
    response=models.CheckpointUploadAnswer,
)
def checkpoint_uploads(
    run: RunPrincipal, body: models.CheckpointUploadRequest, trial_id: int
) -> models.CheckpointUploadAnswer:
    """Presigned PUT URLs for a new checkpoint's files, under the trial's own prefix; the files named in
    `copy_from` are copied from an earlier checkpoint of the trial instead (unchanged since)."""
    urls = trial_reports.checkpoint_uploads(ports(), run.run, body.uuid, body.files, body.copy_from)
    return models.CheckpointUploadAnswer.model_validate(urls)


@_trial_route(
    "/trials/{trial_id}/checkpoints", "POST", request=models.CheckpointReport, response=models.CheckpointOnly
)
def report_checkpoint(
    run: RunPrincipal, body: models.CheckpointReport, trial_id: int
) -> models.CheckpointOnly:
    """Record a checkpoint whose files (metadata.json last) are in S3."""
    p = ports()
    record = trial_reports.report_checkpoint(
        p, run.run, body.uuid, body.steps_completed, body.resources, body.metadata
    )
    return models.CheckpointOnly(checkpoint=views.checkpoint(p, record))


@_trial_route("/checkpoints/{uuid}/downloads", "GET", response=models.CheckpointDownloads)
def checkpoint_downloads(run: RunPrincipal, uuid: str) -> models.CheckpointDownloads:
    """Presigned GET URLs of a checkpoint of the calling trial's experiment."""
    p = ports()
    found = trial_reports.checkpoint_downloads(p, run.run, uuid)  # refuses another experiment's checkpoint
    return models.CheckpointDownloads(checkpoint=views.checkpoint(p, found["checkpoint"]), urls=found["urls"])


@_trial_route(
    "/trials/{trial_id}/rendezvous", "POST", request=models.RendezvousJoin, response=models.Rendezvous
)
def rendezvous_join(run: RunPrincipal, body: models.RendezvousJoin, trial_id: int) -> models.Rendezvous:
    """A node of a multi-node run adds its address (the chief its port) and gets the record back."""
    record = runs.rendezvous(ports(), run.run, body.node_rank, body.addr, body.port)
    return models.Rendezvous.model_validate(record)


@_trial_route("/trials/{trial_id}/rendezvous", "GET", response=models.Rendezvous)
def rendezvous_read(run: RunPrincipal, trial_id: int) -> models.Rendezvous:
    """The run's rendezvous record: which nodes are in, and whether all of them are."""
    return models.Rendezvous.model_validate(runs.rendezvous(ports(), run.run))


@_trial_route("/trials/{trial_id}/searcher", "GET", response=models.SearcherOp)
def searcher_op(run: RunPrincipal, trial_id: int) -> models.SearcherOp:
    """What the searcher wants of the trial now: train to a length, wait, or stop."""
    return models.SearcherOp.model_validate(trial_reports.searcher_state(ports(), run.run))


@_trial_route(
    "/trials/{trial_id}/searcher/completed", "POST", request=models.SearcherCompleted, response=models.Empty
)
def searcher_completed(run: RunPrincipal, body: models.SearcherCompleted, trial_id: int) -> models.Empty:
    """The trial reached `length` with this searcher metric (Determined's `report_completed`)."""
    trial_reports.report_searcher_result(ports(), run.run, body.length, body.metric)
    return models.Empty()


@_trial_route(
    "/trials/{trial_id}/searcher/invalid_hp", "POST", request=models.InvalidHP, response=models.Empty
)
def searcher_invalid_hp(run: RunPrincipal, body: models.InvalidHP, trial_id: int) -> models.Empty:
    """The trial's hyperparameters cannot work; the searcher replaces the trial."""
    trial_reports.report_invalid_hp(ports(), run.run, body.message)
    return models.Empty()


@_trial_route(
    "/trials/{trial_id}/adaptdl/hints",
    "PUT",
    request=elastic_models.AdaptdlHints,
    response=models.TrialElastic,
)
def adaptdl_hints(run: RunPrincipal, body: elastic_models.AdaptdlHints, trial_id: int) -> models.TrialElastic:
    """An elastic trial's latest AdaptDL scheduling hints, forwarded by stratus.launchers.adaptdl (idempotent)."""
    trial = elastic.record_hints(ports(), run.run, body.model_dump(exclude_unset=True))
    return views.elastic_view(trial)
