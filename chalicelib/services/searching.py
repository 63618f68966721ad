"""Running an experiment's searcher: feed it events, persist its snapshot, carry out its operations.

The snapshot is saved with a conditional write on `searcher_version` before any operation is carried
out, so two consumers racing on the same experiment cannot both act; the loser raises and SQS delivers
the event again, by which time the winner's snapshot already holds it (so it is a no-op).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib import config as cfg
from chalicelib.domain import keys
from chalicelib.domain.searchers import (
    CreateTrial,
    Operation,
    Searcher,
    SearchSpec,
    Shutdown,
    StopTrial,
    TrialCreated,
    TrialExited,
    ValidationReported,
    new_searcher,
    restore_searcher,
)
from chalicelib.domain.states import ExperimentState, TrialState
from chalicelib.errors import ConflictError
from chalicelib.services.clock import now_iso
from chalicelib.services.ports import Ports, Record


class StaleSearcherError(ConflictError):
    """Another consumer updated the searcher first; the event will be delivered again."""


def search_spec(config: Mapping[str, Any]) -> SearchSpec:
    """The searcher's inputs from a stored (JSON) config."""
    parsed = cfg.parse_experiment_config(config).config
    settings = parsed.searcher.model_dump(mode="json")
    max_length = settings.get("max_time") if settings.get("time_metric") else parsed.searcher_max_length_batches()
    seed = int(config.get("reproducibility", {}).get("experiment_seed") or 0)
    return SearchSpec(
        space=config.get("hyperparameters") or {},
        settings=settings,
        max_length=int(max_length) if max_length is not None else None,
        seed=seed,
    )


def start(ports: Ports, experiment_id: int) -> None:
    experiment = ports.experiments.get(experiment_id)
    if experiment is None or "searcher" in experiment:
        return  # already started (a redelivered activation)
    searcher = new_searcher(search_spec(experiment["config"]))
    _save_and_apply(ports, experiment, searcher, searcher.initial_operations(), version=0)


def handle_event(ports: Ports, body: Mapping[str, Any]) -> None:
    experiment = ports.experiments.get(int(body["experiment_id"]))
    if experiment is None or "searcher" not in experiment:
        return
    if ExperimentState(experiment["state"]).terminal:
        return
    searcher = restore_searcher(experiment["searcher"], search_spec(experiment["config"]))
    kind = body["type"]
    if kind == "trial_exited":
        trial = ports.trials.get(int(body["trial_id"]))
        failed = trial is None or trial["state"] != TrialState.COMPLETED
        ops = searcher.on_event(
            TrialExited(event_id=body["event_id"], trial_id=int(body["trial_id"]), failed=failed)
        )
    elif kind == "validation":
        ops = searcher.on_event(
            ValidationReported(
                event_id=body["event_id"],
                trial_id=int(body["trial_id"]),
                steps_completed=int(body["steps_completed"]),
                metric=float(body["metric"]),
            )
        )
    else:
        raise ValueError(f"unknown searcher event type {kind!r}")
    _save_and_apply(ports, experiment, searcher, ops, version=int(experiment.get("searcher_version", 0)))


def _save_and_apply(
    ports: Ports, experiment: Record, searcher: Searcher, ops: list[Operation], version: int
) -> None:
    experiment_id = int(experiment["id"])
    if not ports.experiments.save_searcher(experiment_id, searcher.snapshot(), expected_version=version):
        raise StaleSearcherError(f"searcher of experiment {experiment_id} changed meanwhile; retrying")
    version += 1
    for op in ops:
        if isinstance(op, CreateTrial):
            trial_id = _create_trial(ports, experiment, op)
            # Tell the searcher the trial's id; saved before the next operation runs.
            searcher.on_event(
                TrialCreated(event_id=f"created-{op.request_id}", request_id=op.request_id, trial_id=trial_id)
            )
            if not ports.experiments.save_searcher(
                experiment_id, searcher.snapshot(), expected_version=version
            ):
                raise StaleSearcherError(
                    f"searcher of experiment {experiment_id} changed meanwhile; retrying"
                )
            version += 1
        elif isinstance(op, Shutdown):
            _finish(ports, experiment_id, failure=op.failure)
        elif isinstance(op, StopTrial):
            pass  # early stopping arrives with the adaptive searchers
    ports.experiments.update(experiment_id, progress=round(searcher.progress(), 4))


def _create_trial(ports: Ports, experiment: Record, op: CreateTrial) -> int:
    config = experiment["config"]
    resources = config.get("resources") or {}
    trial_id = ports.ids.next("trial")
    ports.trials.create(
        {
            "id": trial_id,
            "experiment_id": int(experiment["id"]),
            "request_id": op.request_id,
            "state": str(TrialState.QUEUED),
            "hparams": op.hparams,
            "attempts": 0,
            "start_time": now_iso(),
            "trial_seed": (int(config["reproducibility"]["experiment_seed"]) + trial_id) % 2**31,
        }
    )
    ports.experiments.update(
        int(experiment["id"]), num_trials=len(ports.trials.for_experiment(int(experiment["id"])))
    )
    ports.workflows.start(
        keys.execution_name(trial_id, 0),
        {
            "trial_id": trial_id,
            "experiment_id": int(experiment["id"]),
            "pool": resources.get("resource_pool") or "default",
            "slots": int(resources.get("slots_per_trial") or 1),
            "priority": int(resources.get("priority") or 42),
            "max_restarts": int(config.get("max_restarts", 5)),
        },
    )
    return trial_id


def _finish(ports: Ports, experiment_id: int, *, failure: bool) -> None:
    trials = ports.trials.for_experiment(experiment_id)
    any_completed = any(t["state"] == TrialState.COMPLETED for t in trials)
    target = ExperimentState.COMPLETED if any_completed and not failure else ExperimentState.ERROR
    ports.experiments.transition(experiment_id, str(target), end_time=now_iso())
