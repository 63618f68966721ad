"""Conditional writes whose loss (or whose half-done effect) exists only in DynamoDB, against moto: the
audit of chalicelib's conditional writes (DW-6, DW-13, the searcher's save of a missing experiment, a
duplicate create). Where the twin has the semantics too, the test runs on it as well (`ports`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from chalicelib.aws.run_table import DynamoRuns
from chalicelib.aws.trial_table import DynamoTrials
from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.run_records import Run
from chalicelib.domain.states import RunState
from chalicelib.errors import ConflictError
from chalicelib.services import trial_reports
from stratus.contract.actions import SearcherAction

pytestmark = pytest.mark.aws


class _Contended(DynamoRuns):
    """DynamoDB's runs, where another write to a run lands between each read of it and the transaction
    planned from that read (as every enqueue and grant of a pool moves its summary item): each read
    moves the record's version on behind the reader's back."""

    def get(self, run_id: str) -> Run | None:
        run = super().get(run_id)
        if run is not None:
            self._table.update_item(
                Key={"run_id": run_id},
                UpdateExpression="SET #v = #v + :one",
                ExpressionAttributeNames={"#v": "version"},
                ExpressionAttributeValues={":one": 1},
            )
        return run


def _waiting(run_id: str = "1.1") -> Run:
    return Run(
        run_id=run_id,
        trial_id=1,
        experiment_id=1,
        pool="default",
        slots=1,
        state=RunState.PENDING,
        priority=42,
        slot_token="token",
        queued_at="2026-01-01T00:00:00.000Z",
    )


def test_dw6_a_pool_move_that_keeps_losing_its_transaction_is_a_conflict_not_granted_meanwhile(stack):
    """DW-6: `det job update --resource-pool` moves a waiting run to the new pool's queue; its transaction
    keeps losing to other writes. The store must say so (409: run the update again), not answer as for a
    run granted meanwhile, which its caller leaves in the old pool's queue."""
    stack.ports.runs.put_request(_waiting())
    contended = _Contended()
    with pytest.raises(
        ConflictError, match=r"run 1\.1: its pool's queue kept changing .* run the update again"
    ):
        contended.update_job("1.1", {"pool": "compute", "pending_pool": "compute"}, only_pending=True)
    runs = stack.ports.runs
    assert [r.run_id for r in runs.pending("default")] == ["1.1"] and runs.pending("compute") == []
    # Uncontended, the same move goes through (and one of a run no longer waiting is None, as before).
    assert (
        runs.update_job("1.1", {"pool": "compute", "pending_pool": "compute"}, only_pending=True).pool
        == "compute"
    )
    runs.assign("1.1", "agent-1")
    assert (
        contended.update_job("1.1", {"pool": "default", "pending_pool": "default"}, only_pending=True) is None
    )


class _Crashy:
    """The trials table, where the call after one write that landed fails (a Lambda timeout, a throttle):
    a report's work after its first successful write is cut off."""

    def __init__(self, table: Any) -> None:
        self._table = table
        self.wrote = False
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)

    def update_item(self, **kwargs: Any) -> Any:
        if self.wrote and not self.failed:
            self.failed = True
            raise TimeoutError("Task timed out (simulated)")
        answer = self._table.update_item(**kwargs)
        self.wrote = True
        return answer


class _CrashyTrials(DynamoTrials):
    def __init__(self) -> None:
        super().__init__()
        self._table = _Crashy(self._table)


def test_dw13_a_result_at_the_target_marks_the_searchers_answer_pending_with_its_length(stack):
    """DW-13: a trial's result at its target length records the length and marks the searcher's answer
    pending; in DynamoDB those were two writes. A failure after the first, then the trial's retry (the
    same length: not new), left the flag unset: the trial read STOP at its target instead of WAIT for the
    searcher's answer, and a promotion was lost. Both must land together."""
    ports = stack.ports
    experiment = stack.submit_experiment()
    (trial,) = ports.trials.for_experiment(experiment.id)
    assert trial.target_length == 10
    run = dataclasses.replace(_waiting(), trial_id=trial.id, experiment_id=experiment.id)
    crashy = dataclasses.replace(ports, trials=_CrashyTrials())
    try:
        trial_reports.report_searcher_result(crashy, run, 10, 0.5)
    except TimeoutError:
        trial_reports.report_searcher_result(ports, run, 10, 0.5)  # the trial's retry
    stored = ports.trials.get(trial.id)
    assert (stored.searcher_length, stored.searcher_pending) == (10, True)
    assert trial_reports.searcher_state(ports, run)["action"] == SearcherAction.WAIT.value


def test_dw13_a_length_short_of_the_target_or_not_new_leaves_the_answer_alone(ports):
    """The single write of DW-13 keeps the old semantics: short of the target nothing is pending; a
    length not beyond the one recorded is not new (None), on DynamoDB as on the twin."""
    ports.trials.create(Trial(id=1, experiment_id=1, state="RUNNING", hparams={}, target_length=10))
    assert ports.trials.record_searcher_length(1, 4).searcher_pending is False
    assert ports.trials.record_searcher_length(1, 4) is None
    assert ports.trials.record_searcher_length(1, 3) is None
    assert ports.trials.record_searcher_length(1, 12).searcher_pending is True
    assert ports.trials.record_searcher_length(99, 1) is None  # no such trial


def test_the_searchers_save_of_a_missing_experiment_creates_nothing(ports):
    """`save_searcher` of an experiment that is not there: DynamoDB's UpdateItem created a stub item with
    no config (every later read of the id then failed: a 500), where the twin refuses. Both refuse now."""
    with pytest.raises(ConflictError, match="experiment 99 not found; create it before its searcher"):
        ports.experiments.save_searcher(99, {"n": 1}, expected_version=0)
    assert ports.experiments.get(99) is None
    ports.experiments.create(Experiment(id=1, state="ACTIVE", config={}))
    assert ports.experiments.save_searcher(1, {"n": 1}, expected_version=0)
    assert not ports.experiments.save_searcher(1, {"n": 2}, expected_version=0)  # a stale writer loses


def test_creating_an_experiment_whose_id_exists_is_a_conflict(ports):
    """A duplicate create (two deliveries of one submission claiming the same id): the twin answered 409,
    DynamoDB a raw ClientError (a 500). Both are the same ConflictError, and the first record stands."""
    ports.experiments.create(Experiment(id=1, state="ACTIVE", name="first", config={}))
    with pytest.raises(ConflictError, match="experiment 1 exists already; draw a new id from ids.next"):
        ports.experiments.create(Experiment(id=1, state="ACTIVE", name="second", config={}))
    assert ports.experiments.get(1).name == "first"
