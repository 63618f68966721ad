"""Records from the stores turned into the API's response models."""

from __future__ import annotations

from typing import Any

from chalicelib.api import models
from chalicelib.domain import keys
from chalicelib.services.ports import Ports, Record


def experiment(record: Record) -> models.Experiment:
    return models.Experiment(
        id=int(record["id"]),
        name=str(record.get("name", "")),
        description=str(record.get("description", "")),
        labels=list(record.get("labels") or []),
        state=str(record["state"]),
        progress=_float(record.get("progress")),
        searcher_type=str(record.get("searcher_type", "")),
        resource_pool=str(record.get("resource_pool", "default")),
        owner=str(record.get("owner", "")),
        start_time=record.get("start_time"),
        end_time=record.get("end_time"),
        num_trials=int(record.get("num_trials", 0)),
        context_sha256=record.get("context_sha256"),
        config=record["config"],
    )


def checkpoint(ports: Ports, record: Record) -> models.Checkpoint:
    prefix = keys.checkpoint_prefix(
        int(record["experiment_id"]), int(record["trial_id"]), str(record["uuid"])
    )
    return models.Checkpoint(
        uuid=str(record["uuid"]),
        trial_id=int(record["trial_id"]),
        experiment_id=int(record["experiment_id"]),
        steps_completed=int(record["steps_completed"]),
        state=str(record["state"]),
        uri=ports.blobs.uri(prefix),
        resources={k: int(v) for k, v in (record.get("resources") or {}).items()},
        metadata=record.get("metadata") or {},
        report_time=str(record["report_time"]),
    )


def trial(ports: Ports, record: Record) -> models.Trial:
    latest = None
    if record.get("latest_checkpoint"):
        stored = ports.checkpoints.get(str(record["latest_checkpoint"]))
        latest = checkpoint(ports, stored) if stored else None
    exit_ = None
    if "exit_code" in record:
        rank = record.get("failed_rank")
        exit_ = models.TrialExit(
            code=int(record["exit_code"]),
            reason=str(record.get("exit_reason", "")),
            failed_rank=int(rank) if rank is not None else None,
        )
    return models.Trial(
        id=int(record["id"]),
        experiment_id=int(record["experiment_id"]),
        state=str(record["state"]),
        early_stopped=bool(record.get("early_stopped", False)),
        hparams=record.get("hparams") or {},
        # Every run enters the queue once (attempts); resumes after a pause are new generations.
        restarts=max(0, int(record.get("attempts", 0)) - 1 - int(record.get("generation", 0))),
        start_time=record.get("start_time"),
        end_time=record.get("end_time"),
        total_batches=int(record.get("total_batches", 0)),
        progress=_float(record.get("progress")),
        best_validation=_float(record.get("best_validation")),
        latest_validation=record.get("latest_validation"),
        latest_checkpoint=latest,
        exit=exit_,
    )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
