from __future__ import annotations

import json

import pytest

from chalicelib.domain import searchers

SPACE = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "layers": {"type": "int", "minval": 1, "maxval": 8},
    "opt": {"beta": {"type": "double", "minval": 0.8, "maxval": 0.99}, "name": "adam"},
}


def spec(max_trials: int = 5, max_concurrent_trials: int | None = 2, seed: int = 7) -> searchers.SearchSpec:
    settings: dict[str, object] = {"name": "random", "metric": "loss", "max_trials": max_trials}
    if max_concurrent_trials is not None:
        settings["max_concurrent_trials"] = max_concurrent_trials
    return searchers.SearchSpec(space=SPACE, settings=settings, max_length=200, seed=seed)


def creates(ops: list[object]) -> list[searchers.CreateTrial]:
    return [op for op in ops if isinstance(op, searchers.CreateTrial)]


def test_hparams_are_reproducible_from_the_seed_and_request_number() -> None:
    a = searchers.new_searcher(spec(max_trials=4, max_concurrent_trials=0)).initial_operations()
    b = searchers.new_searcher(spec(max_trials=4, max_concurrent_trials=0)).initial_operations()
    assert a == b and len(a) == 4
    assert [op.request_id for op in creates(a)] == ["random-0", "random-1", "random-2", "random-3"]
    assert len({json.dumps(op.hparams, sort_keys=True) for op in creates(a)}) == 4
    other = searchers.new_searcher(spec(max_trials=4, max_concurrent_trials=0, seed=8)).initial_operations()
    assert other != a
    # the third trial's hparams do not depend on how many were created at once
    serial = searchers.new_searcher(spec(max_trials=4, max_concurrent_trials=1))
    first = creates(serial.initial_operations())
    serial.on_event(searchers.TrialCreated("c0", "random-0", 1))
    second = creates(serial.on_event(searchers.TrialExited("e0", 1, failed=False)))
    assert [op.hparams for op in first + second] == [op.hparams for op in creates(a)[:2]]
    for op in creates(a):
        assert 1e-4 <= op.hparams["lr"] <= 1e-1 and 1 <= op.hparams["layers"] <= 8
        assert op.hparams["opt"]["name"] == "adam" and op.length == 200


def test_default_concurrency_is_16() -> None:
    searcher = searchers.new_searcher(spec(max_trials=40, max_concurrent_trials=None))
    assert isinstance(searcher, searchers.RandomSearcher)
    assert len(creates(searcher.initial_operations())) == 16


def test_concurrency_refill_invalid_hp_replacement_and_shutdown() -> None:
    searcher = searchers.new_searcher(spec(max_trials=3, max_concurrent_trials=2))
    assert [op.request_id for op in creates(searcher.initial_operations())] == ["random-0", "random-1"]
    searcher.on_event(searchers.TrialCreated("c0", "random-0", 10))
    searcher.on_event(searchers.TrialCreated("c1", "random-1", 11))
    assert searcher.on_event(searchers.ValidationReported("v0", 10, 100, 1.5)) == []
    assert searcher.progress() == pytest.approx((100 / 200) / 3)
    # invalid_hp: replaced, and the replacement does not use the budget
    ops = searcher.on_event(searchers.TrialExited("e1", 11, failed=False, invalid_hp=True))
    assert [op.request_id for op in creates(ops)] == ["random-2"]
    searcher.on_event(searchers.TrialCreated("c2", "random-2", 12))
    ops = searcher.on_event(searchers.TrialExited("e0", 10, failed=True))  # failed: counts as done
    assert [op.request_id for op in creates(ops)] == ["random-3"]
    searcher.on_event(searchers.TrialCreated("c3", "random-3", 13))
    assert searcher.on_event(searchers.TrialExited("e2", 12, failed=False)) == []
    snapshot = json.loads(json.dumps(searcher.snapshot()))
    restored = searchers.restore_searcher(snapshot, spec(max_trials=3, max_concurrent_trials=2))
    assert restored.snapshot() == searcher.snapshot()
    assert restored.on_event(searchers.TrialExited("e3", 13, failed=False)) == [
        searchers.Shutdown(failure=False)
    ]
    assert searcher.on_event(searchers.TrialExited("e3", 13, failed=False)) == [
        searchers.Shutdown(failure=False)
    ]
    assert searcher.on_event(searchers.TrialExited("e3", 13, failed=False)) == []
    assert searcher.progress() == 1.0


def test_events_for_unknown_trials_are_ignored() -> None:
    searcher = searchers.new_searcher(spec(max_trials=1, max_concurrent_trials=1))
    searcher.initial_operations()
    before = searcher.snapshot()
    assert searcher.on_event(searchers.TrialCreated("x", "random-99", 5)) == []
    assert searcher.on_event(searchers.TrialExited("y", 5, failed=False)) == []
    assert {k: v for k, v in searcher.snapshot().items() if k != "seen_events"} == {
        k: v for k, v in before.items() if k != "seen_events"
    }


def test_a_bounded_search_remembers_the_latest_event_ids_and_ignores_older_repeats() -> None:
    searcher = searchers.new_searcher(spec(max_trials=3, max_concurrent_trials=1))
    assert [op.request_id for op in creates(searcher.initial_operations())] == ["random-0"]
    searcher.on_event(searchers.TrialCreated("c1", "random-0", 1))
    for length in range(1, 601):  # a long trial: one event id a validation
        searcher.on_event(searchers.ValidationReported(f"validation-1-{length}", 1, length, 1.0 / length))
    assert len(searcher.snapshot()["seen_events"]) == 512
    before = searcher.snapshot()
    # A late repeat of a forgotten id: the creation is noted already, the position is behind.
    assert searcher.on_event(searchers.TrialCreated("c1", "random-0", 1)) == []
    assert searcher.on_event(searchers.ValidationReported("validation-1-3", 1, 3, 1 / 3)) == []
    after = searcher.snapshot()
    assert {k: v for k, v in after.items() if k != "seen_events"} == {
        k: v for k, v in before.items() if k != "seen_events"
    }
    assert after["requests"][0]["metric"] == 1 / 600 and after["requests"][0]["length"] == 600
    ops = searcher.on_event(searchers.TrialExited("e1", 1, failed=False))
    assert [op.request_id for op in creates(ops)] == ["random-1"]
    assert searcher.on_event(searchers.TrialExited("e1", 1, failed=False)) == []  # a repeat: nothing
    restored = searchers.restore_searcher(json.loads(json.dumps(searcher.snapshot())), spec(3, 1))
    assert restored.snapshot() == searcher.snapshot()
