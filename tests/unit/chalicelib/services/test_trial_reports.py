"""What a running trial reports (metrics, searcher results, checkpoints) and asks (its searcher's wish),
each call checked against its run token; on the in-memory twin."""

from __future__ import annotations

import dataclasses
import math
import uuid as uuidlib

import pytest

from chalicelib.domain import keys
from chalicelib.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError, UnauthorizedError
from chalicelib.services import runs, tokens, trial_reports

UUID = "0f0e0d0c-0b0a-4909-8807-060504030201"


@pytest.fixture
def run(ports, flow):
    """A running trial of a single-searcher experiment (train to 10 batches, minimise `loss`)."""
    (trial_id,) = flow.trial_ids(flow.submit().id)
    spec = flow.place(trial_id)
    runs.started(ports, "agent-1", spec["run_id"], 10)
    return ports.runs.get(spec["run_id"])


def _bearer(ports, run_id):
    return "Bearer " + tokens.run_token(ports.settings.token_secret, run_id)


def _authorize(ports, header, trial_id):
    """What the API does with a run token: verify it, then find its live run (`chalicelib.api.auth`)."""
    return tokens.live_run(ports, tokens.run_id_from_token(ports.settings.token_secret, header), trial_id)


def test_a_run_token_opens_its_own_trial_only_while_the_run_lives(ports, run):
    header = _bearer(ports, run.run_id)
    assert _authorize(ports, header, run.trial_id).run_id == run.run_id
    with pytest.raises(ForbiddenError, match=f"belongs to trial {run.trial_id}, not trial 99"):
        _authorize(ports, header, 99)
    with pytest.raises(UnauthorizedError):
        _authorize(ports, "Bearer forged.token", run.trial_id)
    with pytest.raises(ForbiddenError, match="run 42.1 does not exist"):
        _authorize(ports, _bearer(ports, "42.1"), None)
    runs.exited(ports, "agent-1", run.run_id, 0, "exited with code 0")
    with pytest.raises(ForbiddenError, match="has exited"):
        _authorize(ports, header, run.trial_id)


def test_trial_info_gives_what_the_trial_starts_from(ports, run):
    info = trial_reports.trial_info(ports, run)
    assert info["trial_id"] == run.trial_id and info["run_id"] == run.run_id
    assert info["hparams"] == {} and info["latest_checkpoint"] is None
    assert info["config"]["searcher"]["metric"] == "loss"


def test_metrics_are_stored_once_and_raise_the_trials_totals(ports, run):
    trial_id = run.trial_id
    trial_reports.report_metrics(ports, run, "training", 5, {"loss": 0.9})
    trial_reports.report_metrics(ports, run, "training", 5, {"loss": 0.1})  # a repeated report
    assert [r.metrics for r in ports.metrics.list(trial_id, "training")] == [{"loss": 0.9}]
    assert ports.trials.get(trial_id).total_batches == 5
    with pytest.raises(BadRequestError, match=r"metric group 'test\.ing' contains '\.'.*'test_ing'"):
        trial_reports.report_metrics(ports, run, "test.ing", 5, {})
    with pytest.raises(BadRequestError, match="the metric group is empty"):
        trial_reports.report_metrics(ports, run, "", 5, {})
    with pytest.raises(BadRequestError, match="steps_completed must be ≥ 0, got -1"):
        trial_reports.report_metrics(ports, run, "training", -1, {})


# Determined's generic metrics: any group name without '.', however odd (11_generic_metrics's shape).
ODD_GROUPS = ["group_b", "grou%p_c", "infer ence", "inf%er en/ce", "a#000000000001", "validation "]


def test_custom_groups_are_stored_by_name_and_reach_neither_totals_nor_searcher(ports, run):
    trial_id = run.trial_id
    for steps, group in enumerate(ODD_GROUPS, start=1):
        trial_reports.report_metrics(
            ports, run, group, steps, {f"z{group}/me.t r%i]\\c_0": steps, "loss": 0.1}
        )
    trial_reports.report_metrics(ports, run, "group_b", 1, {"loss": 9.0})  # a repeated report: kept once
    trial_reports.report_metrics(ports, run, "training", 7, {"loss": 0.5})
    assert ports.metrics.groups(trial_id) == ["training", *sorted(ODD_GROUPS)]
    for steps, group in enumerate(ODD_GROUPS, start=1):
        (report,) = ports.metrics.list(trial_id, group)
        assert (report.group, report.steps_completed) == (group, steps)
        assert report.metrics == {f"z{group}/me.t r%i]\\c_0": steps, "loss": 0.1}
    trial = ports.trials.get(trial_id)
    assert trial.total_batches == 7  # the training report only
    assert trial.latest_validation is None and trial.searcher_length is None
    assert ports.metrics.list(trial_id, "validation") == []  # "validation " is a group of its own
    assert ports.metrics.list(trial_id, "a") == []  # no group's reports are listed under another's
    assert ports.queues.take_events() == []  # the searcher sees the validation group only


