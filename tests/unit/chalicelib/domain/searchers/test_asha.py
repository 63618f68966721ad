from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.domain import searchers
from chalicelib.domain.searchers.asha_plan import bracket_max_trials, plan, rung_targets

SPACE = {"x": {"type": "double", "minval": 0, "maxval": 1}, "n": {"type": "int", "minval": 1, "maxval": 4}}


def spec(max_length: int = 1000, seed: int = 0, **settings: Any) -> searchers.SearchSpec:
    base: dict[str, Any] = {"name": "adaptive_asha", "metric": "loss", "max_trials": 256}
    base.update(settings)
    return searchers.SearchSpec(space=SPACE, settings=base, max_length=max_length, seed=seed)


def small(**settings: Any) -> searchers.SearchSpec:
    """max_length 16, divisor 2, three rungs (targets 4, 8, 16), one bracket."""
    base: dict[str, Any] = {"mode": "aggressive", "divisor": 2, "max_rungs": 3, "max_trials": 4}
    base.update(settings)
    return spec(max_length=16, **base)


def creates(ops: list[searchers.Operation]) -> list[searchers.CreateTrial]:
    return [op for op in ops if isinstance(op, searchers.CreateTrial)]


# ---- the plan -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "rungs"),
    [("aggressive", [5]), ("standard", [5, 4, 3]), ("conservative", [5, 4, 3, 2, 1])],
)
def test_brackets_per_mode(mode: str, rungs: list[int]) -> None:
    assert [b.num_rungs for b in plan(spec(mode=mode))] == rungs


def test_max_rungs_is_clamped_by_max_length_and_max_trials_and_bracket_rungs_override() -> None:
    assert [b.num_rungs for b in plan(spec(mode="standard", max_rungs=3))] == [3, 2]
    assert [b.num_rungs for b in plan(spec(mode="standard", max_rungs=4))] == [4, 3, 2]
    assert [b.num_rungs for b in plan(spec(mode="standard", max_trials=100))] == [4, 3, 2]  # log4(100)=3.3
    assert [b.num_rungs for b in plan(spec(mode="aggressive", max_length=10))] == [2]  # log4(10)=1.7
    assert [b.num_rungs for b in plan(spec(mode="conservative", max_trials=1))] == [1]
    assert [b.num_rungs for b in plan(spec(bracket_rungs=[2, 4]))] == [4, 2]


def test_rung_targets_truncate_like_determined() -> None:
    assert rung_targets(5, 4.0, 1000) == (3, 15, 62, 250, 1000)
    assert rung_targets(3, 4.0, 1000) == (62, 250, 1000)
    assert rung_targets(3, 4.0, 10) == (1, 2, 10)  # at least 1
    assert [b.targets for b in plan(spec(mode="standard"))] == [
        (3, 15, 62, 250, 1000),
        (15, 62, 250, 1000),
        (62, 250, 1000),
    ]


def test_trials_and_concurrency_split_across_brackets() -> None:
    # weights 4^4/5, 4^3/4, 4^2/3 -> 180, 56, 18 (+2 remainder to the first)
    assert bracket_max_trials(256, 4.0, [5, 4, 3]) == [182, 56, 18]
    standard = plan(spec(mode="standard"))
    assert [b.max_trials for b in standard] == [182, 56, 18]
    assert [b.max_concurrent for b in standard] == [6, 5, 5]  # 16 split, remainder to the first
    conservative = plan(spec(mode="conservative"))
    assert [b.max_trials for b in conservative] == [175, 54, 18, 6, 3]
    assert [b.max_concurrent for b in conservative] == [4, 3, 3, 3, 3]
    unlimited = plan(spec(mode="standard", max_trials=100, max_concurrent_trials=0))
    assert [b.max_trials for b in unlimited] == [70, 22, 8]
    assert [b.max_concurrent for b in unlimited] == [8, 8, 8]  # max(last bracket's trials, divisor)
    # Determined gives every bracket at least one trial; Stratus drops brackets past max_trials
    tight = plan(spec(mode="conservative", divisor=1.2, max_trials=3))
    assert [(b.num_rungs, b.max_trials) for b in tight] == [(5, 1), (4, 1), (3, 1)]


def test_initial_trials_fill_each_bracket_and_respect_a_global_cap() -> None:
    ops = searchers.new_searcher(spec(mode="standard")).initial_operations()
    assert len(ops) == 16 and [op.request_id for op in creates(ops)][:3] == ["asha-0", "asha-1", "asha-2"]
    assert sorted(op.length for op in creates(ops)) == [3] * 6 + [15] * 5 + [62] * 5
    capped = searchers.new_searcher(spec(mode="conservative", max_concurrent_trials=2)).initial_operations()
    assert [op.length for op in creates(capped)] == [3, 15]  # 5 brackets, but only 2 at once
    stopping = searchers.new_searcher(spec(mode="standard", stop_once=True)).initial_operations()
    assert {op.length for op in creates(stopping)} == {1000}


