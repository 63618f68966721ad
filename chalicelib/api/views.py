"""Typed records from the stores turned into the API's response models."""

from __future__ import annotations

from typing import Any

from chalicelib.api import cost_models, models
from chalicelib.api.elastic_view_models import ReplicaRun, Rescale
from chalicelib.domain import keys
from chalicelib.domain.jobs import Job
from chalicelib.domain.records import Checkpoint, Experiment, LogLine, MetricReport, Trial
from chalicelib.services import costs
from chalicelib.services.ports import Ports


def experiment(record: Experiment) -> models.Experiment:
    return models.Experiment(
        id=record.id,
        name=record.name,
        description=record.description,
        labels=list(record.labels),
        state=str(record.state),
        progress=record.progress,
        searcher_type=record.searcher_type,
        resource_pool=record.resource_pool,
        owner=record.owner,
        archived=record.archived,
        start_time=record.start_time,
        end_time=record.end_time,
        num_trials=record.num_trials,
        context_sha256=record.context_sha256,
        config=record.config,
        max_slots=record.job_max_slots,
    )


def checkpoint(ports: Ports, record: Checkpoint) -> models.Checkpoint:
    prefix = keys.checkpoint_prefix(record.experiment_id, record.trial_id, record.uuid)
    return models.Checkpoint(
        uuid=record.uuid,
        trial_id=record.trial_id,
        experiment_id=record.experiment_id,
        steps_completed=record.steps_completed,
        state=record.state,
        uri=ports.blobs.uri(prefix),
        resources=dict(record.resources),
        metadata=record.metadata,
        report_time=record.report_time,
    )


def trial(ports: Ports, record: Trial) -> models.Trial:
    latest = None
    if record.latest_checkpoint:
        stored = ports.checkpoints.get(record.latest_checkpoint)
        latest = checkpoint(ports, stored) if stored else None
    exit_ = None
    if record.exit_code is not None:
        exit_ = models.TrialExit(
            code=record.exit_code, reason=record.exit_reason or "", failed_rank=record.failed_rank
        )
    return models.Trial(
        id=record.id,
        experiment_id=record.experiment_id,
        state=str(record.state),
        early_stopped=record.early_stopped,
        hparams=record.hparams,
        # Every run enters the queue once (attempts); resumes after a pause are new generations.
        restarts=record.restarts,
        start_time=record.start_time,
        end_time=record.end_time,
        total_batches=record.total_batches,
        progress=record.progress,
        best_validation=record.best_validation,
        latest_validation=record.latest_validation,
        latest_checkpoint=latest,
        exit=exit_,
        warm_start_trial_id=record.warm_start_trial_id,
        cost=_cost(costs.trial_cost(record)),
        elastic=_elastic(record),
    )


def _elastic(record: Trial) -> models.TrialElastic | None:
    if record.elastic_hints is None and not record.elastic_runs:
        return None
    return elastic_view(record)


def elastic_view(record: Trial) -> models.TrialElastic:
    """The trial's elastic records as the API shows them."""
    runs = {run_id: ReplicaRun(**entry) for run_id, entry in record.elastic_runs.items()}
    stored = record.elastic_rescale
    rescale = None
    if stored:
        rescale = Rescale(
            run=str(stored.get("run", "")),
            replicas=stored.get("from"),
            target=int(stored.get("to", record.elastic_target or 0)),
            reason=str(stored.get("reason", "")),
            at=stored.get("at"),
        )
    return models.TrialElastic(
        hints=record.elastic_hints or {}, hints_at=record.hints_at, runs=runs, rescale=rescale
    )


def experiment_cost(trials: list[Trial]) -> cost_models.Cost | None:
    """Every trial's usage, summed by instance type (`det experiment describe`'s cost table)."""
    return _cost(costs.experiment_cost(trials))


def _cost(view: dict[str, Any] | None) -> cost_models.Cost | None:
    return None if view is None else cost_models.Cost.model_validate(view)


def metric(report: MetricReport) -> models.Metric:
    return models.Metric(
        group=report.group,
        steps_completed=report.steps_completed,
        metrics=report.metrics,
        report_time=report.report_time,
    )


def log_line(line: LogLine) -> models.LogLine:
    return models.LogLine(timestamp=line.timestamp, message=line.message, rank=line.rank)


def job(record: Job) -> models.Job:
    return models.Job(
        position=record.position,
        id=record.job_id,
        type=record.type,
        name=record.name,
        priority=record.priority,
        submitted=record.submitted,
        slots_acquired=record.slots_acquired,
        slots_needed=record.slots_needed,
        status=record.status,
        user=record.user,
        resource_pool=record.pool,
        reason=record.reason,
    )
