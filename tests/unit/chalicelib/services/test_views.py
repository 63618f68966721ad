"""Typed records rendered as the API's shapes (chalicelib/api/views.py), on the in-memory twin."""

from __future__ import annotations

from chalicelib.api import views
from chalicelib.domain.records import Checkpoint, Experiment, Trial

UUID = "0f0e0d0c-0b0a-4909-8807-060504030201"


def test_a_trial_shows_its_restarts_its_exit_and_its_latest_checkpoint(ports):
    ports.checkpoints.put(
        Checkpoint(
            uuid=UUID, trial_id=7, experiment_id=3, steps_completed=10, report_time="t", resources={"m": 1}
        )
    )
    trial = Trial(
        id=7,
        experiment_id=3,
        state="ERROR",
        attempts=4,
        generation=1,  # one run was a resume after a pause, another a requeue: neither is a restart
        restarts=2,
        exit_code=3,
        exit_reason="rank 1 failed",
        failed_rank=1,
        latest_checkpoint=UUID,
        best_validation=1,
    )
    shown = views.trial(ports, trial)
    assert shown.restarts == 2 and shown.best_validation == 1.0
    assert (shown.exit.code, shown.exit.reason, shown.exit.failed_rank) == (3, "rank 1 failed", 1)
    assert shown.latest_checkpoint.uri == f"s3://{ports.settings.bucket}/checkpoints/3/7/{UUID}/"
    assert views.trial(ports, Trial(id=8, experiment_id=3, state="QUEUED")).exit is None


def test_an_experiment_shows_its_config_as_submitted(ports):
    experiment = Experiment(id=3, state="ACTIVE", name="e", config={"searcher": {"name": "single"}})
    shown = views.experiment(experiment)
    assert (shown.id, shown.state, shown.config, shown.progress) == (
        3,
        "ACTIVE",
        {"searcher": {"name": "single"}},
        None,
    )
