"""Creating, validating, activating, listing and archiving experiments, and the progress an ended one
shows, on the in-memory twin."""

from __future__ import annotations

import pytest

from chalicelib.config import ConfigInvalidError
from chalicelib.domain import keys
from chalicelib.errors import BadRequestError, ConflictError, NotFoundError
from chalicelib.memory import EPOCH_2026
from chalicelib.services import experiments, pausing

RANDOM = {
    "name": "random",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "random", "metric": "loss", "max_trials": 2, "max_length": {"batches": 20}},
    "hyperparameters": {"x": {"type": "int", "minval": 1, "maxval": 9}},
}


def test_validate_fills_defaults_and_names_every_problem(flow):
    parsed = experiments.validate(flow.SINGLE)
    assert parsed.config.max_restarts == 5
    with pytest.raises(ConfigInvalidError) as error:
        experiments.validate({"name": "x", "searcher": {"name": "single"}})
    assert error.value.details["problems"]
    assert all({"path", "message"} <= set(p) for p in error.value.details["problems"])


def test_an_unsupported_searcher_is_a_config_problem_at_searcher_name(flow):
    config = {**flow.SINGLE, "searcher": {"name": "custom", "metric": "loss"}}
    with pytest.raises(ConfigInvalidError) as error:
        experiments.validate(config)
    assert [p["path"] for p in error.value.details["problems"]] == ["searcher.name"]


def test_validate_only_stores_nothing(ports, flow):
    result = experiments.create(ports, flow.SINGLE, None, validate_only=True)
    assert result.experiment is None
    assert ports.experiments.items == {} and ports.workflows.executions == {}


def test_the_context_must_be_a_digest_that_is_in_the_bucket(ports, flow):
    with pytest.raises(BadRequestError, match="not a SHA-256 hex digest"):
        experiments.create(ports, flow.SINGLE, "nope")
    with pytest.raises(BadRequestError, match="is not in S3"):
        experiments.create(ports, flow.SINGLE, flow.SHA)
    assert ports.experiments.items == {}


def test_create_records_the_experiment_and_starts_its_searcher(ports, flow):
    ports.clock.advance(5)
    experiment = flow.submit(max_restarts=2, resources={"slots_per_trial": 2, "priority": 7})
    assert experiment.state == "ACTIVE"
    assert experiment.start_time == "2026-01-01T00:00:05.000Z"
    assert experiment.searcher_type == "single" and experiment.resource_pool == "default"
    assert experiment.context_sha256 == flow.SHA and experiment.num_trials == 1
    # The seed comes from the clock and is kept in the stored config.
    assert experiment.config["reproducibility"]["experiment_seed"] == int(EPOCH_2026) + 5
    (trial_id,) = flow.trial_ids(experiment.id)
    trial = ports.trials.get(trial_id)
    assert trial.state == "QUEUED" and trial.target_length == 10 and trial.searcher_action == "train"
    assert trial.trial_seed == (int(EPOCH_2026) + 5 + trial_id) % 2**31
    assert flow.execution(trial_id) == {
        "trial_id": trial_id,
        "experiment_id": experiment.id,
        "pool": "default",
        "slots": 2,
        "priority": 7,
        "max_restarts": 2,
    }


def test_a_paused_experiment_starts_its_searcher_when_activated(ports, flow):
    ports.blobs.put(keys.context_key(flow.SHA))
    created = experiments.create(ports, flow.SINGLE, flow.SHA, activate=False).experiment
    assert created.state == "PAUSED" and created.searcher is None
    assert ports.trials.items == {}
    active = pausing.activate_experiment(ports, created.id)
    assert active.state == "ACTIVE" and len(flow.trial_ids(created.id)) == 1
    assert pausing.activate_experiment(ports, created.id).state == "ACTIVE"  # again: nothing more
    assert len(ports.trials.items) == 1


