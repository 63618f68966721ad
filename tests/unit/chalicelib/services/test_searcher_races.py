"""Races on an experiment's searcher, made deterministic on the in-memory twin: another consumer's save
lands between two of a create's operations, or keeps landing; an outbox entry carried out late.
Issue 28: Determined's adaptive ASHA tutorial (3_hpsearch) hung when a trial's event saved the searcher
while the create was still creating trials, and its create reported a false error."""

from __future__ import annotations

import contextlib
import dataclasses

from chalicelib.domain import keys
from chalicelib.domain.searcher_outbox import Pending, SearcherRecord
from chalicelib.domain.searchers import ContinueTrial, CreateTrial, PauseTrial, restore_searcher
from chalicelib.memory import MemoryExperiments
from chalicelib.services import experiments, searching
from stratus.contract import messages

#: The shape of Determined's Core API tutorial 3 (`3_hpsearch.yaml`): adaptive ASHA over 10 trials.
ASHA = {
    "name": "core-api-stage-3",
    "entrypoint": "python3 3_hpsearch.py",
    "hyperparameters": {"increment_by": {"type": "int", "minval": 1, "maxval": 8}},
    "searcher": {
        "name": "adaptive_asha",
        "metric": "x",
        "max_trials": 10,
        "time_metric": "batches",
        "max_time": 100,
    },
    "max_restarts": 0,
}


class _Interleaved(MemoryExperiments):
    """The experiments table, over the same items as `ports.experiments`, where `hook` runs once just
    before this store's `after`-th searcher save: what another consumer does between two of ours."""

    def __init__(self, items, after, hook):
        super().__init__()
        self.items = items
        self.after = after
        self.hook = hook
        self.saves = 0

    def save_searcher(self, experiment_id, snapshot, expected_version):
        self.saves += 1
        if self.saves == self.after and self.hook is not None:
            hook, self.hook = self.hook, None
            hook(experiment_id)
        return super().save_searcher(experiment_id, snapshot, expected_version)


class _AlwaysRaced(MemoryExperiments):
    """Another consumer saves the searcher before each of this store's first `races` saves."""

    def __init__(self, items, races):
        super().__init__()
        self.items = items
        self.races = races

    def save_searcher(self, experiment_id, snapshot, expected_version):
        if self.races > 0 and "searcher_version" in self.items[experiment_id]:
            self.races -= 1
            stored = self.items[experiment_id]
            super().save_searcher(experiment_id, stored["searcher"], stored["searcher_version"])
        return super().save_searcher(experiment_id, snapshot, expected_version)


def _submit(ports, flow, store):
    raced = dataclasses.replace(ports, experiments=store)
    ports.blobs.put(keys.context_key(flow.SHA), b"ctx")
    return experiments.create(raced, ASHA, flow.SHA).experiment


def _first_trial_validates(ports):
    """A trial's validation handled by another consumer (on the plain store), as it lands midway."""

    def hook(experiment_id):
        (first, *_) = [t.id for t in ports.trials.for_experiment(experiment_id)]
        ports.trials.record_searcher_length(first, 6)
        event = messages.ValidationReported(f"validation-{first}-6", experiment_id, first, 6, 6.0)
        searching.handle_event(ports, event)

    return hook


def test_a_trial_event_saved_between_two_of_the_creates_operations_drops_none_of_them(ports, flow):
    store = _Interleaved(ports.experiments.items, after=3, hook=_first_trial_validates(ports))
    experiment = _submit(ports, flow, store)  # no StaleSearcherError: the create reports what it made
    assert experiment is not None and experiment.state == "ACTIVE"
    assert store.hook is None  # the other consumer's save did land midway
    trials = ports.trials.for_experiment(experiment.id)
    snapshot = ports.experiments.get(experiment.id).searcher
    requested = [r["request_id"] for r in snapshot["requests"]]
    assert len(trials) == len(requested) == 10  # every trial the searcher asked for exists, once
    assert sorted(t.request_id for t in trials) == sorted(requested)
    assert snapshot["outbox"]["pending"] == []
    assert sorted(ports.workflows.executions) == sorted(f"trial-{t.id}-0" for t in trials)
    assert ports.experiments.get(experiment.id).num_trials == 10


def test_a_create_that_keeps_losing_hands_its_work_to_the_queue_and_reports_success(ports, flow):
    store = _AlwaysRaced(ports.experiments.items, races=searching.DRIVE_ATTEMPTS)
    experiment = _submit(ports, flow, store)
    assert experiment is not None and experiment.state == "ACTIVE"
    assert len(ports.trials.for_experiment(experiment.id)) < 10  # cut short
    (handed,) = ports.queues.take_events()
    assert handed == {"type": "searcher_work", "experiment_id": experiment.id}
    searching.on_searcher_work(ports, messages.parse_events_queue(handed))
    assert len(ports.trials.for_experiment(experiment.id)) == 10
    assert ports.experiments.get(experiment.id).searcher["outbox"]["pending"] == []
    searching.on_searcher_work(ports, messages.parse_events_queue(handed))  # redelivered: nothing more
    assert len(ports.trials.for_experiment(experiment.id)) == 10


def test_an_activation_whose_searcher_start_failed_is_started_by_the_queue(ports, flow):
    class _Unreachable(MemoryExperiments):
        def save_searcher(self, experiment_id, snapshot, expected_version):
            raise ConnectionError("DynamoDB is unreachable")

    broken = _Unreachable()
    broken.items = ports.experiments.items
    experiment = _submit(ports, flow, broken)
    assert experiment is not None and experiment.searcher is None
    (handed,) = ports.queues.take_events()
    searching.on_searcher_work(ports, messages.parse_events_queue(handed))
    assert len(ports.trials.for_experiment(experiment.id)) == 10


