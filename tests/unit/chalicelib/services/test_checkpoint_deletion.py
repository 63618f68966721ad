"""`det checkpoint delete` on the in-memory twin (`chalicelib.services.checkpoint_deletion`): files gone and
records DELETED; a running trial's latest checkpoint (its resume point) refused, and then nothing of the
request deleted; an ended trial's may go; a repeat deletes nothing more; bad and unknown uuids named."""

from __future__ import annotations

import uuid as uuids

import pytest

from chalicelib.domain import keys
from chalicelib.domain.records import Checkpoint
from chalicelib.domain.states import TrialState
from chalicelib.errors import BadRequestError, ConflictError, NotFoundError
from chalicelib.services.checkpoint_deletion import MAX_DELETIONS, delete


def _stored(ports, trial_id: int, experiment_id: int, steps: int) -> str:
    uuid = str(uuids.uuid4())
    ports.checkpoints.put(
        Checkpoint(uuid=uuid, trial_id=trial_id, experiment_id=experiment_id, steps_completed=steps)
    )
    ports.blobs.put(keys.checkpoint_object_key(experiment_id, trial_id, uuid, "model.pt"), b"w")
    ports.trials.set_latest_checkpoint(trial_id, uuid, steps)
    return uuid


@pytest.fixture
def running(ports, flow):
    """A running trial with two checkpoints, the second its latest: (experiment id, trial id, older, latest)."""
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    ports.trials.transition(trial_id, TrialState.QUEUED)
    ports.trials.transition(trial_id, TrialState.PULLING)
    ports.trials.transition(trial_id, TrialState.RUNNING)
    older = _stored(ports, trial_id, experiment.id, 10)
    latest = _stored(ports, trial_id, experiment.id, 20)
    return experiment.id, trial_id, older, latest


def _files(ports, experiment_id: int, trial_id: int, uuid: str) -> list[str]:
    return ports.blobs.keys_under(keys.checkpoint_prefix(experiment_id, trial_id, uuid))


def test_an_older_checkpoint_is_deleted_and_a_repeat_deletes_nothing_more(ports, running):
    experiment_id, trial_id, older, latest = running
    done = delete(ports, [older])
    assert (done.deleted, done.already_deleted) == ([older], [])
    assert (
        ports.checkpoints.get(older).state == "DELETED"
        and _files(ports, experiment_id, trial_id, older) == []
    )
    assert ports.checkpoints.get(latest).state == "COMPLETED" and _files(
        ports, experiment_id, trial_id, latest
    )
    again = delete(ports, [older, older])
    assert (again.deleted, again.already_deleted) == ([], [older])


def test_a_running_trials_latest_checkpoint_is_refused_and_nothing_of_the_request_is_deleted(ports, running):
    experiment_id, trial_id, older, latest = running
    with pytest.raises(ConflictError) as refused:
        delete(ports, [older, latest])
    assert f"checkpoint {latest} is the latest of trial {trial_id}, which is RUNNING and resumes" in str(
        refused.value
    )
    assert ports.checkpoints.get(older).state == "COMPLETED" and _files(ports, experiment_id, trial_id, older)


def test_an_ended_trials_latest_checkpoint_may_be_deleted(ports, running):
    experiment_id, trial_id, _older, latest = running
    ports.trials.transition(trial_id, TrialState.STOPPING_COMPLETED)
    ports.trials.transition(trial_id, TrialState.COMPLETED)
    assert delete(ports, [latest]).deleted == [latest]
    assert _files(ports, experiment_id, trial_id, latest) == []


def test_bad_unknown_and_too_many_uuids_are_refused_before_anything_is_deleted(ports, running):
    experiment_id, trial_id, older, _latest = running
    with pytest.raises(BadRequestError, match="'nope' is not a checkpoint uuid"):
        delete(ports, [older, "nope"])
    unknown = str(uuids.uuid4())
    with pytest.raises(NotFoundError, match=f"checkpoint {unknown} not found"):
        delete(ports, [older, unknown])
    with pytest.raises(BadRequestError, match=f"at most {MAX_DELETIONS}"):
        delete(ports, [str(uuids.uuid4()) for _ in range(MAX_DELETIONS + 1)])
    with pytest.raises(BadRequestError, match="no checkpoint given"):
        delete(ports, [])
    assert ports.checkpoints.get(older).state == "COMPLETED" and _files(ports, experiment_id, trial_id, older)
