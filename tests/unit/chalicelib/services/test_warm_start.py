"""Determined's warm start on the in-memory twin (`chalicelib.services.warm_start`): every trial of an
experiment with `searcher.source_checkpoint_uuid` or `source_trial_id` starts from that checkpoint (its
launch spec's latest checkpoint); a source that cannot be restored is refused at create, naming it; the
source of an experiment that has not ended cannot be deleted, nor the experiment holding it."""

from __future__ import annotations

import dataclasses
import uuid as uuids
from typing import Any

import pytest

from chalicelib.config import ConfigInvalidError
from chalicelib.domain import keys
from chalicelib.domain.records import Checkpoint
from chalicelib.domain.states import ExperimentState
from chalicelib.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError
from chalicelib.services import checkpoint_deletion, deleting, experiments, trial_reports, warm_start
from stratus.contract.env import LATEST_CHECKPOINT


def _store(ports, trial_id: int, steps: int, *, deleted: bool = False) -> str:
    """A checkpoint of `trial_id` reported now (its files in the bucket unless `deleted`)."""
    trial = ports.trials.get(trial_id)
    uuid = str(uuids.uuid4())
    ports.checkpoints.put(
        Checkpoint(
            uuid=uuid,
            trial_id=trial_id,
            experiment_id=trial.experiment_id,
            steps_completed=steps,
            report_time=ports.clock.now_iso(),
            resources={"state_dict.pth": 1},
        )
    )
    ports.blobs.put(keys.checkpoint_object_key(trial.experiment_id, trial_id, uuid, "state_dict.pth"), b"w")
    ports.trials.set_latest_checkpoint(trial_id, uuid, steps)
    if deleted:
        ports.checkpoints.mark_deleted(uuid)
    return uuid


def _warm(flow, **source: Any) -> dict[str, Any]:
    """The random search of three trials (two at once), warm-started from `source`."""
    config = flow.TWO_AT_ONCE
    return {**config, "searcher": {**config["searcher"], **source}}


@pytest.fixture
def source(ports, flow):
    """A single-trial experiment whose trial stored two checkpoints: (experiment, trial, latest uuid)."""
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    _store(ports, trial_id, 10)
    ports.clock.advance(1)
    latest = _store(ports, trial_id, 20)
    ports.clock.advance(1)
    return experiment.id, trial_id, latest


def test_every_trial_starts_from_the_source_checkpoint_and_reads_it_in_its_launch_spec(ports, flow, source):
    _, _, uuid = source
    experiment = flow.submit(_warm(flow, source_checkpoint_uuid=uuid))
    first, second = flow.trial_ids(experiment.id)
    flow.end_trial(first, "COMPLETED")  # the searcher creates the third
    trials = [ports.trials.get(t) for t in flow.trial_ids(experiment.id)]
    assert len(trials) == 3
    assert all(t.latest_checkpoint == t.warm_start_checkpoint == uuid for t in trials)
    assert all(t.warm_start_trial_id is None for t in trials)  # PBT's parent, not this
    assert flow.place(second)["environment"][LATEST_CHECKPOINT] == uuid
    assert warm_start.may_restore(ports, second, uuid)
    assert not warm_start.may_restore(ports, second, str(uuids.uuid4()))


def test_a_source_trial_means_its_latest_completed_checkpoint_when_the_experiment_was_created(
    ports, flow, source
):
    _, trial_id, latest = source
    _store(ports, trial_id, 30, deleted=True)  # the most steps, but its files are gone
    experiment = flow.submit(_warm(flow, source_trial_id=trial_id))
    ports.clock.advance(1)
    _store(ports, trial_id, 40)  # stored after the creation: not the experiment's source
    first, _ = flow.trial_ids(experiment.id)
    flow.end_trial(first, "COMPLETED")
    trials = [ports.trials.get(t) for t in flow.trial_ids(experiment.id)]
    assert [t.warm_start_checkpoint for t in trials] == [latest] * 3
    assert ports.experiments.get(experiment.id).warm_start_checkpoint == latest
    assert ports.checkpoints.get(latest).used_by == [experiment.id]


