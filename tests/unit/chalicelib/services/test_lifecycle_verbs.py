"""`det experiment delete` and the checkpoint listings, on the in-memory twin: an ended experiment is
deleted with everything it holds, in the request or (a larger one) through the events queue, resumably;
an experiment still running is refused; `best` ranks by the searcher metric."""

from __future__ import annotations

import pytest

from chalicelib.domain import keys
from chalicelib.domain.records import Checkpoint, Experiment, LogLine, Trial
from chalicelib.domain.run_records import Run
from chalicelib.domain.states import ExperimentState
from chalicelib.errors import BadRequestError, ConflictError, NotFoundError
from chalicelib.services import checkpoints, deleting
from stratus.contract import messages

CONFIG = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "smaller_is_better": True, "max_length": 10},
}


def _uuid(trial_id: int, steps: int) -> str:
    return f"00000000-0000-4000-8000-{trial_id:06d}{steps:06d}"


def _seed(ports, experiment_id=1, trials=2, state="COMPLETED", config=CONFIG):
    """An experiment with `trials` trials, each with a run, a checkpoint at 5 and 10 steps (validated with a
    loss), metrics, logs and a trial-request claim; other records of experiment 99 that must stay."""
    ports.experiments.create(Experiment(id=experiment_id, state=state, config=config, num_trials=trials))
    for n in range(trials):
        trial_id = experiment_id * 100 + n
        ports.trials.create(
            Trial(id=trial_id, experiment_id=experiment_id, state="COMPLETED", attempts=1, request_id=f"r{n}")
        )
        ports.ids.claim(keys.trial_request_claim(experiment_id, f"r{n}"), "trial")
        run_id = keys.run_id(trial_id, 1)
        ports.runs.put_request(
            Run(
                run_id=run_id,
                trial_id=trial_id,
                experiment_id=experiment_id,
                pool="default",
                slots=1,
                state="PENDING",
                priority=42,
            )
        )
        for steps, loss in ((5, 0.5 - n / 10), (10, 0.3 + n / 10)):
            uuid = _uuid(trial_id, steps)
            ports.blobs.put(keys.checkpoint_object_key(experiment_id, trial_id, uuid, "model.pt"), b"w" * 10)
            ports.blobs.put(keys.checkpoint_object_key(experiment_id, trial_id, uuid, "metadata.json"), b"{}")
            ports.checkpoints.put(
                Checkpoint(
                    uuid=uuid,
                    trial_id=trial_id,
                    experiment_id=experiment_id,
                    steps_completed=steps,
                    resources={"model.pt": 10, "metadata.json": 2},
                    report_time=f"2026-01-01T00:00:{steps:02d}",
                )
            )
            ports.metrics.put(trial_id, "validation", steps, {"loss": loss})
            ports.metrics.put(trial_id, "training", steps, {"loss": loss})
        ports.logs.put(trial_id, [LogLine(1, "hello")])