def test_an_outbox_entry_carried_out_late_changes_nothing_a_later_one_set(ports, flow):
    experiment = flow.submit(flow.TWO_AT_ONCE)
    first, _ = flow.trial_ids(experiment.id)
    spec = searching.search_spec(experiment.parsed_config)
    record = SearcherRecord.load(ports.experiments.get(experiment.id).searcher)
    searcher = restore_searcher(record.snapshot, spec)
    current = ports.experiments.get(experiment.id)
    # The searcher paused the trial (entry 7), then promoted it (entry 8); a consumer that read the
    # outbox before entry 7 was done carries it out after entry 8.
    searching._carry_out(ports, current, spec, searcher, Pending(8, ContinueTrial(first, 200)))
    searching._carry_out(ports, current, spec, searcher, Pending(7, PauseTrial(first)))
    trial = ports.trials.get(first)
    assert trial.searcher_action == "train" and trial.target_length == 200


def test_a_create_entry_carried_out_twice_creates_one_trial(ports, flow):
    experiment = flow.submit(flow.SINGLE)
    (first,) = flow.trial_ids(experiment.id)
    spec = searching.search_spec(experiment.parsed_config)
    record = SearcherRecord.load(ports.experiments.get(experiment.id).searcher)
    searcher = restore_searcher(record.snapshot, spec)
    request_id = ports.trials.get(first).request_id
    again = Pending(1, CreateTrial(request_id, ports.trials.get(first).hparams, 10))
    searching._carry_out(ports, ports.experiments.get(experiment.id), spec, searcher, again)
    assert flow.trial_ids(experiment.id) == [first]
    assert list(ports.workflows.executions) == [f"trial-{first}-0"]


def test_a_validation_answered_late_does_not_answer_a_newer_result(ports, flow):
    experiment = flow.submit(flow.TWO_AT_ONCE)
    first, _ = flow.trial_ids(experiment.id)
    ports.trials.record_searcher_length(first, 20)  # a newer result, pending
    ports.trials.items[first]["searcher_pending"] = True
    ports.trials.clear_searcher_pending(first, 10)  # the answer to the result at 10, carried out late
    assert ports.trials.get(first).searcher_pending is True
    ports.trials.clear_searcher_pending(first, 20)
    assert ports.trials.get(first).searcher_pending is False


class _StartFailsOnce:
    """Step Functions, whose first StartExecution fails (a throttle)."""

    def __init__(self, workflows):
        self._workflows = workflows
        self.failed = False

    def start(self, name, payload):
        if not self.failed:
            self.failed = True
            raise ConnectionError("ThrottlingException")
        return self._workflows.start(name, payload)

    def __getattr__(self, name):
        return getattr(self._workflows, name)


def test_a_promotion_whose_start_failed_after_its_claim_starts_when_carried_out_again(ports, flow):
    experiment = flow.submit(flow.TWO_AT_ONCE)
    first, _ = flow.trial_ids(experiment.id)
    flow.request_slots(first)
    for state in ("PULLING", "RUNNING", "PAUSED"):
        assert ports.trials.transition(first, state)
    spec = searching.search_spec(experiment.parsed_config)
    searcher = restore_searcher(
        SearcherRecord.load(ports.experiments.get(experiment.id).searcher).snapshot, spec
    )
    promotion = Pending(9, ContinueTrial(first, 200))
    failing = dataclasses.replace(ports, workflows=_StartFailsOnce(ports.workflows))
    current = ports.experiments.get(experiment.id)
    with contextlib.suppress(ConnectionError):  # the consumer fails after claiming the resume
        searching._carry_out(failing, current, spec, searcher, promotion)
    assert ports.trials.get(first).generation == 1 and f"trial-{first}-1" not in ports.workflows.executions
    searching._carry_out(ports, current, spec, searcher, promotion)  # the entry, carried out again
    assert f"trial-{first}-1" in ports.workflows.executions
    searching._carry_out(ports, current, spec, searcher, promotion)  # and again: still one execution
    assert [n for n in ports.workflows.executions if n.startswith(f"trial-{first}-")] == [
        f"trial-{first}-0",
        f"trial-{first}-1",
    ]


class _SlowTrials:
    """The trials table, where each create takes `seconds` of the twin's clock (a loaded database)."""

    def __init__(self, trials, clock, seconds):
        self._trials, self._clock, self._seconds = trials, clock, seconds

    def create(self, trial):
        self._clock.advance(self._seconds)
        return self._trials.create(trial)

    def __getattr__(self, name):
        return getattr(self._trials, name)


def test_a_create_answers_within_its_budget_and_hands_the_rest_of_its_trials_to_the_queue(ports, flow):
    """API Gateway gives a request 29 s: a create carries out its searcher's first operations for
    `START_BUDGET_S` at most, then hands the rest to the events queue, whose consumer creates them."""
    slow = dataclasses.replace(
        ports, trials=_SlowTrials(ports.trials, ports.clock, searching.START_BUDGET_S / 3)
    )
    ports.blobs.put(keys.context_key(flow.SHA), b"ctx")
    experiment = experiments.create(slow, ASHA, flow.SHA).experiment
    made = len(ports.trials.for_experiment(experiment.id))
    assert 1 <= made < 10  # the first ones now, the rest through the queue
    (handed,) = ports.queues.take_events()
    searching.on_searcher_work(ports, messages.parse_events_queue(handed))
    assert len(ports.trials.for_experiment(experiment.id)) == 10
