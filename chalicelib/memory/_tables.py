"""Experiments and trials in memory, with the semantics of `chalicelib.aws.experiment_table` and
`chalicelib.aws.trial_table`: conditional transitions from `chalicelib.domain.states`, idempotent
creation, the searcher snapshot saved under its version, and values that only move forward."""

from __future__ import annotations

import builtins
import copy
from collections.abc import Mapping
from typing import Any

from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.states import (
    EXPERIMENT_TRANSITIONS,
    TRIAL_TRANSITIONS,
    ExperimentState,
    TrialState,
)
from chalicelib.domain.updates import ExperimentUpdates, TrialUpdates
from chalicelib.errors import ConflictError
from chalicelib.memory._items import Record, as_json, stored, transition, update_fields


class MemoryExperiments(ExperimentUpdates):
    def __init__(self) -> None:
        self.items: dict[int, Record] = {}

    def create(self, experiment: Experiment) -> None:
        if experiment.id in self.items:
            # DynamoDB refuses the put (its condition is attribute_not_exists(id)); ids are never reused.
            raise ConflictError(f"experiment {experiment.id} exists already; draw a new id from ids.next")
        item = stored(experiment.to_item())
        item.pop("searcher", None)  # saved by save_searcher, under its version
        item.pop("searcher_version", None)
        item["config"] = as_json(experiment.config)
        self.items[experiment.id] = item

    def get(self, experiment_id: int) -> Experiment | None:
        item = self.items.get(experiment_id)
        return _experiment(item) if item is not None else None

    def list(
        self, limit: int, before: int | None = None, *, archived: bool | None = None
    ) -> tuple[list[Experiment], int | None]:
        newest_first = [
            i
            for i in sorted(self.items, reverse=True)
            if (before is None or i < before)
            and (archived is None or bool(self.items[i].get("archived", False)) == archived)
        ]
        page = newest_first[:limit]
        more = len(newest_first) > limit
        return [_experiment(self.items[i]) for i in page], (page[-1] if more and page else None)

    def transition(
        self, experiment_id: int, target: ExperimentState, *, end_time: str | None = None
    ) -> Experiment | None:
        sets = {"end_time": end_time} if end_time is not None else {}
        item = transition(self.items, experiment_id, EXPERIMENT_TRANSITIONS, target, sets)
        return _experiment(item) if item is not None else None

    def set_archived(self, experiment_id: int, archived: bool) -> Experiment | None:
        item = self.items.get(experiment_id)
        if item is None or not ExperimentState(item["state"]).terminal:
            return None  # DynamoDB's condition: the experiment has ended
        item["archived"] = archived
        return _experiment(item)

    def save_searcher(self, experiment_id: int, snapshot: Mapping[str, Any], expected_version: int) -> bool:
        item = self.items.get(experiment_id)
        if item is None:
            # DynamoDB's UpdateItem would create a stub item here; no caller saves a missing experiment.
            raise ConflictError(f"experiment {experiment_id} not found; create it before its searcher")
        if "searcher_version" in item and item["searcher_version"] != expected_version:
            return False
        item["searcher"] = as_json(snapshot)
        item["searcher_version"] = expected_version + 1
        return True

    def raise_progress(self, experiment_id: int, progress: float) -> None:
        item = self.items.get(experiment_id)
        if item is not None and (item.get("progress") is None or item["progress"] < progress):
            item["progress"] = stored(progress)

    def watch(self, experiment_id: int, check_at: int) -> None:
        item = self.items.get(experiment_id)
        if item is not None:
            item["check_at"] = check_at

    def unwatch(self, experiment_id: int, check_at: int) -> bool:
        item = self.items.get(experiment_id)
        if item is None or item.get("check_at") != check_at:
            return False
        del item["check_at"]
        return True

    def due_for_check(self, now: float, limit: int) -> builtins.list[tuple[int, int]]:
        due = sorted((item["check_at"], key) for key, item in self.items.items() if "check_at" in item)
        return [(key, at) for at, key in due if at <= now][:limit]

    def update_versioned(
        self, experiment_id: int, fields: Mapping[str, Any], expected_version: int
    ) -> Experiment | None:
        item = self.items.get(experiment_id)
        if item is None or int(item.get("version", 0)) != expected_version:
            return None  # DynamoDB's condition: the record is still at the version read
        item.update({name: stored(value) for name, value in fields.items()})
        item["version"] = expected_version + 1
        return _experiment(item)

    def _set_experiment(self, experiment_id: int, fields: Mapping[str, Any]) -> None:
        update_fields(self.items, experiment_id, fields)

    def delete(self, experiment_id: int) -> None:
        item = self.items.get(experiment_id)
        if item is not None and item["state"] == str(ExperimentState.DELETING):
            del self.items[experiment_id]


