"""The searcher sweep (`chalicelib.services.searcher_watch`) on the in-memory twin: an ACTIVE experiment
that nothing will move on any more is re-driven, and the fact logged; one that is busy, paused or ended
is left alone."""

from __future__ import annotations

import logging

from chalicelib.domain import keys
from chalicelib.domain.searcher_outbox import SearcherRecord
from chalicelib.domain.searchers import CreateTrial
from chalicelib.services import experiments, searcher_watch, searching
from stratus.contract import messages


def _submit_paused(ports, flow):
    ports.blobs.put(keys.context_key(flow.SHA), b"ctx")
    return experiments.create(ports, flow.SINGLE, flow.SHA, activate=False).experiment


def _due(ports):
    """Let the check time of every mark pass."""
    ports.clock.advance(ports.settings.searcher_check_s + 1)


def _deliver_events(ports):
    """The events queue's consumer: every message sent meanwhile, handed to the searcher."""
    for body in ports.queues.take_events():
        message = messages.parse_events_queue(body)
        if isinstance(message, messages.SearcherWork):
            searching.on_searcher_work(ports, message)
        else:
            searching.handle_event(ports, message)


def _finish_without_event(ports, trial_id):
    """The trial's run ends, and its exit event is lost."""
    for state in ("PULLING", "RUNNING"):
        assert ports.trials.transition(trial_id, state)
    assert ports.trials.transition(trial_id, "COMPLETED", end_time=ports.clock.now_iso())


def _long_after(ports):
    """Let the time pass after which an exit the searcher did not record is told again."""
    ports.clock.advance(searcher_watch.REPLAY_AFTER_CHECKS * ports.settings.searcher_check_s + 1)


def test_an_experiment_whose_last_exit_event_was_lost_is_re_driven_to_its_end(ports, flow, caplog):
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    _finish_without_event(ports, trial_id)
    assert searcher_watch.sweep(ports) == []  # not yet: a look comes `searcher_check_s` after the mark
    _due(ports)
    with caplog.at_level(logging.WARNING):
        assert searcher_watch.sweep(ports) == [experiment.id]
    assert caplog.text == "" and ports.queues.take_events() == []  # its event may wait in a busy queue
    _long_after(ports)
    with caplog.at_level(logging.WARNING):
        assert searcher_watch.sweep(ports) == [experiment.id]
    assert f"experiment {experiment.id} is ACTIVE with no trial running or queued" in caplog.text
    _deliver_events(ports)  # the replayed exit
    assert ports.experiments.get(experiment.id).state == "COMPLETED"
    _due(ports)
    assert searcher_watch.sweep(ports) == [experiment.id]  # ended: the mark goes
    assert searcher_watch.sweep(ports) == []


def test_a_busy_experiment_is_left_alone_until_its_runs_end(ports, flow):
    experiment = flow.submit(flow.TWO_AT_ONCE)
    _due(ports)
    assert searcher_watch.sweep(ports) == [experiment.id]  # a trial is queued: nothing to do
    assert ports.queues.take_events() == []
    assert searcher_watch.sweep(ports) == []  # the mark is gone; a run's end sets it again
    first, _ = flow.trial_ids(experiment.id)
    flow.end_trial(first, "COMPLETED")
    _due(ports)
    assert searcher_watch.sweep(ports) == [experiment.id]


def test_searcher_work_left_pending_is_carried_out(ports, flow, caplog):
    experiment = flow.submit(flow.TWO_AT_ONCE)
    stored = ports.experiments.get(experiment.id)
    record = SearcherRecord.load(stored.searcher)
    # A consumer saved the searcher's answer, then died before carrying it out.
    extra = CreateTrial("extra-0", {"x": 0.5}, 10)
    left = record.enqueue(record.snapshot, [extra], ports.clock.now())
    assert ports.experiments.save_searcher(experiment.id, left.to_json(), stored.searcher_version)
    ports.experiments.watch(experiment.id, int(ports.clock.now()))
    searcher_watch.sweep(ports)  # just saved: being carried out, most likely; looked at again later
    assert not any(t.request_id == "extra-0" for t in ports.trials.for_experiment(experiment.id))
    _due(ports)
    with caplog.at_level(logging.WARNING):
        searcher_watch.sweep(ports)
    assert "1 searcher operation(s) pending" in caplog.text
    assert any(t.request_id == "extra-0" for t in ports.trials.for_experiment(experiment.id))
    assert ports.experiments.get(experiment.id).searcher["outbox"]["pending"] == []


