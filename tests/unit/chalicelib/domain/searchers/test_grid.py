from __future__ import annotations

import pytest

from chalicelib.domain import hparams, searchers


def spec(
    space: dict[str, object], max_concurrent_trials: int = 16, max_length: int | None = 100
) -> searchers.SearchSpec:
    settings = {"name": "grid", "metric": "loss", "max_concurrent_trials": max_concurrent_trials}
    return searchers.SearchSpec(space=space, settings=settings, max_length=max_length, seed=3)


def test_grid_values_follow_determineds_rules() -> None:
    # int: count clamped to the number of integers, rounded half away from zero (Go's math.Round)
    assert hparams.grid_values({"type": "int", "minval": 0, "maxval": 5, "count": 3}) == [0, 3, 5]
    assert hparams.grid_values({"type": "int", "minval": 1, "maxval": 3, "count": 10}) == [1, 2, 3]
    assert hparams.grid_values({"type": "int", "minval": 0, "maxval": 10, "count": 4}) == [0, 3, 7, 10]
    assert hparams.grid_values({"type": "int", "minval": -5, "maxval": 0, "count": 3}) == [-5, -3, 0]
    assert hparams.grid_values({"type": "int", "minval": 1, "maxval": 4, "count": 1}) == [3]  # 2.5 -> 3
    assert hparams.grid_values({"type": "double", "minval": 0, "maxval": 1, "count": 5}) == [
        0,
        0.25,
        0.5,
        0.75,
        1,
    ]
    assert hparams.grid_values({"type": "double", "minval": 2, "maxval": 4, "count": 1}) == [3.0]
    logs = hparams.grid_values({"type": "log", "base": 10, "minval": -4, "maxval": -1, "count": 4})
    assert logs == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1])
    assert hparams.grid_values({"type": "log", "base": 2, "minval": 0, "maxval": 4, "count": 1}) == [4.0]
    assert hparams.grid_values({"type": "categorical", "vals": ["a", [1], None]}) == ["a", [1], None]
    assert hparams.grid_values({"type": "const", "val": {"k": 1}}) == [{"k": 1}]
    with pytest.raises(ValueError, match="count"):
        hparams.grid_values({"type": "double", "minval": 0, "maxval": 1}, "lr")


def test_grid_points_are_the_cartesian_product_in_sorted_order_with_nesting() -> None:
    space = {
        "opt": {"name": "adam", "beta": {"type": "categorical", "vals": [0.9, 0.99]}, "empty": {}},
        "layers": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
        "c": {"type": "const", "val": 7},
    }
    points = hparams.grid_points(space)
    assert len(points) == 6
    # axes in sorted order (c, layers, opt.beta, opt.name): layers varies slower than opt.beta
    assert points[0] == {"c": 7, "layers": 1, "opt": {"beta": 0.9, "empty": {}, "name": "adam"}}
    assert points[1] == {"c": 7, "layers": 1, "opt": {"beta": 0.99, "empty": {}, "name": "adam"}}
    assert [p["layers"] for p in points] == [1, 1, 2, 2, 3, 3]
    assert hparams.grid_points({}) == [{}]
    counts = {"a": {"type": "double", "minval": 0, "maxval": 1, "count": 4}}
    counts["b"] = {"type": "int", "minval": 0, "maxval": 1, "count": 5}  # clamped to 2
    assert len(hparams.grid_points(counts)) == 8


def test_grid_creates_at_most_max_concurrent_then_one_per_exit_and_shuts_down() -> None:
    space = {"a": {"type": "categorical", "vals": [1, 2, 3, 4, 5]}}
    searcher = searchers.new_searcher(spec(space, max_concurrent_trials=2))
    assert isinstance(searcher, searchers.GridSearcher)
    ops = searcher.initial_operations()
    assert ops == [
        searchers.CreateTrial("grid-0", {"a": 1}, 100),
        searchers.CreateTrial("grid-1", {"a": 2}, 100),
    ]
    assert searcher.initial_operations() == []
    searcher.on_event(searchers.TrialCreated("c0", "grid-0", 10))
    searcher.on_event(searchers.TrialCreated("c1", "grid-1", 11))
    assert searcher.on_event(searchers.ValidationReported("v", 10, 100, 0.3)) == []
    assert searcher.progress() == pytest.approx(1 / 5)
    assert searcher.on_event(searchers.TrialExited("e0", 10, failed=False)) == [
        searchers.CreateTrial("grid-2", {"a": 3}, 100)
    ]
    assert searcher.on_event(searchers.TrialExited("e0", 10, failed=False)) == []  # duplicate delivery
    # an invalid_hp point is not replaced: it counts as done
    assert searcher.on_event(searchers.TrialExited("e1", 11, failed=False, invalid_hp=True)) == [
        searchers.CreateTrial("grid-3", {"a": 4}, 100)
    ]
    searcher.on_event(searchers.TrialCreated("c2", "grid-2", 12))
    searcher.on_event(searchers.TrialCreated("c3", "grid-3", 13))
    assert searcher.on_event(searchers.TrialExited("e2", 12, failed=True)) == [
        searchers.CreateTrial("grid-4", {"a": 5}, 100)
    ]
    searcher.on_event(searchers.TrialCreated("c4", "grid-4", 14))
    restored = searchers.restore_searcher(searcher.snapshot(), spec(space, max_concurrent_trials=2))
    assert restored.snapshot() == searcher.snapshot()
    assert searcher.on_event(searchers.TrialExited("e3", 13, failed=False)) == []
    assert searcher.progress() == pytest.approx(4 / 5)
    assert searcher.on_event(searchers.TrialExited("e4", 14, failed=False)) == [
        searchers.Shutdown(failure=False)
    ]
    assert searcher.progress() == 1.0


def test_grid_unlimited_concurrency_and_failure_when_every_trial_failed() -> None:
    space = {"a": {"type": "int", "minval": 0, "maxval": 2, "count": 3}}
    searcher = searchers.new_searcher(spec(space, max_concurrent_trials=0, max_length=None))
    ops = searcher.initial_operations()
    assert [op.hparams for op in ops if isinstance(op, searchers.CreateTrial)] == [
        {"a": 0},
        {"a": 1},
        {"a": 2},
    ]
    assert all(isinstance(op, searchers.CreateTrial) and op.length is None for op in ops)
    for i in range(3):
        searcher.on_event(searchers.TrialCreated(f"c{i}", f"grid-{i}", i))
    assert searcher.on_event(searchers.TrialExited("e0", 0, failed=True)) == []
    assert searcher.on_event(searchers.TrialExited("e1", 1, failed=True)) == []
    assert searcher.on_event(searchers.TrialExited("e2", 2, failed=True)) == [
        searchers.Shutdown(failure=True)
    ]