def _everything_of(ports, experiment_id):
    return {
        "experiment": ports.experiments.get(experiment_id) is not None,
        "trials": [t for t, item in ports.trials.items.items() if item["experiment_id"] == experiment_id],
        "runs": [r for r, item in ports.runs.items.items() if item["experiment_id"] == experiment_id],
        "checkpoints": [
            u for u, item in ports.checkpoints.items.items() if item["experiment_id"] == experiment_id
        ],
        "metrics": [k for k in ports.metrics.items if k[0] // 100 == experiment_id],
        "logs": [t for t in ports.logs.streams if t // 100 == experiment_id],
        "claims": [k for k in ports.ids.claims if k.startswith(f"trial-request:{experiment_id}:")],
        "objects": [k for k in ports.blobs.objects if k.startswith(f"checkpoints/{experiment_id}/")],
    }


NOTHING = {
    "experiment": False,
    "trials": [],
    "runs": [],
    "checkpoints": [],
    "metrics": [],
    "logs": [],
    "claims": [],
    "objects": [],
}


def test_a_small_ended_experiment_is_deleted_in_the_request_and_others_stay(ports):
    _seed(ports, 1)
    _seed(ports, 2, trials=1)
    ports.blobs.put("checkpoints/1/100/unreported/model.pt", b"x")  # an upload never reported

    done = deleting.delete_experiment(ports, 1)

    assert done == deleting.Deletion(1, deleted=True, trials_left=0)
    assert _everything_of(ports, 1) == NOTHING
    kept = _everything_of(ports, 2)
    assert kept["experiment"] and kept["trials"] == [200] and len(kept["checkpoints"]) == 2
    assert len(kept["objects"]) == 4 and kept["claims"] and kept["logs"] and kept["runs"]
    assert ports.queues.take_events() == []  # nothing left for the queue
    with pytest.raises(NotFoundError, match="experiment 1 not found"):
        deleting.delete_experiment(ports, 1)


def test_a_larger_one_goes_on_through_the_events_queue_until_it_is_gone(ports):
    _seed(ports, 1, trials=5)

    first = deleting.delete_experiment(ports, 1, in_request_trials=2)

    assert first == deleting.Deletion(1, deleted=False, trials_left=3)
    assert ports.experiments.get(1).state == ExperimentState.DELETING  # still shown while it goes
    assert len(_everything_of(ports, 1)["trials"]) == 3
    events = ports.queues.take_events()
    assert [messages.parse_events_queue(e) for e in events] == [messages.DeleteExperiment(1)]
    again = deleting.delete_experiment(ports, 1, in_request_trials=1)  # a second delete carries on
    assert again.trials_left == 2
    ports.queues.take_events()
    assert deleting.carry_on(ports, 1, max_trials=100).deleted
    assert _everything_of(ports, 1) == NOTHING
    assert deleting.carry_on(ports, 1) == deleting.Deletion(1, deleted=True, trials_left=0)  # a redelivery


@pytest.mark.parametrize("state", ["ACTIVE", "PAUSED", "STOPPING_CANCELED", "STOPPING_COMPLETED"])
def test_an_experiment_that_has_not_ended_is_refused_and_left_alone(ports, state):
    _seed(ports, 1, state=state)

    with pytest.raises(ConflictError, match=f"experiment 1 is {state}.*`det experiment cancel 1`"):
        deleting.delete_experiment(ports, 1)

    assert ports.experiments.get(1).state == state
    assert len(_everything_of(ports, 1)["checkpoints"]) == 4
    assert deleting.carry_on(ports, 1).deleted is False  # a stray message deletes nothing either
    assert len(_everything_of(ports, 1)["trials"]) == 2


def test_checkpoints_by_report_time_or_the_best_by_the_searcher_metric(ports):
    _seed(ports, 1)
    ports.checkpoints.mark_deleted(_uuid(101, 5))  # loss 0.4, but its files are gone

    _, everything = checkpoints.for_experiment(ports, 1)
    _, best = checkpoints.for_experiment(ports, 1, best=2)

    assert [c.checkpoint.uuid for c in everything] == [
        _uuid(100, 5),
        _uuid(101, 5),
        _uuid(100, 10),
        _uuid(101, 10),
    ]
    assert [(c.checkpoint.uuid, c.searcher_value) for c in best] == [
        (_uuid(100, 10), 0.3),
        (_uuid(101, 10), 0.4),
    ]
    assert best[0].validation == {"loss": 0.3}


def test_bigger_is_better_when_the_config_says_so(ports):
    _seed(ports, 1, config={**CONFIG, "searcher": {**CONFIG["searcher"], "smaller_is_better": False}})

    _, (top,) = checkpoints.for_experiment(ports, 1, best=1)

    assert (top.checkpoint.uuid, top.searcher_value) == (_uuid(100, 5), 0.5)


def test_a_checkpoints_files_are_presigned_and_a_deleted_ones_refused(ports):
    _seed(ports, 1)
    uuid = _uuid(100, 10)

    checkpoint, urls = checkpoints.download_urls(ports, uuid)

    assert checkpoint.uuid == uuid
    assert set(urls) == {"model.pt", "metadata.json"}
    assert urls["model.pt"].startswith(f"memory://{ports.blobs.bucket}/checkpoints/1/100/{uuid}/model.pt")
    ports.checkpoints.mark_deleted(uuid)
    with pytest.raises(ConflictError, match="DELETED: its files were removed"):
        checkpoints.download_urls(ports, uuid)
    with pytest.raises(NotFoundError, match="list-checkpoints"):
        checkpoints.get(ports, _uuid(999, 1))
    with pytest.raises(BadRequestError, match="'../x' is not a checkpoint uuid"):
        checkpoints.get(ports, "../x")


def test_the_events_queue_carries_a_deletion_on_and_drops_trial_events_of_it(ports):
    from chalicelib.handlers.events import handle_events_message

    _seed(ports, 1, trials=3)
    deleting.delete_experiment(ports, 1, in_request_trials=1)
    (body,) = ports.queues.take_events()
    late = messages.TrialExited(event_id="exited-101", trial_id=101, experiment_id=1, state="COMPLETED")

    handle_events_message(ports, late)  # the searcher never sees it: no error, nothing created
    assert ports.experiments.get(1).state == ExperimentState.DELETING
    handle_events_message(ports, messages.parse_events_queue(body))

    assert _everything_of(ports, 1) == NOTHING
