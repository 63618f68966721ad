from __future__ import annotations

import json
import math
from typing import Any

from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from chalicelib.domain import searchers
from chalicelib.domain.searchers.tpe import distributions, to_hparams

SPACE = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "layers": {"type": "int", "minval": 1, "maxval": 4},
    "act": {"type": "categorical", "vals": ["relu", {"name": "gelu"}, None]},
    "opt": {
        "beta": {"type": "double", "minval": 0.8, "maxval": 0.99},
        "name": "adam",
        "c": {"type": "const", "val": 3},
    },
    "batch_size": 32,
}
QUADRATIC = {
    "x": {"type": "double", "minval": -2, "maxval": 2},
    "y": {"type": "double", "minval": -2, "maxval": 2},
}


def spec(
    name: str = "tpe",
    space: dict[str, Any] = SPACE,
    max_trials: int = 6,
    mct: int = 2,
    seed: int = 1,
    **extra: Any,
) -> searchers.SearchSpec:
    settings = {
        "name": name,
        "metric": "loss",
        "max_trials": max_trials,
        "max_concurrent_trials": mct,
        **extra,
    }
    return searchers.SearchSpec(space=space, settings=settings, max_length=50, seed=seed)


def creates(ops: list[searchers.Operation]) -> list[searchers.CreateTrial]:
    return [op for op in ops if isinstance(op, searchers.CreateTrial)]


def test_determined_types_map_to_optuna_distributions_and_back() -> None:
    dists = distributions(SPACE)
    assert dists == {
        "act": CategoricalDistribution([0, 1, 2]),
        "layers": IntDistribution(1, 4),
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "opt.beta": FloatDistribution(0.8, 0.99),
    }
    hparams = to_hparams(SPACE, {"act": 1, "layers": 3, "lr": 0.01, "opt.beta": 0.9})
    assert hparams == {
        "act": {"name": "gelu"},
        "batch_size": 32,
        "layers": 3,
        "lr": 0.01,
        "opt": {"beta": 0.9, "c": 3, "name": "adam"},
    }


def test_proposals_are_in_the_space_and_reproducible() -> None:
    a = searchers.new_searcher(spec(max_trials=3, mct=0)).initial_operations()
    assert a == searchers.new_searcher(spec(max_trials=3, mct=0)).initial_operations()
    assert [op.request_id for op in creates(a)] == ["tpe-0", "tpe-1", "tpe-2"]
    for op in creates(a):
        h = op.hparams
        assert 1e-4 <= h["lr"] <= 1e-1 and h["layers"] in range(1, 5) and 0.8 <= h["opt"]["beta"] <= 0.99
        assert h["act"] in ("relu", {"name": "gelu"}, None) and h["batch_size"] == 32 and op.length == 50


def drive(
    searcher: searchers.Searcher, space_metric: Any, *, check_restore_with: searchers.SearchSpec | None = None
) -> list[float]:
    """Run a searcher to the end, one trial at a time in creation order; returns the values seen."""
    values: list[float] = []
    pending = creates(searcher.initial_operations())
    trial_id = 0
    while pending:
        op = pending.pop(0)
        trial_id += 1
        events: list[Any] = [
            searchers.TrialCreated(f"c{trial_id}", op.request_id, trial_id),
            searchers.ValidationReported(f"v{trial_id}", trial_id, 50, space_metric(op.hparams)),
            searchers.TrialExited(f"e{trial_id}", trial_id, failed=False),
        ]
        values.append(space_metric(op.hparams))
        for event in events:
            if check_restore_with is not None:
                restored = searchers.restore_searcher(
                    json.loads(json.dumps(searcher.snapshot())), check_restore_with
                )
                assert restored.on_event(event) == (ops := searcher.on_event(event))
                assert restored.snapshot() == searcher.snapshot()
            else:
                ops = searcher.on_event(event)
            pending += creates(ops)
    return values


def test_a_restored_searcher_proposes_exactly_what_the_original_would_have() -> None:
    s = spec(space=QUADRATIC, max_trials=14, mct=2, seed=5)
    searcher = searchers.new_searcher(s)

    def quadratic(h: dict[str, Any]) -> float:
        return float((h["x"] - 0.5) ** 2 + (h["y"] + 0.5) ** 2)

    values = drive(searcher, quadratic, check_restore_with=s)
    assert len(values) == 14
    assert isinstance(searcher, searchers.TPESearcher) and searcher.progress() == 1.0
    assert searcher.snapshot()["requests"][-1]["extra"]["params"].keys() == {"x", "y"}


def test_failed_and_invalid_trials_and_shutdown() -> None:
    searcher = searchers.new_searcher(spec(max_trials=2, mct=1))
    assert len(creates(searcher.initial_operations())) == 1
    searcher.on_event(searchers.TrialCreated("c1", "tpe-0", 1))
    ops = searcher.on_event(searchers.TrialExited("e1", 1, failed=False, invalid_hp=True))
    assert [op.request_id for op in creates(ops)] == ["tpe-1"]  # replaced, budget untouched
    searcher.on_event(searchers.TrialCreated("c2", "tpe-1", 2))
    ops = searcher.on_event(searchers.TrialExited("e2", 2, failed=True))  # no metric: a failed optuna trial
    assert [op.request_id for op in creates(ops)] == ["tpe-2"]
    searcher.on_event(searchers.TrialCreated("c3", "tpe-2", 3))
    assert searcher.on_event(searchers.ValidationReported("v3", 3, 50, 0.1)) == []
    assert searcher.on_event(searchers.TrialExited("e3", 3, failed=False)) == [
        searchers.Shutdown(failure=False)
    ]
    assert isinstance(searcher, searchers.TPESearcher)
    states = [t.state.name for t in searcher.study().trials]
    assert states == ["FAIL", "FAIL", "COMPLETE"]


def test_tpe_beats_random_on_an_easy_quadratic() -> None:
    def quadratic(h: dict[str, Any]) -> float:
        return float((h["x"] - 0.5) ** 2 + (h["y"] + 0.5) ** 2)

    tpe_best, random_best = [], []
    for seed in (1, 2, 3):
        tpe_values = drive(
            searchers.new_searcher(spec(space=QUADRATIC, max_trials=40, mct=1, seed=seed)), quadratic
        )
        random_values = drive(
            searchers.new_searcher(spec("random", QUADRATIC, max_trials=40, mct=1, seed=seed)), quadratic
        )
        tpe_best.append(min(tpe_values))
        random_best.append(min(random_values))
        # TPE concentrates on the optimum: its later proposals are better than random's on average
        assert sum(tpe_values[20:]) < sum(random_values[20:])
    assert sum(tpe_best) < sum(random_best)
    assert max(tpe_best) < 0.1


def test_maximising_follows_smaller_is_better_false() -> None:
    def peak(h: dict[str, Any]) -> float:
        return -math.hypot(h["x"] - 1.0, h["y"] - 1.0)

    values = drive(
        searchers.new_searcher(spec(space=QUADRATIC, max_trials=30, mct=1, smaller_is_better=False)), peak
    )
    assert max(values[15:]) > -0.3
    assert sum(values[15:]) / 15 > sum(values[:10]) / 10
