"""`det experiment delete` on moto: an ended experiment's S3 objects, DynamoDB records, log streams and
CloudWatch dashboard go, in the request or through the events queue's handler; a repeat is harmless; a
running experiment is refused with 409, naming `det experiment cancel`."""

from __future__ import annotations

import json
import time
import uuid as uuidlib

import pytest

from chalicelib.domain import keys
from chalicelib.domain.records import LogLine
from chalicelib.errors import ConflictError, NotFoundError
from chalicelib.services import checkpoints, deleting, runs, stopping, telemetry, trial_reports
from stratus.contract import messages

pytestmark = pytest.mark.aws

RANDOM = {
    "name": "deletable",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
    "searcher": {"name": "random", "metric": "loss", "max_trials": 3, "max_length": {"batches": 10}},
}


def _objects(stack, prefix: str) -> list[str]:
    answer = stack.client("s3").list_objects_v2(Bucket=stack.names.bucket, Prefix=prefix)
    return [o["Key"] for o in answer.get("Contents", [])]


def _log_streams(stack, trial_id: int) -> list[str]:
    answer = stack.client("logs").describe_log_streams(
        logGroupName=stack.env["STRATUS_LOG_GROUP"], logStreamNamePrefix=keys.log_stream(trial_id)
    )
    return [s["logStreamName"] for s in answer.get("logStreams", [])]


def _dashboards(stack, name: str) -> list[str]:
    answer = stack.client("cloudwatch").list_dashboards(DashboardNamePrefix=name)
    return [d["DashboardName"] for d in answer["DashboardEntries"]]


def _ran_and_killed(stack):
    """A single-trial experiment whose run stored a checkpoint, metrics and logs, then was killed."""
    p = stack.ports
    experiment = stack.submit_experiment()
    spec = stack.launch_on_agent()
    runs.started(p, "agent-1", spec["run_id"], pid=11)
    run = p.runs.get(spec["run_id"])
    uuid = str(uuidlib.uuid4())
    s3 = stack.client("s3")
    for name, body in (
        ("model.pt", b"w" * 64),
        ("metadata.json", json.dumps({"steps_completed": 5}).encode()),
    ):
        key = keys.checkpoint_object_key(experiment.id, run.trial_id, uuid, name)
        s3.put_object(Bucket=stack.names.bucket, Key=key, Body=body)
    trial_reports.report_checkpoint(
        p, run, uuid, 5, {"model.pt": 64, "metadata.json": 22}, {"steps_completed": 5}
    )
    trial_reports.report_metrics(p, run, "training", 5, {"loss": 0.3})
    trial_reports.report_metrics(p, run, "validation", 5, {"loss": 0.2})
    p.logs.put(run.trial_id, [LogLine(int(time.time() * 1000), "epoch 1 done")])
    stopping.kill_experiment(p, experiment.id)
    stack.pump_until(lambda: stack.execution_status(run.trial_id) == "SUCCEEDED")
    return experiment, run, uuid


def test_an_ended_experiment_is_deleted_with_its_objects_and_records(stack):
    p = stack.ports
    experiment, run, uuid = _ran_and_killed(stack)
    _, (best,) = checkpoints.for_experiment(p, experiment.id, best=1)
    assert (best.checkpoint.uuid, best.searcher_value) == (uuid, 0.2)
    assert len(_objects(stack, f"checkpoints/{experiment.id}/")) == 2 and _log_streams(stack, run.trial_id)
    dashboard = telemetry.experiment_dashboard(p, experiment.id).name  # `det experiment dashboard`
    assert _dashboards(stack, dashboard) == [dashboard]

    done = deleting.delete_experiment(p, experiment.id)

    assert done == deleting.Deletion(experiment.id, deleted=True, trials_left=0)
    assert _objects(stack, f"checkpoints/{experiment.id}/") == []
    assert p.experiments.get(experiment.id) is None
    assert p.trials.get(run.trial_id) is None and p.trials.for_experiment(experiment.id) == []
    assert p.checkpoints.get(uuid) is None
    assert p.metrics.list(run.trial_id, "validation") == [] and p.metrics.groups(run.trial_id) == []
    assert p.runs.get(run.run_id) is None
    assert _log_streams(stack, run.trial_id) == []
    assert _dashboards(stack, dashboard) == []  # billed by the month while it stays
    assert _objects(stack, "contexts/")  # contexts are shared by content: they stay
    # Idempotent: a redelivered message is a no-op; a second delete is the usual 404.
    assert deleting.carry_on(p, experiment.id).deleted
    with pytest.raises(NotFoundError) as missing:
        deleting.delete_experiment(p, experiment.id)
    assert missing.value.status == 404


def test_a_running_experiment_is_refused_with_409_naming_cancel(stack):
    p = stack.ports
    experiment = stack.submit_experiment()

    with pytest.raises(ConflictError) as refused:
        deleting.delete_experiment(p, experiment.id)

    assert refused.value.status == 409
    assert f"`det experiment cancel {experiment.id}`" in refused.value.message
    assert p.experiments.get(experiment.id).state == "ACTIVE"
    assert len(p.trials.for_experiment(experiment.id)) == 1


def test_what_the_request_leaves_goes_on_through_the_events_queue(stack):
    from chalicelib.handlers.events import handle_events_message

    p = stack.ports
    experiment = stack.submit_experiment(RANDOM)
    stack.pump_until(lambda: len(p.runs.pending("default")) == 3)  # queued for slots (no agent here)
    stopping.kill_experiment(p, experiment.id)
    trial_ids = [t.id for t in p.trials.for_experiment(experiment.id)]
    assert len(trial_ids) == 3
    for trial_id in trial_ids:
        stack.pump_until(lambda t=trial_id: stack.execution_status(t) == "SUCCEEDED")

    first = deleting.delete_experiment(p, experiment.id, in_request_trials=1)
    assert (first.deleted, first.trials_left) == (False, 2)
    assert p.experiments.get(experiment.id).state == "DELETING"

    sqs, url = stack.client("sqs"), stack.env["STRATUS_EVENTS_QUEUE_URL"]
    deadline = time.monotonic() + 30
    while p.experiments.get(experiment.id) is not None:
        assert time.monotonic() < deadline, "the deletion never finished"
        for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
            "Messages", []
        ):
            handle_events_message(p, messages.parse_events_queue(message["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert p.trials.for_experiment(experiment.id) == []
    assert all(p.runs.get(keys.run_id(t, 1)) is None for t in trial_ids)
    # It had no dashboard: deleting the one it might have had was no error.
    assert _dashboards(stack, f"{stack.names.stack}-experiment-{experiment.id}") == []
