"""What a running trial may do, for the run whose token the API checked (`tokens.live_run`): report
metrics and progress, store and restore checkpoints, send heartbeats, and (through its agent) ship logs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from chalicelib.domain import keys
from chalicelib.domain.records import Checkpoint, Trial
from chalicelib.domain.run_records import Run
from chalicelib.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError
from chalicelib.services import experiments, progress, runs, telemetry, warm_start, watchlist
from chalicelib.services.ports import Ports
from chalicelib.services.search_specs import time_metric
from stratus.contract import messages
from stratus.contract.actions import SearcherAction
from stratus.contract.errors import InvalidMetricGroupError
from stratus.contract.metric_groups import TRAINING, VALIDATION, check_metric_group

MAX_CHECKPOINT_FILES = 10_000
#: Copies one upload request makes (each an S3 request inside the API call, which must answer in time).
MAX_CHECKPOINT_COPIES = 1_000


def trial_info(ports: Ports, run: Run) -> dict[str, Any]:
    trial = runs.get_trial(ports, run.trial_id)
    experiment = experiments.get(ports, run.experiment_id)
    return {
        "trial_id": trial.id,
        "experiment_id": experiment.id,
        "run_id": run.run_id,
        "hparams": trial.hparams,
        "latest_checkpoint": trial.latest_checkpoint,
        "trial_seed": trial.trial_seed,
        "config": experiment.config,
    }


def report_metrics(
    ports: Ports, run: Run, group: str, steps_completed: int, metrics: Mapping[str, Any]
) -> None:
    """Store a report of `group` (Determined's generic metrics): `training` raises the trial's totals,
    `validation` also tells the searcher its metric; a custom group is only stored. Training and
    validation metrics are charted in CloudWatch too (`telemetry`)."""
    _store_metrics(ports, run, group, steps_completed, metrics)
    telemetry.trial_reports(ports, run, [(group, metrics)])


def _store_metrics(
    ports: Ports, run: Run, group: str, steps_completed: int, metrics: Mapping[str, Any]
) -> None:
    metric_group(group)
    if steps_completed < 0:
        raise BadRequestError(f"steps_completed must be ≥ 0, got {steps_completed}")
    trial_id = run.trial_id
    ports.metrics.put(trial_id, group, steps_completed, metrics)  # a repeated report is a no-op
    if group == TRAINING:
        _trained(ports, trial_id, steps_completed)
        return
    if group != VALIDATION:
        return
    config = experiments.get(ports, run.experiment_id).parsed_config
    value = metrics.get(config.searcher.metric)
    searcher_value = float(value) if isinstance(value, int | float) and math.isfinite(float(value)) else None
    ports.trials.record_validation(
        trial_id, steps_completed, metrics, searcher_value, config.searcher.smaller_is_better
    )
    if searcher_value is None:
        return
    length: Any = steps_completed
    unit = time_metric(config)
    if unit:
        length = metrics.get(unit)
        if not isinstance(length, int | float) or not math.isfinite(float(length)):
            return  # no position in the searcher's units: not a searcher result
    report_searcher_result(ports, run, int(length), searcher_value)


@dataclass(frozen=True)
class MetricsReport:
    group: str
    steps_completed: int
    metrics: Mapping[str, Any]


@dataclass(frozen=True)
class ProgressReport:
    progress: float


def report_batch(ports: Ports, run: Run, reports: Sequence[MetricsReport | ProgressReport]) -> None:
    """Reports a trial sent together, in its order: each metrics report is stored as `report_metrics`
    stores one, except that the training totals are raised once for the batch (to its furthest training
    report), and only the last progress value is written."""
    for index, report in enumerate(reports):
        if isinstance(report, MetricsReport):
            try:
                metric_group(report.group)
            except BadRequestError as error:
                raise BadRequestError(f"reports[{index}].group: {error}") from error
    furthest: int | None = None
    for report in reports:
        if not isinstance(report, MetricsReport):
            continue
        if report.group == TRAINING:
            ports.metrics.put(run.trial_id, TRAINING, report.steps_completed, report.metrics)
            furthest = max(furthest or 0, report.steps_completed)
        else:
            _store_metrics(ports, run, report.group, report.steps_completed, report.metrics)
    if furthest is not None:
        _trained(ports, run.trial_id, furthest)
    telemetry.trial_reports(
        ports, run, [(r.group, r.metrics) for r in reports if isinstance(r, MetricsReport)]
    )
    shares = [report.progress for report in reports if isinstance(report, ProgressReport)]
    if shares:
        report_progress(ports, run, shares[-1])


def _trained(ports: Ports, trial_id: int, steps_completed: int) -> None:
    """Raise the trial's trained batches, and its experiment's progress with them."""
    before = ports.trials.record_training(trial_id, steps_completed)
    if before is not None:
        progress.after_report(ports, before, replace(before, total_batches=steps_completed))


def metric_group(group: str) -> str:
    """`group` when Determined accepts it as a metric group (`stratus.contract.metric_groups`); BadRequestError
    (HTTP 400) naming it otherwise."""
    try:
        return check_metric_group(group)
    except InvalidMetricGroupError as error:
        raise BadRequestError(str(error)) from error


def report_searcher_result(ports: Ports, run: Run, length: int, metric: float) -> None:
    """Tell the searcher where the trial stands (Determined's `op.report_completed`)."""
    trial_id = run.trial_id
    if not math.isfinite(metric):
        # A diverged trial (NaN or infinite loss) ranks last, so searchers keep working with finite values.
        experiment = experiments.get(ports, run.experiment_id)
        metric = 1e300 if experiment.parsed_config.searcher.smaller_is_better else -1e300
    trial = ports.trials.record_searcher_length(trial_id, length)
    if trial is None:
        stored = ports.trials.get(trial_id)
        if stored is None or stored.searcher_length != length:
            return  # an older position than one already reported
        # The same position again (a retried report): send the event again; the searcher ignores
        # an event id it has seen, and a lost first send is made good.
    watchlist.mark(ports, run.experiment_id)  # if this event were lost, the trial would wait for ever
    ports.queues.to_events(
        messages.ValidationReported(
            event_id=f"validation-{trial_id}-{length}",
            experiment_id=run.experiment_id,
            trial_id=trial_id,
            length=length,
            metric=metric,
        ).to_body()
    )


def searcher_state(ports: Ports, run: Run) -> dict[str, Any]:
    """The trial's side of the searcher dialogue (docs/contracts.md)."""
    trial = runs.get_trial(ports, run.trial_id)
    unit = time_metric(experiments.get(ports, run.experiment_id).parsed_config) or "batches"
    target = trial.target_length
    if trial.told_to_stop:
        _note_pausing(ports, run, trial)
        return {"action": SearcherAction.STOP.value, "length": target, "unit": unit}
    if trial.searcher_pending:
        return {"action": SearcherAction.WAIT.value, "length": target, "unit": unit}
    if target is not None and trial.searcher_length is not None and trial.searcher_length >= target:
        return {
            "action": SearcherAction.STOP.value,
            "length": target,
            "unit": unit,
        }  # its last target is reached
    return {"action": SearcherAction.TRAIN.value, "length": target, "unit": unit}


def report_invalid_hp(ports: Ports, run: Run, message: str) -> None:
    ports.trials.mark_invalid_hp(run.trial_id, f"invalid hyperparameters: {message}")


def report_progress(ports: Ports, run: Run, share: float) -> None:
    """Core API's `report_progress`: the trial's share of its work done, and its experiment's progress."""
    if not 0.0 <= share <= 1.0:
        raise BadRequestError(f"progress must be between 0 and 1, got {share}")
    before = ports.trials.get(run.trial_id)
    ports.trials.record_progress(run.trial_id, share)
    if before is not None:
        progress.after_report(ports, before, replace(before, progress=share))


def heartbeat(ports: Ports, run: Run) -> dict[str, Any]:
    trial = runs.get_trial(ports, run.trial_id)
    if trial.told_to_stop:
        _note_pausing(ports, run, trial)
    return {"preempt": run.preempt or trial.told_to_stop}


def _note_pausing(ports: Ports, run: Run, trial: Trial) -> None:
    """Remember that this run was told to stop for a pause, so its clean exit pauses the trial."""
    if trial.searcher_action == "pause" and not run.pausing:
        ports.runs.mark_pausing(run.run_id)


def checkpoint_uploads(
    ports: Ports, run: Run, uuid: str, files: Sequence[str], copy_from: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Presigned PUT URLs for a new checkpoint's `files`; the files of `copy_from` (name -> the uuid of an
    earlier checkpoint of this trial holding that file) are copied into it here, in S3, not uploaded again
    (what did not change since that checkpoint: AdaptDL's share folder)."""
    copy_from = dict(copy_from or {})
    if not keys.is_uuid(uuid):
        raise BadRequestError(f"checkpoint uuid {uuid!r} is not a lowercase UUID; use uuid.uuid4()")
    if not files or len(files) + len(copy_from) > MAX_CHECKPOINT_FILES:
        raise BadRequestError(
            f"a checkpoint needs 1 to {MAX_CHECKPOINT_FILES} files, got {len(files)} (+{len(copy_from)} copied)"
        )
    if len(copy_from) > MAX_CHECKPOINT_COPIES:
        raise BadRequestError(
            f"copy_from names {len(copy_from)} files; copy at most {MAX_CHECKPOINT_COPIES} and upload the rest"
        )
    if twice := sorted(set(files) & set(copy_from)):
        raise BadRequestError(f"{twice[0]!r} is both uploaded and copied; give it in files or copy_from")
    if ports.checkpoints.get(uuid) is not None:
        raise ConflictError(f"checkpoint {uuid} is already reported; store a new checkpoint under a new uuid")
    experiment_id, trial_id = run.experiment_id, run.trial_id
    targets = {path: _object_key(experiment_id, trial_id, uuid, path) for path in [*files, *copy_from]}
    sources = {path: _copy_source(ports, run, path, source) for path, source in sorted(copy_from.items())}
    for path, source in sources.items():
        ports.blobs.copy(source, targets[path])
    urls = {path: ports.blobs.presign_put(targets[path]) for path in files}
    return {
        "prefix": keys.checkpoint_prefix(experiment_id, trial_id, uuid),
        "urls": urls,
        "copied": sorted(sources),
    }


def _object_key(experiment_id: int, trial_id: int, uuid: str, path: str) -> str:
    try:
        return keys.checkpoint_object_key(experiment_id, trial_id, uuid, path)
    except ValueError as error:
        raise BadRequestError(str(error)) from error


def _copy_source(ports: Ports, run: Run, path: str, source: str) -> str:
    """The object key of `path` in checkpoint `source`, which must be this trial's and hold it."""
    if not keys.is_uuid(source):
        raise BadRequestError(f"copy_from[{path!r}]: {source!r} is not a checkpoint uuid")
    checkpoint = ports.checkpoints.get(source)
    if checkpoint is None or checkpoint.trial_id != run.trial_id or checkpoint.state != "COMPLETED":
        raise NotFoundError(
            f"copy_from[{path!r}]: checkpoint {source} is not a stored checkpoint of trial {run.trial_id}; "
            "upload the file instead"
        )
    key = _object_key(checkpoint.experiment_id, checkpoint.trial_id, source, path)
    if path not in checkpoint.resources or not ports.blobs.exists(key):
        raise NotFoundError(
            f"copy_from[{path!r}]: checkpoint {source} has no file {path!r}; upload it instead"
        )
    return key


def report_checkpoint(
    ports: Ports,
    run: Run,
    uuid: str,
    steps_completed: int,
    resources: Mapping[str, int],
    metadata: Mapping[str, Any],
) -> Checkpoint:
    if not keys.is_uuid(uuid):
        raise BadRequestError(f"checkpoint uuid {uuid!r} is not a lowercase UUID; use uuid.uuid4()")
    experiment_id, trial_id = run.experiment_id, run.trial_id
    marker = keys.checkpoint_object_key(experiment_id, trial_id, uuid, "metadata.json")
    if not ports.blobs.exists(marker):
        raise ConflictError(
            f"checkpoint {uuid} has no metadata.json in S3 yet; upload every file, metadata.json last, then report it"
        )
    existing = ports.checkpoints.get(uuid)
    if existing is not None and existing.trial_id != trial_id:
        raise ForbiddenError(f"checkpoint {uuid} belongs to trial {existing.trial_id}")
    record = ports.checkpoints.put(
        Checkpoint(
            uuid=uuid,
            trial_id=trial_id,
            experiment_id=experiment_id,
            run_id=run.run_id,
            steps_completed=steps_completed,
            resources=dict(resources),
            metadata=dict(metadata),
            report_time=ports.clock.now_iso(),
        )
    )
    ports.trials.set_latest_checkpoint(trial_id, uuid, steps_completed)
    return record


def checkpoint_downloads(ports: Ports, run: Run, uuid: str) -> dict[str, Any]:
    checkpoint = ports.checkpoints.get(uuid)
    if checkpoint is None:
        raise NotFoundError(f"checkpoint {uuid} not found")
    if checkpoint.experiment_id != run.experiment_id and not warm_start.may_restore(
        ports, run.trial_id, uuid
    ):
        raise ForbiddenError(f"checkpoint {uuid} belongs to another experiment")
    if checkpoint.state != "COMPLETED":
        raise ConflictError(f"checkpoint {uuid} is {checkpoint.state} and cannot be restored")
    experiment_id, trial_id = checkpoint.experiment_id, checkpoint.trial_id
    files = sorted(set(checkpoint.resources) | {"metadata.json"})
    urls = {
        p: ports.blobs.presign_get(keys.checkpoint_object_key(experiment_id, trial_id, uuid, p))
        for p in files
    }
    return {"checkpoint": checkpoint, "urls": urls}
