"""Trials in DynamoDB, with a GSI by experiment and the summary fields `det` shows."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import dynamo
from chalicelib.domain.records import Trial
from chalicelib.domain.states import TRIAL_TRANSITIONS, TrialState, allowed_sources
from chalicelib.domain.updates import TrialUpdates
from chalicelib.errors import ConflictError

#: Attempts at recording a searcher length that a new target got in the way of.
_LENGTH_TRIES = 5


class DynamoTrials(TrialUpdates):
    def __init__(self) -> None:
        self._table = dynamo.table("trials")

    def create(self, trial: Trial) -> None:
        """Create a trial once; creating the same id again (a redelivered event) changes nothing."""
        item = _encoded(trial.to_item())
        item["state"] = str(trial.state)
        try:
            self._table.put_item(Item=dynamo.to_dynamo(item), ConditionExpression="attribute_not_exists(id)")
        except ClientError as error:
            if not dynamo.is_condition_failure(error):
                raise

    def get(self, trial_id: int) -> Trial | None:
        item = self._table.get_item(Key={"id": trial_id}, ConsistentRead=True).get("Item")
        return _decode(dynamo.plain(item)) if item else None

    def for_experiment(self, experiment_id: int, *, consistent: bool = False) -> list[Trial]:
        items = dynamo.query_index(self._table, "by_experiment", "experiment_id", experiment_id)
        trials: list[Trial | None] = [_decode(i) for i in items]
        if consistent:
            # The index is eventually consistent: a trial it shows not ended is read from the table (one
            # that ended never moves again).
            trials = [t if t is None or t.state.terminal else self.get(t.id) for t in trials]
        return sorted((t for t in trials if t is not None), key=lambda t: t.id)

    def transition(self, trial_id: int, target: TrialState, *, end_time: str | None = None) -> Trial | None:
        sources = allowed_sources(TRIAL_TRANSITIONS, target)
        sets = {"end_time": end_time} if end_time is not None else {}
        update = dynamo.transition_update(str(target), [str(s) for s in sources], sets)
        record = dynamo.conditional_update(self._table, {"id": trial_id}, *update)
        return _decode(record) if record else None

    def _set_trial(self, trial_id: int, fields: Mapping[str, Any]) -> None:
        dynamo.update_fields(self._table, {"id": trial_id}, fields)

    def _set_trial_if_newer(self, trial_id: int, fields: Mapping[str, Any], seq: int) -> bool:
        # Lost: a later searcher entry was applied to the trial already, or the trial is gone. The same
        # entry again (a consumer that failed half-way through it) applies again: it may have more to do.
        updated = dynamo.update_fields(
            self._table,
            {"id": trial_id},
            {**fields, "searcher_seq": seq},
            "attribute_exists(#pk) AND (attribute_not_exists(searcher_seq) OR searcher_seq <= :seq)",
            {":seq": seq},
        )
        return updated is not None

    def _answer_trial(self, trial_id: int, length: int) -> None:
        # Lost: the trial reported a result beyond `length`, which awaits its own answer.
        self._conditional_set(
            trial_id,
            "SET searcher_pending = :f",
            "attribute_not_exists(searcher_length) OR searcher_length <= :l",
            {":f": False, ":l": length},
        )

    def delete(self, trial_id: int) -> None:
        self._table.delete_item(Key={"id": trial_id})

    def record_training(self, trial_id: int, steps_completed: int) -> Trial | None:
        try:
            answer = self._table.update_item(
                Key={"id": trial_id},
                UpdateExpression="SET total_batches = :s",
                ConditionExpression="attribute_exists(id) AND "
                "(attribute_not_exists(total_batches) OR total_batches < :s)",
                ExpressionAttributeValues={":s": steps_completed},
                ReturnValues="ALL_OLD",
            )
        except ClientError as error:
            if dynamo.is_condition_failure(error):
                return None  # a report that raced it got there first
            raise
        return _decode(dynamo.plain(answer["Attributes"]))

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
        trial reached its target. Returns the trial, or None when the length was not new.

        One write does both (as the twin does): a pending flag written apart could be lost to a failure
        between the two writes, and the trial's retry (the same length: not new) would never write it;
        the trial would then read STOP at its target instead of WAIT for the searcher's answer. Each
        write holds only for the target as it is (short of `length`, or reached); a target moved between
        the two is tried again."""
        for _ in range(_LENGTH_TRIES):
            for reached in (False, True):
                item = self._raise_length(trial_id, length, reached=reached)
                if item is not None:
                    return _decode(item)
            stored = self._table.get_item(Key={"id": trial_id}, ConsistentRead=True).get("Item")
            if stored is None or int(stored.get("searcher_length", length - 1)) >= length:
                return None  # gone, or a length as far on was recorded already
        raise ConflictError(
            f"trial {trial_id}: its searcher target kept changing while its result at length {length} "
            "was recorded; report it again"
        )

    def _raise_length(self, trial_id: int, length: int, *, reached: bool) -> dict[str, Any] | None:
        """Set `searcher_length` (and `searcher_pending`, with ``reached``) if `length` is new and the
        target is reached (or not, without ``reached``); the new record, or None."""
        new = "attribute_exists(id) AND (attribute_not_exists(searcher_length) OR searcher_length < :l)"
        target = (
            "target_length <= :l"
            if reached
            else "(attribute_not_exists(target_length) OR target_length > :l)"
        )
        return dynamo.conditional_update(
            self._table,
            {"id": trial_id},
            "SET searcher_length = :l" + (", searcher_pending = :yes" if reached else ""),
            f"{new} AND {target}",
            {},
            {":l": length, **({":yes": True} if reached else {})},
        )

    def _set_trial_unless_past(
        self, trial_id: int, field: str, value: int, fields: Mapping[str, Any]
    ) -> None:
        dynamo.update_fields(
            self._table,
            {"id": trial_id},
            _encoded(fields),
            f"attribute_exists(#pk) AND (attribute_not_exists({field}) OR {field} <= :at)",
            {":at": value},
        )

    def _set_trial_if_better(self, trial_id: int, field: str, value: float, smaller_is_better: bool) -> None:
        better = "<" if smaller_is_better else ">"
        dynamo.update_fields(
            self._table,
            {"id": trial_id},
            {field: value},
            f"attribute_exists(#pk) AND (attribute_not_exists({field}) OR :at {better} {field})",
            {":at": dynamo.number(value)},
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


#: The fields kept as JSON text (maps of any keys and values, as given): hyperparameters and metrics.
_JSON_FIELDS = ("hparams", "latest_validation")


def _encoded(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: dynamo.dumps(v) if k in _JSON_FIELDS else v for k, v in fields.items()}


def _decode(item: dict[str, Any]) -> Trial:
    for name in _JSON_FIELDS:
        if name in item:
            item[name] = json.loads(item[name])
    return Trial.from_item(item)