def test_a_validation_is_a_searcher_result_at_its_length(ports, run):
    trial_id = run.trial_id
    trial_reports.report_metrics(ports, run, "validation", 10, {"loss": 0.25, "acc": float("nan")})
    trial = ports.trials.get(trial_id)
    assert trial.best_validation == 0.25 and trial.latest_validation == {"loss": 0.25, "acc": None}
    assert trial.searcher_length == 10 and trial.searcher_pending is True
    (event,) = ports.queues.take_events()
    assert event == {
        "type": "validation",
        "event_id": f"validation-{trial_id}-10",
        "experiment_id": run.experiment_id,
        "trial_id": trial_id,
        "length": 10,
        "metric": 0.25,
    }
    assert trial_reports.searcher_state(ports, run) == {"action": "wait", "length": 10, "unit": "batches"}


def test_a_validation_without_the_searcher_metric_is_no_searcher_result(ports, run):
    trial_reports.report_metrics(ports, run, "validation", 10, {"acc": 0.5})
    assert ports.queues.take_events() == []
    assert ports.trials.get(run.trial_id).searcher_length is None


def test_searcher_results_move_forward_and_a_retry_is_sent_again(ports, run):
    trial_reports.report_searcher_result(ports, run, 4, 0.5)
    trial_reports.report_searcher_result(ports, run, 4, 0.5)  # a retried report: the event again
    trial_reports.report_searcher_result(ports, run, 2, 0.5)  # older than one already reported: dropped
    trial_reports.report_searcher_result(ports, run, 6, math.nan)  # a diverged trial ranks last
    events = ports.queues.take_events()
    assert [(e["length"], e["metric"]) for e in events] == [(4, 0.5), (4, 0.5), (6, 1e300)]


def test_the_searcher_state_follows_the_trials_target(ports, run):
    trial_id = run.trial_id
    assert trial_reports.searcher_state(ports, run) == {"action": "train", "length": 10, "unit": "batches"}
    ports.trials.items[trial_id]["searcher_length"] = 10
    assert trial_reports.searcher_state(ports, run)["action"] == "stop"  # its last target is reached
    ports.trials.set_searcher_action(trial_id, "train", target_length=20)
    assert trial_reports.searcher_state(ports, run) == {"action": "train", "length": 20, "unit": "batches"}
    assert trial_reports.heartbeat(ports, run) == {"preempt": False}
    ports.trials.set_searcher_action(trial_id, "pause")
    assert trial_reports.searcher_state(ports, run)["action"] == "stop"
    assert ports.runs.get(run.run_id).pausing is True  # its clean exit will pause the trial


def test_progress_must_be_a_fraction(ports, run):
    trial_reports.report_progress(ports, run, 0.5)
    assert ports.trials.get(run.trial_id).progress == 0.5
    with pytest.raises(BadRequestError, match="between 0 and 1, got 1.5"):
        trial_reports.report_progress(ports, run, 1.5)


def test_checkpoint_uploads_are_presigned_under_the_trials_prefix(ports, run):
    answer = trial_reports.checkpoint_uploads(ports, run, UUID, ["model.pt", "metadata.json"])
    prefix = keys.checkpoint_prefix(run.experiment_id, run.trial_id, UUID)
    assert answer["prefix"] == prefix
    assert answer["urls"]["model.pt"] == ports.blobs.presign_put(prefix + "model.pt")
    with pytest.raises(BadRequestError, match="is not a lowercase UUID"):
        trial_reports.checkpoint_uploads(ports, run, "NOT-A-UUID", ["x"])
    with pytest.raises(BadRequestError, match="needs 1 to 10000 files, got 0"):
        trial_reports.checkpoint_uploads(ports, run, UUID, [])
    with pytest.raises(BadRequestError, match="no '..'"):
        trial_reports.checkpoint_uploads(ports, run, UUID, ["../escape"])


def _upload(ports, run, uuid, files=("model.pt", "metadata.json")):
    prefix = keys.checkpoint_prefix(run.experiment_id, run.trial_id, uuid)
    for path in files:
        ports.blobs.put(prefix + path, b"w")


def test_a_checkpoint_is_recorded_once_its_files_are_in_the_bucket(ports, run):
    with pytest.raises(ConflictError, match="has no metadata.json"):
        trial_reports.report_checkpoint(ports, run, UUID, 10, {"model.pt": 1}, {})
    _upload(ports, run, UUID)
    ports.clock.advance(2)
    record = trial_reports.report_checkpoint(ports, run, UUID, 10, {"model.pt": 1}, {"steps_completed": 10})
    assert record.state == "COMPLETED" and record.report_time == "2026-01-01T00:00:02.000Z"
    assert record.resources == {"model.pt": 1} and record.run_id == run.run_id
    assert ports.trials.get(run.trial_id).latest_checkpoint == UUID
    with pytest.raises(ConflictError, match="already reported"):
        trial_reports.checkpoint_uploads(ports, run, UUID, ["model.pt"])
    assert trial_reports.trial_info(ports, run)["latest_checkpoint"] == UUID


