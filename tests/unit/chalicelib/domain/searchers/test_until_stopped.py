"""`random` and `tpe` with `until_stopped` (an NNI config without `maxTrialNumber`): under any
interleaving of creations, validations, exits (normal, failed, invalid_hp) and restores, the searcher
keeps exactly `max_concurrent_trials` trials running (its default when 0), never shuts down by itself
but after `FAILED_IN_A_ROW_LIMIT` (or twice the concurrency) failures in a row,
shows no progress (no end is known) and answers identically after a restore. Over thousands of trials
the snapshot stays flat: exited trials are forgotten, event ids are windowed, and TPE keeps a sliding
window of results (the latest and the best); a snapshot written before that restores to the same state.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.domain import searchers
from chalicelib.domain.searchers.base import DEFAULT_MAX_CONCURRENT_TRIALS
from chalicelib.domain.searchers.random import FAILED_IN_A_ROW_LIMIT, SEEN_EVENTS_KEPT
from chalicelib.domain.searchers.tpe import HISTORY_BEST, HISTORY_LATEST

MAX_SNAPSHOT_BYTES = 100_000  # a DynamoDB item holds 400 KB

SPACE = {"x": {"type": "double", "minval": -1, "maxval": 1}, "c": {"type": "const", "val": 1}}


def until_stopped_spec(name: str, concurrency: int, seed: int = 0) -> searchers.SearchSpec:
    settings_: dict[str, Any] = {
        "name": name,
        "metric": "m",
        "smaller_is_better": True,
        "until_stopped": True,
        "max_trials": None,
        "max_concurrent_trials": concurrency,
    }
    return searchers.SearchSpec(space=SPACE, settings=settings_, max_length=10, seed=seed)


def restored(searcher: searchers.Searcher, spec: searchers.SearchSpec) -> searchers.Searcher:
    snapshot = json.loads(json.dumps(searcher.snapshot(), allow_nan=False))
    copy = searchers.restore_searcher(snapshot, spec)
    assert copy.snapshot() == searcher.snapshot() and copy.initial_operations() == []
    return copy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["random", "random", "tpe"]),
    concurrency=st.integers(0, 3),
    steps=st.lists(
        st.tuples(st.sampled_from(["validate", "exit", "restore"]), st.integers(0, 99)), max_size=25
    ),
)
def test_an_endless_search_keeps_its_concurrency_and_never_shuts_down(
    name: str, concurrency: int, steps: list[tuple[str, int]]
) -> None:
    spec = until_stopped_spec(name, concurrency)
    limit = concurrency or DEFAULT_MAX_CONCURRENT_TRIALS
    searcher = searchers.new_searcher(spec)
    running: list[int] = []
    created = 0
    failures = 0  # in a row

    def carry_out(ops: list[searchers.Operation]) -> None:
        nonlocal created
        for op in ops:
            assert isinstance(op, searchers.CreateTrial), f"{op} from an endless search"
            trial_id = 1000 + created
            created += 1
            assert (
                searcher.on_event(searchers.TrialCreated(f"created-{op.request_id}", op.request_id, trial_id))
                == []
            )
            running.append(trial_id)

    carry_out(searcher.initial_operations())
    assert len(running) == limit
    for event_number, (action, pick) in enumerate(steps):
        trial_id = running[pick % len(running)]
        if action == "validate":
            event: searchers.Event = searchers.ValidationReported(
                f"ev-{event_number}", trial_id, 10, pick / 10
            )
            assert searcher.on_event(event) == []
        elif action == "exit":
            running.remove(trial_id)
            kind = pick % 3
            event = searchers.TrialExited(
                f"ev-{event_number}", trial_id, failed=kind == 1, invalid_hp=kind == 2
            )
            failures = failures + 1 if kind == 1 else failures if kind == 2 else 0
            ops = searcher.on_event(event)
            if failures >= max(FAILED_IN_A_ROW_LIMIT, 2 * limit):
                # the one way it ends by itself: too many failures in a row
                assert ops == [searchers.Shutdown(failure=True)] and searcher.shut_down
                return
            carry_out(ops)
        else:
            searcher = restored(searcher, spec)
        assert len(running) == limit
        assert searcher.progress() is None  # no end known: blank, not 0%
        assert not searcher.shut_down


@pytest.mark.parametrize("name", ["random", "tpe"])
def test_an_endless_search_gives_up_after_failures_in_a_row_but_not_after_scattered_ones(name: str) -> None:
    spec = until_stopped_spec(name, concurrency=2)
    searcher = searchers.new_searcher(spec)
    running: list[int] = []

    def create(ops: list[searchers.Operation]) -> None:
        for op in ops:
            assert isinstance(op, searchers.CreateTrial)
            trial_id = 1 + searcher.snapshot()["next_index"] * 10 + len(running)
            searcher.on_event(searchers.TrialCreated(f"c-{op.request_id}", op.request_id, trial_id))
            running.append(trial_id)

    create(searcher.initial_operations())
    # 30 trials where every third succeeds: scattered failures never stop it
    for n in range(30):
        trial_id = running.pop(0)
        if n % 3 == 2:
            searcher.on_event(searchers.ValidationReported(f"v-{n}", trial_id, 10, 0.5))
        create(searcher.on_event(searchers.TrialExited(f"x-{n}", trial_id, failed=n % 3 != 2)))
        assert not searcher.shut_down
    # then FAILED_IN_A_ROW_LIMIT failures in a row (above twice the concurrency, 4) end it as a failure
    for n in range(FAILED_IN_A_ROW_LIMIT):
        trial_id = running.pop(0)
        ops = searcher.on_event(searchers.TrialExited(f"f-{n}", trial_id, failed=True))
        if n < FAILED_IN_A_ROW_LIMIT - 1:
            create(ops)
            assert not searcher.shut_down
        else:
            assert ops == [searchers.Shutdown(failure=True)]
    restored_searcher = restored(searcher, spec)
    assert restored_searcher.shut_down
    assert restored_searcher.on_event(searchers.TrialExited("late", running[0], failed=False)) == []


# ---- a bounded snapshot over thousands of trials ---------------------------------------------------


class Endless:
    """Runs an endless search: the oldest running trial reports at 5 and 10 and exits (every 7th fails
    without a result, every 11th is invalid_hp), its replacement is created, and so on."""

    def __init__(self, name: str, concurrency: int = 4) -> None:
        self.spec = until_stopped_spec(name, concurrency)
        self.searcher: searchers.Searcher = searchers.new_searcher(self.spec)
        self.running: list[int] = []
        self.created: dict[int, searchers.CreateTrial] = {}  # trial id -> its creation
        self.delivered: dict[int, list[searchers.Event]] = {}  # trial id -> its events
        self.metrics: dict[int, float] = {}  # trial id -> its result (trials that completed)
        self.sizes: list[int] = []
        self.twin: searchers.Searcher | None = None  # a restored copy that must answer as the searcher does
        self.create(self.searcher.initial_operations())

    def create(self, ops: list[searchers.Operation]) -> None:
        for op in ops:
            assert isinstance(op, searchers.CreateTrial), f"{op} from an endless search"
            trial_id = len(self.created) + 1
            self.created[trial_id] = op
            self.deliver(searchers.TrialCreated(f"created-{trial_id}", op.request_id, trial_id), trial_id)
            self.running.append(trial_id)

    def deliver(self, event: searchers.Event, trial_id: int) -> list[searchers.Operation]:
        self.delivered.setdefault(trial_id, []).append(event)
        ops = self.searcher.on_event(event)
        if self.twin is not None:
            assert self.twin.on_event(event) == ops and self.twin.snapshot() == self.searcher.snapshot()
        return ops

    def finish_oldest(self, check_restore: bool = False) -> None:
        trial_id = self.running.pop(0)
        events: list[searchers.Event] = []
        if trial_id % 7:
            metric = ((trial_id * 7919) % 1000) / 1000
            self.metrics[trial_id] = metric
            events += [
                searchers.ValidationReported(f"v-{trial_id}-{n}", trial_id, n, metric) for n in (5, 10)
            ]
        invalid_hp = not trial_id % 11
        events.append(searchers.TrialExited(f"exit-{trial_id}", trial_id, not trial_id % 7, invalid_hp))
        for event in events:
            copy = restored(self.searcher, self.spec) if check_restore else None
            ops = self.deliver(event, trial_id)
            if copy is not None:  # a searcher restored just before answers as the uninterrupted one
                assert copy.on_event(event) == ops and copy.snapshot() == self.searcher.snapshot()
            self.create(ops)
        self.sizes.append(len(json.dumps(self.searcher.snapshot(), allow_nan=False)))


@pytest.mark.parametrize(("name", "trials"), [("random", 3000), ("tpe", 600)])
def test_the_snapshot_stays_flat_over_thousands_of_trials(name: str, trials: int) -> None:
    # TPE asks Optuna with every result it keeps, so its run is shorter; its window is full by trial 320.
    search = Endless(name)
    for n in range(trials):
        search.finish_oldest(check_restore=n % 50 == 0)
        if n % 250 == 0:
            search.searcher = restored(search.searcher, search.spec)
    sizes = search.sizes
    settled = max(sizes[len(sizes) // 3 : 2 * len(sizes) // 3])
    assert max(sizes[2 * len(sizes) // 3 :]) <= settled * 1.05  # no growth with the trials
    assert max(sizes) < MAX_SNAPSHOT_BYTES
    snapshot = search.searcher.snapshot()
    assert snapshot["next_index"] == len(search.created) > trials
    assert [r["trial_id"] for r in snapshot["requests"]] == search.running  # only the running trials
    assert len(snapshot["trials"]) == 4 and snapshot["exited"] == {}
    assert len(snapshot["seen_events"]) == SEEN_EVENTS_KEPT
    if name == "tpe":  # the model sees the latest results and the best ones of the whole run
        metrics = [row[1] for row in snapshot["history"]]
        assert HISTORY_LATEST <= len(metrics) <= HISTORY_LATEST + HISTORY_BEST
        results = {t: m for t, m in search.metrics.items() if t % 11}  # invalid_hp ones are not results
        assert sorted(results.values())[:HISTORY_BEST] == sorted(metrics)[:HISTORY_BEST]
        latest = [results[t] for t in sorted(results)]
        assert metrics[-HISTORY_LATEST:] == latest[-HISTORY_LATEST:]
        assert isinstance(search.searcher, searchers.TPESearcher)
        assert len(search.searcher.study().trials) == len(metrics) + 4  # and the running ones
    else:
        assert "history" not in snapshot


@pytest.mark.parametrize("name", ["random", "tpe"])
def test_a_repeated_event_of_a_forgotten_trial_changes_nothing(name: str) -> None:
    search = Endless(name, concurrency=2)
    for _ in range(SEEN_EVENTS_KEPT // 3):  # 3 or 4 events a trial: the first trials' ids are forgotten
        search.finish_oldest()
    assert "created-1" not in search.searcher.snapshot()["seen_events"]
    before = search.searcher.snapshot()
    for trial_id in (1, 2, 3):
        for event in search.delivered[trial_id]:
            assert search.searcher.on_event(event) == []
    # A late repeat of a running trial's earlier position does not take its result back either.
    running = search.running[0]
    search.deliver(searchers.ValidationReported("late-10", running, 10, 0.25), running)
    search.deliver(searchers.ValidationReported("late-5", running, 5, 0.75), running)
    after = search.searcher.snapshot()
    assert next(r for r in after["requests"] if r["trial_id"] == running)["metric"] == 0.25
    unchanged = ("requests", "trials", "exited", "next_index", "history")
    assert {k: after.get(k) for k in unchanged if k != "requests"} == {
        k: before.get(k) for k in unchanged if k != "requests"
    }
    assert [r for r in after["requests"] if r["trial_id"] != running] == [
        r for r in before["requests"] if r["trial_id"] != running
    ]


@pytest.mark.parametrize("name", ["random", "tpe"])
def test_a_snapshot_from_before_trials_were_forgotten_restores_to_the_same_state(name: str) -> None:
    search = Endless(name, concurrency=3)
    for _ in range(40):
        search.finish_oldest()
    snapshot = search.searcher.snapshot()
    # What the searcher wrote before: every request (exited ones with their outcome), no next_index.
    old = {k: v for k, v in json.loads(json.dumps(snapshot)).items() if k not in ("next_index", "history")}
    old["requests"] = []
    for trial_id, op in search.created.items():
        exit_ = next((e for e in search.delivered[trial_id] if isinstance(e, searchers.TrialExited)), None)
        index = int(op.request_id.rsplit("-", 1)[1])
        old["requests"].append(
            {
                "request_id": op.request_id,
                "index": index,
                "trial_id": trial_id,
                "exited": exit_ is not None,
                "failed": exit_ is not None and exit_.failed and not exit_.invalid_hp,
                "invalid_hp": exit_ is not None and exit_.invalid_hp,
                "length": 10 if trial_id in search.metrics else 0,
                "metric": search.metrics.get(trial_id),
                "extra": {"params": {"x": op.hparams["x"]}} if name == "tpe" else {},
            }
        )
        if exit_ is not None:
            old["trials"][op.request_id] = trial_id
            old["exited"][str(trial_id)] = exit_.failed and not exit_.invalid_hp
    for trial_id in search.running:  # a running request was not finished: its validations are not in yet
        assert not any(isinstance(e, searchers.ValidationReported) for e in search.delivered[trial_id])
    search.twin = searchers.restore_searcher(json.loads(json.dumps(old)), search.spec)
    assert search.twin.snapshot() == snapshot and search.twin.initial_operations() == []
    for _ in range(10):  # and it goes on as the uninterrupted one does
        search.finish_oldest()


@pytest.mark.parametrize("smaller_is_better", [True, False])
def test_the_tpe_window_keeps_the_latest_results_and_the_best_ones(smaller_is_better: bool) -> None:
    base = until_stopped_spec("tpe", 1)
    spec = searchers.SearchSpec(
        base.space, {**base.settings, "smaller_is_better": smaller_is_better}, base.max_length, base.seed
    )
    searcher = searchers.new_searcher(spec)
    searcher.initial_operations()
    # A window already full: results 0..274, worse and worse when smaller is better (better otherwise).
    snapshot = json.loads(json.dumps(searcher.snapshot()))
    snapshot["history"] = [
        [i, 1 + i / 1000, i / HISTORY_LATEST - 1] for i in range(HISTORY_LATEST + HISTORY_BEST)
    ]
    snapshot["requests"][0].update(request_id="tpe-275", index=275)
    snapshot["next_index"] = 276
    searcher = searchers.restore_searcher(snapshot, spec)
    searcher.on_event(searchers.TrialCreated("c", "tpe-275", 1))
    searcher.on_event(searchers.ValidationReported("v", 1, 10, 1.5 if smaller_is_better else 0.5))
    assert len(searcher.on_event(searchers.TrialExited("e", 1, failed=False))) == 1
    kept = [row[0] for row in searcher.snapshot()["history"]]
    best = list(range(HISTORY_BEST))  # the smallest metrics
    if smaller_is_better:  # the best 25 and the latest 250: request 25 is dropped
        assert kept == best + list(range(HISTORY_BEST + 1, 276))
    else:  # the best (largest) are among the latest 250: the 26 earliest are dropped
        assert kept == list(range(HISTORY_BEST + 1, 276))
