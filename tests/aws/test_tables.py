"""The DynamoDB adapters against moto: conditional writes, sparse indexes, idempotent puts. Each test runs
on the in-memory twin too (`chalicelib.memory`): the services' unit tests rely on its semantics being these."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter

import pytest

from chalicelib.domain.queue_head import QueueSummary
from chalicelib.domain.records import Checkpoint, Experiment, Trial
from chalicelib.domain.run_records import Run

pytestmark = pytest.mark.aws


def _experiment(ports, experiment_id=1, state="ACTIVE"):
    ports.experiments.create(
        Experiment(id=experiment_id, state=state, name="e", config={"searcher": {"name": "single"}})
    )


def test_experiment_transitions_follow_the_table(ports):
    _experiment(ports)
    exps = ports.experiments
    assert exps.get(1).config == {"searcher": {"name": "single"}}
    assert exps.transition(1, "COMPLETED", end_time="t").state == "COMPLETED"
    assert exps.transition(1, "ACTIVE") is None  # COMPLETED is final
    assert exps.get(1).version == 1
    assert exps.get(99) is None


def test_searcher_snapshot_is_saved_with_optimistic_locking(ports):
    _experiment(ports)
    exps = ports.experiments
    assert exps.save_searcher(1, {"n": 1}, expected_version=0)
    assert not exps.save_searcher(1, {"n": 2}, expected_version=0)  # stale writer loses
    assert exps.save_searcher(1, {"n": 2}, expected_version=1)
    assert exps.get(1).searcher == {"n": 2}


def test_experiment_list_is_newest_first_with_paging(ports):
    for i in range(1, 6):
        _experiment(ports, i)
    first, before = ports.experiments.list(limit=2)
    assert [e.id for e in first] == [5, 4] and before == 4
    assert [e.id for e in ports.experiments.list(limit=2, before=before)[0]] == [3, 2]


def test_a_create_between_two_pages_neither_repeats_nor_skips_a_row(ports):
    """Issue 11: paging by offset over a scan showed a row twice when one was created between pages."""
    for i in range(1, 6):
        _experiment(ports, i)
    seen: list[int] = []
    page, before = ports.experiments.list(limit=2)
    seen += [e.id for e in page]
    _experiment(ports, 6)  # created between the pages
    while before is not None:
        page, before = ports.experiments.list(limit=2, before=before)
        seen += [e.id for e in page]
    assert seen == [5, 4, 3, 2, 1]


def test_only_an_ended_experiment_is_archived_and_the_list_filters_on_it(ports):
    for i in range(1, 5):
        _experiment(ports, i)
    exps = ports.experiments
    assert exps.set_archived(2, True) is None  # ACTIVE: the condition refuses it
    exps.transition(2, "ERROR", end_time="t")
    exps.transition(3, "COMPLETED", end_time="t")
    assert exps.set_archived(2, True).archived is True
    assert exps.set_archived(3, True).archived is True
    assert exps.set_archived(99, True) is None
    assert exps.set_archived(3, False).archived is False
    assert exps.get(2).archived and not exps.get(1).archived
    assert [e.id for e in exps.list(limit=10, archived=False)[0]] == [4, 3, 1]
    assert [e.id for e in exps.list(limit=10, archived=True)[0]] == [2]
    first, before = exps.list(limit=2, archived=False)
    assert [e.id for e in first] == [4, 3]
    assert [e.id for e in exps.list(limit=2, before=before, archived=False)[0]] == [1]  # 2 is archived
    assert [e.id for e in exps.list(limit=10)[0]] == [4, 3, 2, 1]


def test_trials_index_by_experiment_and_keep_the_best_validation(ports):
    trials = ports.trials
    for trial_id, exp in ((1, 1), (2, 1), (3, 2)):
        trials.create(Trial(id=trial_id, experiment_id=exp, state="QUEUED", hparams={"lr": 0.1}))
    assert [t.id for t in trials.for_experiment(1)] == [1, 2]
    trials.record_validation(1, 100, {"acc": 0.5}, 0.5, smaller_is_better=False)
    trials.record_validation(1, 200, {"acc": 0.4}, 0.4, smaller_is_better=False)
    trials.record_validation(1, 150, {"acc": 0.9}, 0.9, smaller_is_better=False)  # late, but best
    trial = trials.get(1)
    assert trial.best_validation == 0.9
    assert trial.latest_validation == {"acc": 0.4}  # the latest by steps, not by arrival
    assert trial.total_batches == 200
    trials.set_latest_checkpoint(1, "b", 200)
    trials.set_latest_checkpoint(1, "a", 100)  # older: ignored
    assert trials.get(1).latest_checkpoint == "b"


def test_trial_state_writes_refuse_illegal_transitions(ports):
    trials = ports.trials
    trials.create(Trial(id=1, experiment_id=1, state="QUEUED"))
    assert trials.transition(1, "COMPLETED") is None  # QUEUED -> COMPLETED is not allowed
    assert trials.transition(1, "PULLING").state == "PULLING"
    assert trials.transition(1, "RUNNING").state == "RUNNING"


def test_a_paused_trial_resumes_once_per_pause(ports):
    trials = ports.trials
    trials.create(Trial(id=1, experiment_id=1, state="PAUSED"))
    assert trials.resume_paused(1, generation=0, attempt=1)
    assert not trials.resume_paused(1, generation=1, attempt=1)  # the same pause, seen again
    assert not trials.resume_paused(1, generation=0, attempt=2)  # a stale generation
    assert trials.resume_paused(1, generation=1, attempt=2)  # paused again after a new attempt
    assert trials.get(1).generation == 2


def test_runs_move_through_the_sparse_indexes(ports):
    runs = ports.runs
    request = Run(
        run_id="1.1",
        trial_id=1,
        experiment_id=1,
        pool="default",
        slots=1,
        priority=42,
        state="PENDING",
        slot_token="tok",
        queued_at="2026-01-01T00:00:00Z",
    )
    assert runs.put_request(request)
    assert not runs.put_request(request)  # redelivered: queued once
    assert [r.run_id for r in runs.pending("default")] == ["1.1"]
    assert runs.assign("1.1", "agent-a").state == "ASSIGNED"
    assert runs.assign("1.1", "agent-b") is None
    assert runs.pending("default") == []
    assert [r.agent_id for r in runs.allocated("default")] == ["agent-a"]
    runs.launch("1.1", "launch-token")
    assert [r.run_id for r in runs.for_agent("agent-a")] == ["1.1"]
    assert runs.start("1.1", "agent-b", 10) is None  # not its agent
    assert runs.start("1.1", "agent-a", 10).state == "RUNNING"
    assert runs.exit("1.1", 0, "exited with code 0").state == "EXITED"
    assert runs.exit("1.1", 1, "again") is None
    assert runs.allocated("default") == [] and runs.for_agent("agent-a") == []


def test_agents_report_capacity_changes_and_expire(ports):
    agents = ports.agents
    assert agents.heartbeat("a", "default", 2)  # new
    assert not agents.heartbeat("a", "default", 2)  # same capacity
    assert agents.heartbeat("a", "default", 4)  # changed
    assert [a.host_id for a in agents.alive("default", timeout_s=60)] == ["a"]
    assert agents.alive("default", timeout_s=-1) == []
    assert agents.alive("other", timeout_s=60) == []


def test_metric_groups_of_any_name_round_trip(ports):
    """Custom groups (Determined's `report_metrics(group=...)`) hold any character but '.': each keeps its
    own reports, whatever its name looks like to a key (a '#', a prefix of another name, 2,000 bytes)."""
    odd = ["inf%er en/ce", "a", "a#000000000001", "a#", "grou%p_c", "ü 🎯", "long" * 500, "validation "]
    for steps, group in enumerate(odd, start=1):
        assert ports.metrics.put(1, group, steps, {f"z{group}/me.t r%i]\\c_0": steps})
        assert not ports.metrics.put(1, group, steps, {"other": 0})  # a duplicate report
        assert ports.metrics.put(1, group, 100 + steps, {"m0": 0.5})
    assert ports.metrics.put(1, "validation", 3, {"loss": 0.2})
    assert ports.metrics.put(2, "a", 1, {"m0": 1.0})  # another trial's
    assert ports.metrics.groups(1) == ["validation", *sorted(odd)]
    assert ports.metrics.groups(2) == ["a"] and ports.metrics.groups(3) == []
    for steps, group in enumerate(odd, start=1):
        rows = ports.metrics.list(1, group)
        assert [(r.group, r.steps_completed, r.metrics) for r in rows] == [
            (group, steps, {f"z{group}/me.t r%i]\\c_0": steps}),
            (group, 100 + steps, {"m0": 0.5}),
        ]
    assert [r.metrics for r in ports.metrics.list(1, "validation")] == [{"loss": 0.2}]


def test_metrics_checkpoints_and_ids(ports):
    p = ports
    assert p.metrics.put(1, "training", 200, {"loss": 0.5})
    assert p.metrics.put(1, "training", 100, {"loss": 0.9})
    assert not p.metrics.put(1, "training", 100, {"loss": 0.1})  # duplicate report
    assert p.metrics.put(1, "validation", 100, {"acc": 0.7})
    rows = p.metrics.list(1, "training")
    assert [(r.steps_completed, r.metrics) for r in rows] == [
        (100, {"loss": 0.9}),
        (200, {"loss": 0.5}),
    ]
    record = Checkpoint(
        uuid="u1",
        trial_id=1,
        experiment_id=1,
        steps_completed=100,
        resources={"model.pt": 10},
        metadata={"steps_completed": 100},
        report_time="t",
    )
    assert p.checkpoints.put(record).resources == {"model.pt": 10}
    assert (
        p.checkpoints.put(dataclasses.replace(record, steps_completed=5)).steps_completed == 100
    )  # first wins
    assert [c.uuid for c in p.checkpoints.for_trial(1)] == ["u1"]
    assert [p.ids.next("x") for _ in range(3)] == [1, 2, 3]


def test_a_large_searcher_snapshot_fits_in_one_item(ports):
    # ~300 bytes a trial for ASHA: thousands of trials exceed DynamoDB's 400 KB item size uncompressed.
    _experiment(ports)
    snapshot = {
        "requests": [{"request_id": f"asha-{i}", "trial_id": i, "metric": i / 7} for i in range(6000)]
    }
    assert ports.experiments.save_searcher(1, snapshot, expected_version=0)
    assert ports.experiments.get(1).searcher == snapshot


def _recount(ports, pool: str) -> QueueSummary:
    waiting = ports.runs.pending(pool)
    sizes = Counter(r.slots for r in waiting)
    jobs: dict[str, tuple[int, int]] = {}
    for r in waiting:
        n, slots = jobs.get(str(r.experiment_id), (0, 0))
        jobs[str(r.experiment_id)] = (n + 1, slots + r.slots)
    return QueueSummary(len(waiting), sum(r.slots for r in waiting), dict(sizes), jobs)


def test_the_queue_summary_and_order_follow_every_request_in_and_out(ports):
    """Issue 12: a pass reads the pool's summary and the head of its queue, never the whole queue; the
    summary moves with each request entering, leaving or changing pools, once per request."""
    pool, other = f"q{uuid.uuid4().hex[:8]}", f"r{uuid.uuid4().hex[:8]}"
    runs = ports.runs

    def request(i: int, job: int, slots: int, priority: int) -> Run:
        return Run(
            run_id=f"{pool}.{i}",
            trial_id=i,
            experiment_id=job,
            pool=pool,
            slots=slots,
            priority=priority,
            state="PENDING",
            queued_at=f"2026-01-01T00:00:{i:02d}Z",
        )

    queued = [
        request(i, *spec)
        for i, spec in enumerate([(1, 1, 42), (1, 4, 42), (2, 2, 10), (3, 8, 60), (2, 1, 42)])
    ]
    for run in queued:
        assert runs.put_request(run)
    assert not runs.put_request(queued[0])  # redelivered: counted once
    summary = runs.queue_summary(pool)
    assert summary == _recount(ports, pool)
    assert summary == QueueSummary(5, 16, {1: 2, 4: 1, 2: 1, 8: 1}, {"1": (2, 5), "2": (2, 3), "3": (1, 8)})

    # The head first, page by page: priority 10, then 42 by submission, then 60.
    first, after = runs.queue_page(pool, None, 2)
    rest, end = runs.queue_page(pool, after, 10)
    assert [r.run_id for r in first + rest] == [f"{pool}.{i}" for i in (2, 0, 1, 4, 3)] and end is None
    job_two, _ = runs.job_queue_page(pool, "2", None, 10)
    assert [r.run_id for r in job_two] == [f"{pool}.2", f"{pool}.4"]

    assert runs.update_job(f"{pool}.3", {"priority": 5}) is not None  # `det job update`: to the head
    assert runs.queue_page(pool, None, 1)[0][0].run_id == f"{pool}.3"
    runs.assign(f"{pool}.2", "agent-a")
    runs.exit(f"{pool}.0", -1, "canceled while queued")
    runs.exit(f"{pool}.0", -1, "again")  # changes nothing
    moved = {"pool": other, "pending_pool": other}
    assert runs.update_job(f"{pool}.1", moved, only_pending=True).pool == other
    assert runs.update_job(f"{pool}.2", moved, only_pending=True) is None  # granted: stays
    assert (
        runs.queue_summary(pool)
        == _recount(ports, pool)
        == QueueSummary(2, 9, {8: 1, 1: 1}, {"3": (1, 8), "2": (1, 1)})
    )
    assert runs.queue_summary(other) == _recount(ports, other) == QueueSummary(1, 4, {4: 1}, {"1": (1, 4)})
    runs.delete(f"{pool}.4")
    runs.prune_queue_summary(pool)
    assert runs.queue_summary(pool) == _recount(ports, pool) == QueueSummary(1, 8, {8: 1}, {"3": (1, 8)})


def test_the_searcher_sweep_finds_the_marked_experiments_whose_time_has_come(ports):
    """Issue 28: the sparse `watched` index (`searcher_watch`): a later mark moves the look later, and
    dropping a mark read before a newer one keeps the newer."""
    for i in (1, 2, 3):
        _experiment(ports, i)
    ports.experiments.watch(1, 100)
    ports.experiments.watch(2, 50)
    assert ports.experiments.due_for_check(now=99, limit=10) == [(2, 50)]
    assert ports.experiments.due_for_check(now=200, limit=10) == [(2, 50), (1, 100)]
    ports.experiments.watch(2, 150)  # marked again meanwhile
    assert not ports.experiments.unwatch(2, 50)  # the mark read is gone: the newer one stands
    assert ports.experiments.unwatch(1, 100)
    assert ports.experiments.due_for_check(now=200, limit=10) == [(2, 150)]
    assert ports.experiments.get(2).id == 2  # the marks are invisible to the record


def test_progress_is_only_raised_and_an_outbox_entry_applies_to_a_trial_once(ports):
    _experiment(ports)
    ports.experiments.raise_progress(1, 0.4)
    ports.experiments.raise_progress(1, 0.3)  # a report that lost the race
    assert ports.experiments.get(1).progress == 0.4
    ports.trials.create(Trial(id=7, experiment_id=1, state="QUEUED", target_length=10))
    assert ports.trials.set_searcher_action(7, "pause", seq=5)
    assert ports.trials.set_searcher_action(7, "train", target_length=20, seq=6)
    assert not ports.trials.set_searcher_action(7, "pause", seq=5)  # carried out late: changes nothing
    assert ports.trials.set_searcher_action(7, "train", target_length=20, seq=6)  # the same again: applies
    trial = ports.trials.get(7)
    assert (trial.searcher_action, trial.target_length) == ("train", 20)
    assert ports.trials.record_searcher_length(7, 20).searcher_pending is True
    ports.trials.clear_searcher_pending(7, 10)  # the answer to an older result
    assert ports.trials.get(7).searcher_pending is True
    ports.trials.clear_searcher_pending(7, 20)
    assert ports.trials.get(7).searcher_pending is False
    assert ports.trials.record_training(7, 5).total_batches == 0  # the trial as it was
    assert ports.trials.record_training(7, 5) is None  # not raised
    assert ports.trials.get(7).total_batches == 5


def test_a_warm_start_source_knows_the_experiments_that_start_from_it(ports):
    record = Checkpoint(uuid="u1", trial_id=1, experiment_id=1, steps_completed=10, report_time="t")
    ports.checkpoints.put(record)
    assert ports.checkpoints.add_user("u1", 4).used_by == [4]
    assert ports.checkpoints.add_user("u1", 3).used_by == [3, 4]
    assert ports.checkpoints.add_user("u1", 4).used_by == [3, 4]  # a set: twice is once
    assert ports.checkpoints.get("u1").used_by == [3, 4]
    assert ports.checkpoints.for_trial(1)[0].used_by == [3, 4]
    assert ports.checkpoints.add_user("nope", 4) is None
    assert ports.checkpoints.get("nope") is None  # no stub record