def test_without_a_source_trials_start_from_scratch(ports, flow):
    experiment = flow.submit(flow.TWO_AT_ONCE)
    trials = [ports.trials.get(t) for t in flow.trial_ids(experiment.id)]
    assert [(t.latest_checkpoint, t.warm_start_checkpoint) for t in trials] == [(None, None)] * 2


def _refused(ports, flow, error: type[Exception], **source: Any) -> str:
    """Creating a warm-started experiment raises `error`; nothing was created. Its message."""
    before = ports.experiments.list(100)[0]
    with pytest.raises(error) as raised:
        experiments.create(ports, _warm(flow, **source), flow.SHA)
    assert ports.experiments.list(100)[0] == before
    return str(raised.value)


def test_an_unknown_checkpoint_is_refused_by_name(ports, flow):
    missing = str(uuids.uuid4())
    message = _refused(ports, flow, NotFoundError, source_checkpoint_uuid=missing)
    assert f"searcher.source_checkpoint_uuid {missing}: no such checkpoint" in message
    assert "det experiment list-checkpoints" in message


def test_a_deleted_checkpoint_is_refused_by_name(ports, flow, source):
    _, trial_id, _ = source
    gone = _store(ports, trial_id, 50, deleted=True)
    message = _refused(ports, flow, BadRequestError, source_checkpoint_uuid=gone)
    assert f"searcher.source_checkpoint_uuid {gone}: the checkpoint is DELETED" in message


def test_a_checkpoint_of_an_experiment_being_deleted_is_refused(ports, flow, source):
    experiment_id, trial_id, uuid = source
    flow.end_trial(trial_id, "COMPLETED")
    ports.experiments.transition(experiment_id, ExperimentState.DELETING)
    message = _refused(ports, flow, BadRequestError, source_checkpoint_uuid=uuid)
    assert f"experiment {experiment_id}, which holds checkpoint {uuid}, is being deleted" in message


def test_an_unknown_trial_or_one_without_a_checkpoint_is_refused_by_name(ports, flow):
    message = _refused(ports, flow, NotFoundError, source_trial_id=999)
    assert "searcher.source_trial_id 999: no such trial" in message
    empty = flow.submit()
    (trial_id,) = flow.trial_ids(empty.id)
    _store(ports, trial_id, 10, deleted=True)
    message = _refused(ports, flow, BadRequestError, source_trial_id=trial_id)
    assert f"searcher.source_trial_id {trial_id}: trial {trial_id} has no checkpoint to start from" in message


def test_a_malformed_uuid_or_both_sources_are_config_problems(ports, flow, source):
    _, trial_id, uuid = source
    message = _refused(ports, flow, ConfigInvalidError, source_checkpoint_uuid="latest")
    assert (
        'searcher.source_checkpoint_uuid: must be a checkpoint UUID like "0e5a9d51-…", got "latest"'
        in message
    )
    message = _refused(ports, flow, ConfigInvalidError, source_checkpoint_uuid=uuid, source_trial_id=trial_id)
    assert "set either source_trial_id or source_checkpoint_uuid, not both" in message


def test_validate_only_checks_the_source_too(ports, flow):
    with pytest.raises(NotFoundError):
        experiments.create(ports, _warm(flow, source_trial_id=999), flow.SHA, validate_only=True)