def test_an_ended_experiment_cannot_be_activated(ports, flow):
    experiment = flow.submit()
    assert ports.experiments.transition(experiment.id, "ERROR")
    with pytest.raises(ConflictError, match="cannot be activated"):
        pausing.activate_experiment(ports, experiment.id)


def test_an_unknown_experiment_is_not_found(ports):
    with pytest.raises(NotFoundError, match="experiment 7 not found"):
        experiments.get(ports, 7)


def test_create_records_the_owner_and_whether_it_is_archived(ports, flow):
    ports.blobs.put(keys.context_key(flow.SHA))
    plain = experiments.create(ports, flow.SINGLE, flow.SHA, owner="alice").experiment
    test = experiments.create(ports, flow.SINGLE, flow.SHA, owner="bob", archived=True).experiment
    assert (plain.owner, plain.archived) == ("alice", False)
    assert (test.owner, test.archived) == ("bob", True)
    assert [e.id for e in experiments.list_experiments(ports, 10, archived=False)[0]] == [plain.id]
    assert [e.id for e in experiments.list_experiments(ports, 10)[0]] == [test.id, plain.id]


def test_the_list_cursor_is_opaque_and_a_foreign_one_is_a_400(ports, flow):
    ids = [flow.submit().id for _ in range(3)]
    page, cursor = experiments.list_experiments(ports, 2)
    assert [e.id for e in page] == ids[:0:-1] and cursor is not None and not cursor.isdigit()
    rest, last = experiments.list_experiments(ports, 2, cursor)
    assert [e.id for e in rest] == [ids[0]] and last is None
    for foreign in ("3", "bm90IGpzb24", "eyJiZWZvcmUiOiAtMX0"):  # a plain id, not JSON, before: -1
        with pytest.raises(BadRequestError, match="is not one this API gave out"):
            experiments.list_experiments(ports, 2, foreign)


def test_only_an_experiment_that_has_ended_is_archived_as_in_determined(ports, flow):
    experiment = flow.submit()
    with pytest.raises(ConflictError, match=r"experiment 1 is ACTIVE; only an experiment that has ended"):
        experiments.archive(ports, experiment.id)
    assert ports.experiments.transition(experiment.id, "ERROR")
    assert experiments.archive(ports, experiment.id).archived is True
    with pytest.raises(ConflictError, match=r"already archived; `det experiment unarchive 1` undoes it"):
        experiments.archive(ports, experiment.id)
    assert experiments.unarchive(ports, experiment.id).archived is False
    with pytest.raises(ConflictError, match="already unarchived"):
        experiments.unarchive(ports, experiment.id)
    with pytest.raises(NotFoundError, match="experiment 9 not found"):
        experiments.archive(ports, 9)


def test_an_experiment_that_errors_before_any_batch_is_at_0_percent_not_100(ports, flow):
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    flow.end_trial(trial_id, "ERROR")
    ended = ports.experiments.get(experiment.id)
    assert (ended.state, ended.progress) == ("ERROR", 0.0)


def test_an_experiment_that_errors_keeps_the_work_its_trials_did(ports, flow):
    experiment = flow.submit(RANDOM)
    first, second = flow.trial_ids(experiment.id)
    ports.trials.record_training(first, 10)  # 10 of its 20 batches
    ports.trials.record_progress(second, 0.3)  # what the trial itself reported wins over batches
    ports.trials.record_training(second, 19)
    flow.end_trial(first, "ERROR")
    assert ports.experiments.get(experiment.id).state == "ACTIVE"
    flow.end_trial(second, "ERROR")
    ended = ports.experiments.get(experiment.id)
    assert (ended.state, ended.progress) == ("ERROR", 0.4)  # (0.5 + 0.3) / 2


def test_an_experiment_that_completes_is_at_100_percent(ports, flow):
    experiment = flow.submit(RANDOM)
    first, second = flow.trial_ids(experiment.id)
    flow.end_trial(first, "ERROR")
    flow.end_trial(second, "COMPLETED")
    ended = ports.experiments.get(experiment.id)
    assert (ended.state, ended.progress) == ("COMPLETED", 1.0)