# ---- promotions -----------------------------------------------------------------------------------


def test_promotion_scenario_with_a_paused_trial_promoted_later() -> None:
    searcher = searchers.new_searcher(small(max_concurrent_trials=2))
    assert isinstance(searcher, searchers.AdaptiveASHASearcher)
    ops = searcher.initial_operations()
    assert [(op.request_id, op.length) for op in creates(ops)] == [("asha-0", 4), ("asha-1", 4)]
    searcher.on_event(searchers.TrialCreated("c0", "asha-0", 10))
    searcher.on_event(searchers.TrialCreated("c1", "asha-1", 11))
    assert searcher.on_event(searchers.ValidationReported("v10-2", 10, 2, 0.9)) == []  # short of its target
    # first result of rung 0: nobody can be promoted yet -> paused, a new trial takes its place
    ops = searcher.on_event(searchers.ValidationReported("v10-4", 10, 4, 0.5))
    assert ops[0] == searchers.PauseTrial(10) and [op.request_id for op in creates(ops)] == ["asha-2"]
    assert searcher.progress() == pytest.approx(1 / (1.2 * 4))
    # second result ranks in the top half of 2 -> promoted at once
    assert searcher.on_event(searchers.ValidationReported("v11-4", 11, 4, 0.3)) == [
        searchers.ContinueTrial(11, 8)
    ]
    searcher.on_event(searchers.TrialCreated("c2", "asha-2", 12))
    ops = searcher.on_event(searchers.ValidationReported("v12-4", 12, 4, 0.4))
    assert ops[0] == searchers.PauseTrial(12) and [op.request_id for op in creates(ops)] == ["asha-3"]
    searcher.on_event(searchers.TrialCreated("c3", "asha-3", 13))
    # fourth result: two may go up now; the new one is third, so paused trial 12 (second) goes up
    ops = searcher.on_event(searchers.ValidationReported("v13-4", 13, 4, 0.45))
    assert ops == [
        searchers.PauseTrial(13),
        searchers.ContinueTrial(12, 8),
    ]  # max_trials reached: nothing new
    assert searcher.on_event(searchers.ValidationReported("v11-8", 11, 8, 0.2)) == [searchers.PauseTrial(11)]
    assert searcher.on_event(searchers.ValidationReported("v12-8", 12, 8, 0.35)) == [
        searchers.PauseTrial(12),
        searchers.ContinueTrial(11, 16),
    ]
    snapshot = json.loads(json.dumps(searcher.snapshot()))
    assert (
        searchers.restore_searcher(snapshot, small(max_concurrent_trials=2)).snapshot() == searcher.snapshot()
    )
    assert searcher.on_event(searchers.ValidationReported("v11-16", 11, 16, 0.1)) == [searchers.StopTrial(11)]
    # the last running trial exits; 10, 12 and 13 stay paused, no promotion is possible any more
    assert searcher.on_event(searchers.TrialExited("e11", 11, failed=False)) == [
        searchers.Shutdown(failure=False)
    ]
    assert searcher.on_event(searchers.TrialExited("e11", 11, failed=False)) == []
    assert searcher.progress() == 1.0


def test_a_result_past_the_next_target_counts_there_too() -> None:
    searcher = searchers.new_searcher(small(max_concurrent_trials=2))
    searcher.initial_operations()
    searcher.on_event(searchers.TrialCreated("c0", "asha-0", 1))
    searcher.on_event(searchers.TrialCreated("c1", "asha-1", 2))
    assert searcher.on_event(searchers.ValidationReported("a", 1, 4, 0.5))[0] == searchers.PauseTrial(1)
    # promoted at rung 0, already past 8: recorded at rung 1 (first there, so paused)
    assert searcher.on_event(searchers.ValidationReported("b", 2, 9, 0.1))[0] == searchers.PauseTrial(2)
    assert searcher.snapshot()["rungs"][0][1] == [[0.1, "asha-1", False]]


def test_failed_trial_counts_as_worst_and_can_promote_a_paused_one() -> None:
    searcher = searchers.new_searcher(small(max_concurrent_trials=1))
    assert [op.request_id for op in creates(searcher.initial_operations())] == ["asha-0"]
    searcher.on_event(searchers.TrialCreated("c0", "asha-0", 1))
    ops = searcher.on_event(searchers.ValidationReported("v1", 1, 4, 1.0))
    assert ops == [searchers.PauseTrial(1), searchers.CreateTrial("asha-1", ops[1].hparams, 4)]  # type: ignore[union-attr]
    searcher.on_event(searchers.TrialCreated("c1", "asha-1", 2))
    # trial 2 fails before its first result: the worst result of rung 0 lets paused trial 1 go up
    assert searcher.on_event(searchers.TrialExited("e2", 2, failed=True)) == [searchers.ContinueTrial(1, 8)]
    assert searcher.snapshot()["exited"] == {"2": True}