class MemoryTrials(TrialUpdates):
    def __init__(self) -> None:
        self.items: dict[int, Record] = {}

    def create(self, trial: Trial) -> None:
        """Create a trial once; creating the same id again (a redelivered event) changes nothing."""
        if trial.id in self.items:
            return
        self.items[trial.id] = _trial_fields(trial.to_item())

    def get(self, trial_id: int) -> Trial | None:
        item = self.items.get(trial_id)
        return _trial(item) if item is not None else None

    def for_experiment(self, experiment_id: int, *, consistent: bool = False) -> list[Trial]:
        return [
            _trial(self.items[i])
            for i in sorted(self.items)
            if self.items[i]["experiment_id"] == experiment_id
        ]

    def transition(self, trial_id: int, target: TrialState, *, end_time: str | None = None) -> Trial | None:
        sets = {"end_time": end_time} if end_time is not None else {}
        item = transition(self.items, trial_id, TRIAL_TRANSITIONS, target, sets)
        return _trial(item) if item is not None else None

    def _set_trial(self, trial_id: int, fields: Mapping[str, Any]) -> None:
        update_fields(self.items, trial_id, fields)

    def _set_trial_if_newer(self, trial_id: int, fields: Mapping[str, Any], seq: int) -> bool:
        item = self.items.get(trial_id)
        if item is None or item.get("searcher_seq", 0) > seq:
            return False
        update_fields(self.items, trial_id, {**fields, "searcher_seq": seq})
        return True

    def _answer_trial(self, trial_id: int, length: int) -> None:
        item = self.items.get(trial_id)
        if item is not None and item.get("searcher_length", length) <= length:
            item["searcher_pending"] = False

    def delete(self, trial_id: int) -> None:
        self.items.pop(trial_id, None)

    def record_training(self, trial_id: int, steps_completed: int) -> Trial | None:
        item = self.items.get(trial_id)
        if item is None or item.get("total_batches", -1) >= steps_completed:
            return None
        before = _trial(item)
        item["total_batches"] = steps_completed
        return before

    def resume_paused(self, trial_id: int, generation: int, attempt: int, *, once: bool = True) -> bool:
        """Move a paused trial from execution `generation` to the next, once per pause (`attempt`)."""
        item = self.items.get(trial_id)
        if item is None or item.get("generation", generation) != generation:
            return False
        if once and item.get("resumed_attempt") == attempt:
            return False
        item["generation"] = generation + 1
        item["resumed_attempt"] = attempt
        return True

    def record_searcher_length(self, trial_id: int, length: int) -> Trial | None:
        """Raise the trial's reported searcher length; mark the searcher's answer pending when the
        trial reached its target. Returns the trial, or None when the length was not new."""
        item = self.items.get(trial_id)
        if item is None or item.get("searcher_length", length - 1) >= length:
            return None
        item["searcher_length"] = length
        target = item.get("target_length")
        if target is not None and length >= int(target):
            item["searcher_pending"] = True
        return _trial(item)

    def _set_trial_unless_past(
        self, trial_id: int, field: str, value: int, fields: Mapping[str, Any]
    ) -> None:
        item = self.items.get(trial_id)
        if item is not None and (item.get(field) is None or item[field] <= value):
            item.update(_trial_fields(fields))

    def _set_trial_if_better(self, trial_id: int, field: str, value: float, smaller_is_better: bool) -> None:
        item = self.items.get(trial_id)
        best = None if item is None else item.get(field)
        if item is not None and (best is None or (value < best if smaller_is_better else value > best)):
            item[field] = stored(value)


#: The trial fields `chalicelib.aws.trial_table` keeps as JSON text (they come back as fresh JSON values).
_TRIAL_JSON_FIELDS = ("hparams", "latest_validation")


def _trial_fields(fields: Mapping[str, Any]) -> Record:
    return {k: as_json(v) if k in _TRIAL_JSON_FIELDS else stored(v) for k, v in fields.items()}


def _experiment(item: Record) -> Experiment:
    return Experiment.from_item(copy.deepcopy(item))


def _trial(item: Record) -> Trial:
    return Trial.from_item(copy.deepcopy(item))