@pytest.mark.parametrize("field", ["source_checkpoint_uuid", "source_trial_id"])
def test_the_source_cannot_be_deleted_until_the_experiment_starting_from_it_has_ended(
    ports, flow, source, field
):
    experiment_id, trial_id, uuid = source
    warm = flow.submit(_warm(flow, **{field: uuid if field == "source_checkpoint_uuid" else trial_id}))
    flow.end_trial(trial_id, "COMPLETED")  # the source experiment ends: it could be deleted but for `warm`
    assert ports.experiments.get(experiment_id).state == ExperimentState.COMPLETED

    with pytest.raises(ConflictError) as refused:
        checkpoint_deletion.delete(ports, [uuid])
    assert str(refused.value) == (
        f"checkpoint {uuid} cannot be deleted: experiment {warm.id} (ACTIVE) starts its trials from it "
        f"(searcher.{field}); delete it once experiment {warm.id} has ended (`det experiment wait "
        f"{warm.id}`, or cancel it first)"
    )
    assert ports.checkpoints.get(uuid).state == "COMPLETED"
    with pytest.raises(ConflictError) as refused:
        deleting.delete_experiment(ports, experiment_id)
    assert str(refused.value).startswith(
        f"experiment {experiment_id} cannot be deleted: it holds checkpoint {uuid}, and experiment {warm.id} "
    )
    assert ports.experiments.get(experiment_id).state == ExperimentState.COMPLETED
    assert warm_start.sources_in_use(ports, [ports.checkpoints.get(uuid)]) == {uuid}

    while running := [t for t in ports.trials.for_experiment(warm.id) if not t.state.terminal]:
        flow.end_trial(running[0].id, "COMPLETED")  # ending one may create the next
    assert ports.experiments.get(warm.id).state == ExperimentState.COMPLETED
    assert warm_start.sources_in_use(ports, [ports.checkpoints.get(uuid)]) == set()
    assert checkpoint_deletion.delete(ports, [uuid]).deleted == [uuid]
    assert deleting.delete_experiment(ports, experiment_id).deleted


def test_other_checkpoints_of_the_source_trial_may_go(ports, flow, source):
    experiment_id, trial_id, uuid = source
    flow.submit(_warm(flow, source_checkpoint_uuid=uuid))
    (older,) = [c.uuid for c in ports.checkpoints.for_trial(trial_id) if c.uuid != uuid]
    assert checkpoint_deletion.delete(ports, [older]).deleted == [older]


def test_a_source_deleted_while_the_experiment_was_created_refuses_the_create(ports, flow, source):
    """The deletion won the race: the create's check after its claim sees it, and nothing is created."""
    experiment_id, trial_id, latest = source

    class _DeletedMeanwhile:
        def __init__(self, checkpoints):
            self._checkpoints = checkpoints

        def add_user(self, uuid, experiment_id):
            self._checkpoints.mark_deleted(uuid)  # `det checkpoint delete`, between the check and the claim
            return self._checkpoints.add_user(uuid, experiment_id)

        def __getattr__(self, name):
            return getattr(self._checkpoints, name)

    raced = dataclasses.replace(ports, checkpoints=_DeletedMeanwhile(ports.checkpoints))
    with pytest.raises(ConflictError, match=f"checkpoint {latest}, the warm-start source, was deleted"):
        experiments.create(raced, _warm(flow, source_trial_id=trial_id), flow.SHA)
    assert [e.id for e in ports.experiments.list(100)[0]] == [experiment_id]


def test_a_trial_may_download_its_source_from_another_experiment_and_no_other(ports, flow, source):
    source_experiment, trial_id, uuid = source
    warm = flow.submit(_warm(flow, source_checkpoint_uuid=uuid))
    first, _ = flow.trial_ids(warm.id)
    flow.place(first)
    run = ports.runs.get(keys.run_id(first, 1))
    found = trial_reports.checkpoint_downloads(ports, run, uuid)
    assert found["checkpoint"].experiment_id == source_experiment and "state_dict.pth" in found["urls"]
    (older,) = [c.uuid for c in ports.checkpoints.for_trial(trial_id) if c.uuid != uuid]
    with pytest.raises(ForbiddenError, match=f"checkpoint {older} belongs to another experiment"):
        trial_reports.checkpoint_downloads(ports, run, older)


def test_the_retention_policy_keeps_a_source_while_an_experiment_starts_from_it(ports, flow, source):
    """The source is neither the trial's latest nor its best: retention would delete it at the source
    experiment's end, but for the experiment that starts from it."""
    experiment_id, trial_id, _ = source
    (middle,) = [c.uuid for c in ports.checkpoints.for_trial(trial_id) if c.steps_completed == 10]
    flow.submit(_warm(flow, source_checkpoint_uuid=middle))
    flow.end_trial(trial_id, "COMPLETED")  # the source experiment ends: its retention policy runs
    states = {c.steps_completed: c.state for c in ports.checkpoints.for_trial(trial_id)}
    assert states == {10: "COMPLETED", 20: "COMPLETED"}