def test_files_unchanged_since_an_earlier_checkpoint_are_copied_in_the_bucket_not_uploaded(ports, run):
    _upload(ports, run, UUID, ("share/data.bin", "checkpoint-1/state", "metadata.json"))
    trial_reports.report_checkpoint(ports, run, UUID, 1, {"share/data.bin": 1, "checkpoint-1/state": 1}, {})
    new = str(uuidlib.uuid4())

    answer = trial_reports.checkpoint_uploads(
        ports, run, new, ["checkpoint-2/state", "metadata.json"], {"share/data.bin": UUID}
    )

    prefix = keys.checkpoint_prefix(run.experiment_id, run.trial_id, new)
    assert answer["copied"] == ["share/data.bin"] and sorted(answer["urls"]) == [
        "checkpoint-2/state",
        "metadata.json",
    ]
    assert ports.blobs.objects[prefix + "share/data.bin"] == b"w"  # there before the answer
    assert not ports.blobs.exists(prefix + "checkpoint-2/state")  # the node uploads that one


def test_a_copy_comes_only_from_a_stored_checkpoint_of_the_same_trial_that_holds_the_file(ports, flow, run):
    _upload(ports, run, UUID, ("share/data.bin", "metadata.json"))
    trial_reports.report_checkpoint(ports, run, UUID, 1, {"share/data.bin": 1}, {})
    new = str(uuidlib.uuid4())

    def ask(copy_from, files=("metadata.json",)):
        return trial_reports.checkpoint_uploads(ports, run, new, list(files), copy_from)

    with pytest.raises(NotFoundError, match=r"checkpoint \S+ has no file 'share/other.bin'"):
        ask({"share/other.bin": UUID})
    with pytest.raises(NotFoundError, match=f"is not a stored checkpoint of trial {run.trial_id}"):
        ask({"share/data.bin": str(uuidlib.uuid4())})
    with pytest.raises(BadRequestError, match="is not a checkpoint uuid"):
        ask({"share/data.bin": "../../other-trial"})
    too_many = {f"share/{i}": UUID for i in range(trial_reports.MAX_CHECKPOINT_COPIES + 1)}
    with pytest.raises(BadRequestError, match="copy at most 1000 and upload the rest"):
        ask(too_many)
    with pytest.raises(BadRequestError, match="'share/data.bin' is both uploaded and copied"):
        ask({"share/data.bin": UUID}, files=("share/data.bin", "metadata.json"))
    other = dataclasses.replace(run, trial_id=run.trial_id + 1)  # another trial's run asks for this one's
    with pytest.raises(NotFoundError, match=f"is not a stored checkpoint of trial {run.trial_id + 1}"):
        trial_reports.checkpoint_uploads(ports, other, new, ["metadata.json"], {"share/data.bin": UUID})
    ports.checkpoints.mark_deleted(UUID)
    with pytest.raises(NotFoundError, match="is not a stored checkpoint"):
        ask({"share/data.bin": UUID})
    assert not [key for key in ports.blobs.objects if new in key]  # nothing copied by a refused request


def test_checkpoint_downloads_stay_within_the_experiment(ports, flow, run):
    _upload(ports, run, UUID)
    trial_reports.report_checkpoint(ports, run, UUID, 10, {"model.pt": 1}, {})
    found = trial_reports.checkpoint_downloads(ports, run, UUID)
    assert sorted(found["urls"]) == ["metadata.json", "model.pt"]
    other = dataclasses.replace(run, experiment_id=run.experiment_id + 1)
    with pytest.raises(ForbiddenError, match="belongs to another experiment"):
        trial_reports.checkpoint_downloads(ports, other, UUID)
    with pytest.raises(NotFoundError):
        trial_reports.checkpoint_downloads(ports, run, str(uuidlib.uuid4()))
    ports.checkpoints.mark_deleted(UUID)
    with pytest.raises(ConflictError, match="is DELETED and cannot be restored"):
        trial_reports.checkpoint_downloads(ports, run, UUID)


def test_another_trials_checkpoint_cannot_be_reported_again(ports, run):
    _upload(ports, run, UUID)
    trial_reports.report_checkpoint(ports, run, UUID, 10, {"model.pt": 1}, {})
    stranger = dataclasses.replace(run, trial_id=run.trial_id + 1)
    _upload(ports, stranger, UUID)
    with pytest.raises(ForbiddenError, match=f"belongs to trial {run.trial_id}"):
        trial_reports.report_checkpoint(ports, stranger, UUID, 10, {"model.pt": 1}, {})
