"""Checkpoint retention when an experiment ends, on the in-memory twin."""

from __future__ import annotations

from chalicelib.domain import keys
from chalicelib.domain.records import Checkpoint, Experiment, Trial
from chalicelib.services import retention


def _experiment(ports, storage, smaller_is_better=True):
    config = {
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "smaller_is_better": smaller_is_better},
        "checkpoint_storage": storage,
    }
    ports.experiments.create(Experiment(id=1, state="ACTIVE", config=config))
    return ports.experiments.get(1)


def _checkpoint(ports, trial_id, steps, loss=None):
    uuid = f"00000000-0000-4000-8000-{trial_id:06d}{steps:06d}"
    ports.blobs.put(keys.checkpoint_prefix(1, trial_id, uuid) + "model.pt", b"w")
    ports.checkpoints.put(
        Checkpoint(
            uuid=uuid,
            trial_id=trial_id,
            experiment_id=1,
            steps_completed=steps,
            report_time=ports.clock.now_iso(),
        )
    )
    if loss is not None:
        ports.metrics.put(trial_id, "validation", steps, {"loss": loss})
    return uuid


def _trial(trial_id):
    return Trial(id=trial_id, experiment_id=1, state="COMPLETED")


def test_each_trial_keeps_its_latest_and_its_best(ports):
    experiment = _experiment(ports, {"save_trial_latest": 1, "save_trial_best": 1, "save_experiment_best": 0})
    best = _checkpoint(ports, 1, 4, loss=0.1)
    middle = _checkpoint(ports, 1, 8, loss=0.3)
    latest = _checkpoint(ports, 1, 10, loss=0.4)
    trials = [_trial(1)]
    assert retention.apply(ports, experiment, trials) == [middle]
    states = {c.uuid: c.state for c in ports.checkpoints.for_trial(1)}
    assert states == {best: "COMPLETED", middle: "DELETED", latest: "COMPLETED"}
    assert not any(middle in key for key in ports.blobs.objects)
    assert any(best in key for key in ports.blobs.objects)
    assert retention.apply(ports, experiment, trials) == []  # a second run deletes nothing more


def test_the_experiments_best_is_kept_across_trials(ports):
    storage = {"save_trial_latest": 0, "save_trial_best": 0, "save_experiment_best": 1}
    experiment = _experiment(ports, storage, smaller_is_better=False)
    low = _checkpoint(ports, 1, 5, loss=0.2)
    high = _checkpoint(ports, 2, 5, loss=0.9)
    unscored = _checkpoint(ports, 2, 7)
    deleted = retention.apply(ports, experiment, [_trial(1), _trial(2)])
    assert sorted(deleted) == sorted([low, unscored])
    assert ports.checkpoints.get(high).state == "COMPLETED"


def test_defaults_keep_one_latest_and_one_best_per_trial(ports):
    experiment = _experiment(ports, {})
    kept = [_checkpoint(ports, 1, 4, loss=0.1), _checkpoint(ports, 1, 10)]
    gone = _checkpoint(ports, 1, 8, loss=0.5)
    assert retention.apply(ports, experiment, [_trial(1)]) == [gone]
    assert all(ports.checkpoints.get(u).state == "COMPLETED" for u in kept)