def test_invalid_hp_is_replaced_without_using_the_budget() -> None:
    spec2 = small(max_concurrent_trials=1, max_trials=2)
    assert [b.targets for b in plan(spec2)] == [(8, 16)]
    searcher = searchers.new_searcher(spec2)
    searcher.initial_operations()
    searcher.on_event(searchers.TrialCreated("c0", "asha-0", 1))
    ops = searcher.on_event(searchers.TrialExited("e1", 1, failed=False, invalid_hp=True))
    assert [op.request_id for op in creates(ops)] == ["asha-1"]
    searcher.on_event(searchers.TrialCreated("c1", "asha-1", 2))
    ops = searcher.on_event(searchers.ValidationReported("v2", 2, 8, 1.0))
    assert ops[0] == searchers.PauseTrial(2) and [op.request_id for op in creates(ops)] == ["asha-2"]
    searcher.on_event(searchers.TrialCreated("c2", "asha-2", 3))
    assert searcher.on_event(searchers.ValidationReported("v3", 3, 8, 0.5)) == [
        searchers.ContinueTrial(3, 16)
    ]
    assert searcher.on_event(searchers.ValidationReported("v3b", 3, 16, 0.4)) == [searchers.StopTrial(3)]
    assert searcher.on_event(searchers.TrialExited("e3", 3, failed=False)) == [
        searchers.Shutdown(failure=False)
    ]


def test_every_trial_failing_shuts_down_with_failure() -> None:
    searcher = searchers.new_searcher(spec(max_trials=1))
    assert [op.length for op in creates(searcher.initial_operations())] == [1000]  # one rung, one trial
    searcher.on_event(searchers.TrialCreated("c0", "asha-0", 1))
    assert searcher.on_event(searchers.TrialExited("e1", 1, failed=True)) == [
        searchers.Shutdown(failure=True)
    ]


# ---- early stopping -------------------------------------------------------------------------------


def test_stop_once_scenario() -> None:
    searcher = searchers.new_searcher(small(max_concurrent_trials=2, stop_once=True))
    ops = searcher.initial_operations()
    assert [(op.request_id, op.length) for op in creates(ops)] == [("asha-0", 16), ("asha-1", 16)]
    searcher.on_event(searchers.TrialCreated("c0", "asha-0", 10))
    searcher.on_event(searchers.TrialCreated("c1", "asha-1", 11))
    assert searcher.on_event(searchers.ValidationReported("a", 10, 4, 0.5)) == []  # best so far: goes on
    assert searcher.on_event(searchers.ValidationReported("b", 11, 4, 0.6)) == [
        searchers.StopTrial(11)
    ]  # not in the top half
    assert [
        op.request_id for op in creates(searcher.on_event(searchers.TrialExited("e11", 11, failed=False)))
    ] == ["asha-2"]
    assert searcher.on_event(searchers.ValidationReported("c", 10, 8, 0.4)) == []
    searcher.on_event(searchers.TrialCreated("c2", "asha-2", 12))
    # a result past two rung targets is checked against both rungs
    assert searcher.on_event(searchers.ValidationReported("d", 12, 12, 0.3)) == []
    rungs = searcher.snapshot()["rungs"][0]
    assert [e[1] for e in rungs[0]] == ["asha-2", "asha-0", "asha-1"] and [e[1] for e in rungs[1]] == [
        "asha-2",
        "asha-0",
    ]
    assert searcher.on_event(searchers.ValidationReported("e", 10, 16, 0.35)) == [
        searchers.StopTrial(10)
    ]  # the top rung
    # a failure counts as the worst result at the rung it was training towards
    ops = searcher.on_event(searchers.TrialExited("e12", 12, failed=True))
    assert [op.request_id for op in creates(ops)] == ["asha-3"]
    assert searcher.snapshot()["rungs"][0][2][-1][1] == "asha-2"
    searcher.on_event(searchers.TrialCreated("c3", "asha-3", 13))
    assert searcher.on_event(searchers.ValidationReported("f", 13, 4, 0.9)) == [searchers.StopTrial(13)]
    assert searcher.on_event(searchers.TrialExited("e10", 10, failed=False)) == []
    assert searcher.on_event(searchers.TrialExited("e13", 13, failed=False)) == [
        searchers.Shutdown(failure=False)
    ]


def test_smaller_is_better_false_flips_the_ranking() -> None:
    searcher = searchers.new_searcher(small(max_concurrent_trials=2, stop_once=True, smaller_is_better=False))
    searcher.initial_operations()
    searcher.on_event(searchers.TrialCreated("c0", "asha-0", 10))
    searcher.on_event(searchers.TrialCreated("c1", "asha-1", 11))
    assert searcher.on_event(searchers.ValidationReported("a", 10, 4, 0.9)) == []
    assert searcher.on_event(searchers.ValidationReported("b", 11, 4, 0.8)) == [searchers.StopTrial(11)]


def test_needs_max_length() -> None:
    with pytest.raises(ValueError, match="max_length"):
        searchers.new_searcher(
            searchers.SearchSpec(SPACE, {"name": "adaptive_asha", "max_trials": 4}, None, 0)
        )