def test_a_searcher_waiting_for_nothing_ends_its_experiment_with_an_error_logged(ports, flow, caplog):
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    _finish_without_event(ports, trial_id)
    stored = ports.experiments.get(experiment.id)
    # The searcher recorded the exit but never answered it (a searcher bug): nothing is left to tell it.
    snapshot = {**stored.searcher, "exited": {str(trial_id): False}}
    assert ports.experiments.save_searcher(experiment.id, snapshot, stored.searcher_version)
    _long_after(ports)
    with caplog.at_level(logging.ERROR):
        searcher_watch.sweep(ports)
    assert (
        f"experiment {experiment.id} is ACTIVE with no trial running or queued, nothing pending"
        in caplog.text
    )
    assert ports.experiments.get(experiment.id).state == "COMPLETED"


def test_a_paused_experiment_waits_for_its_user(ports, flow):
    experiment = _submit_paused(ports, flow)
    _due(ports)
    searcher_watch.sweep(ports)
    assert ports.experiments.get(experiment.id).state == "PAUSED"
    assert ports.queues.take_events() == [] and searcher_watch.sweep(ports) == []


def test_an_active_experiment_whose_searcher_never_started_is_started(ports, flow, caplog):
    experiment = _submit_paused(ports, flow)
    ports.experiments.items[experiment.id]["state"] = "ACTIVE"  # activated; its start was lost
    ports.experiments.watch(experiment.id, int(ports.clock.now()))
    with caplog.at_level(logging.WARNING):
        searcher_watch.sweep(ports)
    assert "its searcher never started; starting it" in caplog.text
    assert len(flow.trial_ids(experiment.id)) == 1


def test_a_trial_waiting_for_the_answer_to_a_lost_result_is_answered(ports, flow, caplog):
    """A running trial reported a result at its target and waits (`searcher_pending`); the result's event
    was lost (a dead-letter queue): the trial would wait for ever. The sweep tells the searcher again."""
    experiment = flow.submit(flow.TWO_AT_ONCE)
    first, _ = flow.trial_ids(experiment.id)
    for state in ("PULLING", "RUNNING"):
        assert ports.trials.transition(first, state)
    ports.trials.record_validation(first, 10, {"loss": 0.25}, 0.25, True)
    ports.trials.record_searcher_length(first, 10)  # at its target: it waits for the answer
    assert ports.trials.get(first).searcher_pending
    ports.experiments.watch(experiment.id, int(ports.clock.now()))  # what the lost report marked
    with caplog.at_level(logging.WARNING):
        searcher_watch.sweep(ports)
    assert f"trials {first} wait for their searcher's answer" in caplog.text
    _deliver_events(ports)
    assert ports.trials.get(first).searcher_pending is False
    assert f"validation-{first}-10" in ports.experiments.get(experiment.id).searcher["seen_events"]


def test_one_experiment_whose_look_fails_does_not_stop_the_looks_at_the_others(ports, flow, caplog):
    broken, healthy = flow.submit(), flow.submit()
    ports.experiments.items[broken.id]["config"] = {"searcher": "not a mapping"}  # unreadable
    for experiment in (broken, healthy):
        (trial_id,) = flow.trial_ids(experiment.id)
        _finish_without_event(ports, trial_id)
    _long_after(ports)
    with caplog.at_level(logging.ERROR):
        assert searcher_watch.sweep(ports) == [broken.id, healthy.id]
    assert f"experiment {broken.id}: the sweep's look failed" in caplog.text
    _deliver_events(ports)
    assert ports.experiments.get(healthy.id).state == "COMPLETED"
