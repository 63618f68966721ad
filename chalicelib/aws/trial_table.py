"""Trials in DynamoDB, with a GSI by experiment and the summary fields `det` shows."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import dynamo
from chalicelib.domain.records import Trial
from chalicelib.domain.states import TRIAL_TRANSITIONS, TrialState, allowed_sources
from chalicelib.domain.updates import TrialUpdates


class DynamoTrials(TrialUpdates):
    def __init__(self) -> None:
        self._table = dynamo.table("trials")

    def create(self, trial: Trial) -> None:
        """Create a trial once; creating the same id again (a redelivered event) changes nothing."""
        item = trial.to_item()
        item["hparams"] = dynamo.dumps(item["hparams"])
        item["state"] = str(trial.state)
        try:
            self._table.put_item(Item=dynamo.to_dynamo(item), ConditionExpression="attribute_not_exists(id)")
        except ClientError as error:
            if not dynamo.is_condition_failure(error):
                raise

    def get(self, trial_id: int) -> Trial | None:
        item = self._table.get_item(Key={"id": trial_id}, ConsistentRead=True).get("Item")
        return _decode(dynamo.plain(item)) if item else None

    def for_experiment(self, experiment_id: int) -> list[Trial]:
        items = dynamo.query_index(self._table, "by_experiment", "experiment_id", experiment_id)
        return sorted((_decode(i) for i in items), key=lambda t: t.id)

    def transition(self, trial_id: int, target: TrialState, *, end_time: str | None = None) -> Trial | None:
        sources = allowed_sources(TRIAL_TRANSITIONS, target)
        sets = {"end_time": end_time} if end_time is not None else {}
        record = dynamo.transition(
            self._table, {"id": trial_id}, str(target), [str(s) for s in sources], sets
        )
        return _decode(record) if record else None

    def _set_trial(self, trial_id: int, fields: Mapping[str, Any]) -> None:
        dynamo.update_fields(self._table, {"id": trial_id}, fields)

    def delete(self, trial_id: int) -> None:
        self._table.delete_item(Key={"id": trial_id})

    def record_training(self, trial_id: int, steps_completed: int) -> None:
        self._raise_total(trial_id, steps_completed)

    def record_validation(
        self,
        trial_id: int,
        steps_completed: int,
        metrics: Mapping[str, Any],
        searcher_value: float | None,
        smaller_is_better: bool,
    ) -> None:
        self._raise_total(trial_id, steps_completed)
        self._conditional_set(
            trial_id,
            "SET latest_validation = :m, latest_validation_steps = :s",
            "attribute_not_exists(latest_validation_steps) OR latest_validation_steps <= :s",
            {":m": dynamo.dumps(_finite(metrics)), ":s": steps_completed},
        )
        if searcher_value is None or not math.isfinite(searcher_value):
            return
        better = "<" if smaller_is_better else ">"
        self._conditional_set(
            trial_id,
            "SET best_validation = :b",
            f"attribute_not_exists(best_validation) OR :b {better} best_validation",
            {":b": dynamo.number(searcher_value)},
        )

    def set_latest_checkpoint(self, trial_id: int, uuid: str, steps_completed: int) -> None:
        self._conditional_set(
            trial_id,
            "SET latest_checkpoint = :u, latest_checkpoint_steps = :s",
            "attribute_not_exists(latest_checkpoint_steps) OR latest_checkpoint_steps <= :s",
            {":u": uuid, ":s": steps_completed},
        )

    def resume_paused(self, trial_id: int, generation: int, attempt: int, *, once: bool = True) -> bool:
        """Move a paused trial from execution `generation` to the next, once per pause: `attempt` (the
        trial's attempts, which only a new execution's enqueue moves on) is recorded as resumed, so a
        redelivered pause event and a promotion racing it cannot both start an execution. `once=False`:
        also when that attempt was resumed already (its execution was lost before it enqueued)."""
        once_per_attempt = " AND (resumed_attempt <> :attempt OR attribute_not_exists(resumed_attempt))"
        try:
            self._table.update_item(
                Key={"id": trial_id},
                UpdateExpression="SET generation = :next, resumed_attempt = :attempt",
                ConditionExpression=(
                    "attribute_exists(id) AND (generation = :expected OR attribute_not_exists(generation))"
                    + (once_per_attempt if once else "")
                ),
                ExpressionAttributeValues={
                    ":next": generation + 1,
                    ":expected": generation,
                    ":attempt": attempt,
                },
            )
        except ClientError as error:
            if dynamo.is_condition_failure(error):
                return False
            raise
        return True

    def record_searcher_length(self, trial_id: int, length: int) -> Trial | None:
        """Raise the trial's reported searcher length; mark the searcher's answer pending when the
        trial reached its target. Returns the trial, or None when the length was not new."""
        try:
            answer = self._table.update_item(
                Key={"id": trial_id},
                UpdateExpression="SET searcher_length = :l",
                ConditionExpression="attribute_exists(id) AND (attribute_not_exists(searcher_length) OR searcher_length < :l)",
                ExpressionAttributeValues={":l": length},
                ReturnValues="ALL_NEW",
            )
        except ClientError as error:
            if dynamo.is_condition_failure(error):
                return None
            raise
        item = dynamo.plain(answer["Attributes"])
        target = item.get("target_length")
        if target is not None and length >= int(target):
            self._set_trial(trial_id, {"searcher_pending": True})
            item["searcher_pending"] = True
        return _decode(item)

    def _raise_total(self, trial_id: int, steps_completed: int) -> None:
        self._conditional_set(
            trial_id,
            "SET total_batches = :s",
            "attribute_not_exists(total_batches) OR total_batches < :s",
            {":s": steps_completed},
        )

    def _conditional_set(
        self, trial_id: int, expression: str, condition: str, values: dict[str, Any]
    ) -> None:
        # A failed condition means a newer value is already there: not an error (reports may race).
        try:
            self._table.update_item(
                Key={"id": trial_id},
                UpdateExpression=expression,
                ConditionExpression=f"attribute_exists(id) AND ({condition})",
                ExpressionAttributeValues=values,
            )
        except ClientError as error:
            if not dynamo.is_condition_failure(error):
                raise


def _finite(metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in metrics.items()}


def _decode(item: dict[str, Any]) -> Trial:
    item["hparams"] = json.loads(item["hparams"])
    if "latest_validation" in item:
        item["latest_validation"] = json.loads(item["latest_validation"])
    return Trial.from_item(item)
