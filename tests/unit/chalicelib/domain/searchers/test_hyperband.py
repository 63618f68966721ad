from __future__ import annotations

import json
import math
from typing import Any

import pytest

from chalicelib.domain import searchers
from chalicelib.domain.searchers.hyperband_plan import bracket_size, max_bracket, plan

SPACE = {"x": {"type": "double", "minval": 0, "maxval": 1}, "n": {"type": "int", "minval": 1, "maxval": 4}}


def spec(
    max_length: int = 81, seed: int = 0, name: str = "hyperband", **settings: Any
) -> searchers.SearchSpec:
    base: dict[str, Any] = {"name": name, "metric": "loss", **settings}
    return searchers.SearchSpec(space=SPACE, settings=base, max_length=max_length, seed=seed)


def creates(ops: list[searchers.Operation]) -> list[searchers.CreateTrial]:
    return [op for op in ops if isinstance(op, searchers.CreateTrial)]


class Driver:
    """Creates what the searcher asks for (trial ids from 100), and feeds it results by request id."""

    def __init__(self, searcher: searchers.Searcher) -> None:
        self.searcher = searcher
        self.ids: dict[str, int] = {}
        self.targets: dict[int, int] = {}
        self.events = 0
        self.ops: list[searchers.Operation] = []
        self.take(searcher.initial_operations())

    def take(self, ops: list[searchers.Operation]) -> list[searchers.Operation]:
        self.ops += ops
        for op in ops:
            if isinstance(op, searchers.CreateTrial):
                trial_id = 100 + len(self.ids)
                self.ids[op.request_id] = trial_id
                self.targets[trial_id] = int(op.length or 0)
                self.searcher.on_event(searchers.TrialCreated(f"c-{trial_id}", op.request_id, trial_id))
            elif isinstance(op, searchers.ContinueTrial):
                self.targets[op.trial_id] = op.length
        return ops

    def report(self, trial_id: int, metric: float, length: int | None = None) -> list[searchers.Operation]:
        self.events += 1
        length = self.targets[trial_id] if length is None else length
        event = searchers.ValidationReported(f"v-{self.events}", trial_id, length, metric)
        return self.take(self.searcher.on_event(event))

    def exit(
        self, trial_id: int, *, failed: bool = False, invalid_hp: bool = False
    ) -> list[searchers.Operation]:
        self.events += 1
        event = searchers.TrialExited(f"x-{self.events}", trial_id, failed, invalid_hp)
        return self.take(self.searcher.on_event(event))


# ---- the plan -------------------------------------------------------------------------------------


def test_brackets_match_li_et_al_table_for_r_81_and_eta_3() -> None:
    brackets = plan(spec(81, divisor=3))
    assert [(b.s, b.sizes, b.targets) for b in brackets] == [
        (4, (81, 27, 9, 3, 1), (1, 3, 9, 27, 81)),
        (3, (34, 11, 3, 1), (3, 9, 27, 81)),
        (2, (15, 5, 1), (9, 27, 81)),
        (1, (8, 2), (27, 81)),
        (0, (5,), (81,)),
    ]


@pytest.mark.parametrize(("max_length", "eta"), [(81, 3), (100, 3), (60, 3), (27, 2), (16, 2.5), (5, 2)])
def test_bracket_sizes_and_lengths_follow_the_formulas(max_length: int, eta: float) -> None:
    s_max = max_bracket(max_length, eta)
    assert eta**s_max <= max_length < eta ** (s_max + 1)
    brackets = plan(spec(max_length, divisor=eta))
    assert [b.s for b in brackets] == list(range(s_max, -1, -1))
    for b in brackets:
        assert b.num_trials == math.ceil((s_max + 1) / (b.s + 1) * eta**b.s - 1e-9)
        assert b.targets == tuple(
            max(1, math.floor(max_length * eta ** (i - b.s) + 1e-9)) for i in range(b.s + 1)
        )
        assert all(later > earlier for earlier, later in zip(b.targets, b.targets[1:], strict=False))
        assert all(b.sizes[i + 1] == max(1, math.floor(b.sizes[i] / eta + 1e-9)) for i in range(b.s))
        assert b.targets[-1] == max_length


def test_nni_hyperband_r_100_lengths_and_max_rungs_caps_s_max() -> None:
    assert [b.targets for b in plan(spec(100, divisor=3))][:2] == [(1, 3, 11, 33, 100), (3, 11, 33, 100)]
    assert [b.s for b in plan(spec(27, divisor=3, max_rungs=2))] == [1, 0]  # BOHB's min_budget 9
    assert bracket_size(1, 1, 3) == 3 and bracket_size(0, 1, 3) == 2


def test_iterations_repeat_the_brackets_and_max_trials_cuts_the_last() -> None:
    one = plan(spec(9, divisor=3))
    assert [b.num_trials for b in one] == [9, 5, 3]
    assert [b.num_trials for b in plan(spec(9, divisor=3, iterations=2))] == [9, 5, 3, 9, 5, 3]
    cut = plan(spec(9, divisor=3, max_trials=20))
    assert [(b.s, b.sizes) for b in cut] == [(2, (9, 3, 1)), (1, (5, 1)), (0, (3,)), (2, (3, 1, 1))]
    assert [b.num_trials for b in plan(spec(9, divisor=3, max_trials=12, iterations=1))] == [9, 3]


def test_a_divisor_below_2_or_no_max_length_is_refused() -> None:
    with pytest.raises(ValueError, match="divisor >= 2"):
        plan(spec(9, divisor=1.5))
    with pytest.raises(ValueError, match="need searcher.max_length"):
        plan(searchers.SearchSpec(SPACE, {"name": "hyperband"}, None, 0))


# ---- synchronous halving --------------------------------------------------------------------------


def one_bracket(**settings: Any) -> searchers.SearchSpec:
    """R = 9, eta = 3, only bracket s = 2: 9 trials at 1, the best 3 to 3, the best 1 to 9."""
    return spec(9, divisor=3, max_trials=9, **settings)


def test_a_rung_decides_when_all_its_trials_reported_and_promoted_trials_continue() -> None:
    driver = Driver(searchers.new_searcher(one_bracket(max_concurrent_trials=0)))
    assert [op.length for op in creates(driver.ops)] == [1] * 9
    trial_ids = list(driver.ids.values())
    for position, trial_id in enumerate(trial_ids[:-1]):
        assert driver.report(trial_id, metric=float(position)) == [searchers.PauseTrial(trial_id)]
    # The last result completes rung 0: the best three (metrics 0, 1, 2) continue to 3, the rest stop.
    last = trial_ids[-1]
    ops = driver.report(last, metric=0.5)
    assert ops == [
        searchers.StopTrial(trial_ids[2]),
        *[searchers.StopTrial(t) for t in trial_ids[3:8]],
        searchers.ContinueTrial(trial_ids[0], 3),
        searchers.ContinueTrial(last, 3),  # promoted as it reported: it trains on, never paused
        searchers.ContinueTrial(trial_ids[1], 3),
    ]
    driver.report(trial_ids[0], 0.3)
    driver.report(trial_ids[1], 0.1)
    assert driver.report(last, 0.25) == [
        searchers.StopTrial(last),  # second of three: stopped as it reports
        searchers.StopTrial(trial_ids[0]),
        searchers.ContinueTrial(trial_ids[1], 9),
    ]
    assert driver.report(trial_ids[1], 0.05) == [searchers.StopTrial(trial_ids[1])]
    for trial_id in trial_ids:
        ops = driver.exit(trial_id)
    assert ops == [searchers.Shutdown(failure=False)] and driver.searcher.progress() == 1.0


def test_larger_is_better_promotes_the_largest() -> None:
    driver = Driver(searchers.new_searcher(one_bracket(smaller_is_better=False, max_concurrent_trials=0)))
    trial_ids = list(driver.ids.values())
    for position, trial_id in enumerate(trial_ids):
        ops = driver.report(trial_id, metric=float(position))
    continued = {op.trial_id for op in ops if isinstance(op, searchers.ContinueTrial)}
    assert continued == set(trial_ids[-3:])


def test_a_trial_that_exits_early_counts_as_the_worst_and_an_invalid_one_is_replaced() -> None:
    driver = Driver(searchers.new_searcher(one_bracket(max_concurrent_trials=0)))
    trial_ids = list(driver.ids.values())
    assert driver.report(trial_ids[0], 0.5, length=0) == []  # short of its target: it stands
    replacement = creates(driver.exit(trial_ids[0], invalid_hp=True))
    assert [(op.request_id, op.length) for op in replacement] == [("hyperband-9", 1)]
    driver.exit(trial_ids[1], failed=True)  # the worst result of rung 0
    for trial_id in [*trial_ids[2:], driver.ids["hyperband-9"]]:
        ops = driver.report(trial_id, 1.0)
    continued = [op.trial_id for op in ops if isinstance(op, searchers.ContinueTrial)]
    assert len(continued) == 3 and trial_ids[1] not in continued and trial_ids[0] not in continued
    assert len(driver.ids) == 10  # the budget of 9 plus the one replacement


def test_promotions_wait_for_a_free_slot_and_go_before_new_trials() -> None:
    driver = Driver(searchers.new_searcher(spec(9, divisor=3, max_concurrent_trials=2)))
    assert len(creates(driver.ops)) == 2
    for trial_id in range(100, 108):  # rung 0 of bracket 0, two at a time; each pause frees a slot
        assert driver.report(trial_id, float(trial_id))[0] == searchers.PauseTrial(trial_id)
    assert driver.targets[109] == 3  # bracket 1's first trial took the last free slot
    # 108 completes rung 0 and loses: the best three wait, as 108 (stopping) and 109 hold both slots.
    assert driver.report(108, 108.0) == [searchers.StopTrial(t) for t in range(103, 109)]
    assert isinstance(driver.searcher, searchers.HyperbandSearcher)
    assert driver.searcher.waiting == ["hyperband-0", "hyperband-1", "hyperband-2"]
    assert driver.exit(108) == [searchers.ContinueTrial(100, 3)]  # before bracket 1's next trial
    assert driver.report(109, 0.5) == [searchers.PauseTrial(109), searchers.ContinueTrial(101, 3)]
    assert driver.report(100, 0.5) == [searchers.PauseTrial(100), searchers.ContinueTrial(102, 3)]


def test_duplicates_change_nothing_and_a_restored_searcher_carries_on_identically() -> None:
    for name in ("hyperband", "bohb"):
        original = Driver(searchers.new_searcher(spec(9, name=name, divisor=3, max_concurrent_trials=3)))
        trial_ids = list(original.ids.values())
        original.report(trial_ids[0], 0.4)
        snapshot = json.loads(json.dumps(original.searcher.snapshot()))
        restored = searchers.restore_searcher(
            snapshot, spec(9, name=name, divisor=3, max_concurrent_trials=3)
        )
        assert restored.snapshot() == original.searcher.snapshot() and restored.initial_operations() == []
        before = original.searcher.snapshot()
        assert original.searcher.on_event(searchers.ValidationReported("v-1", trial_ids[0], 1, 0.1)) == []
        assert original.searcher.snapshot() == before
        for step, trial_id in enumerate(trial_ids[1:]):
            event = searchers.ValidationReported(f"w-{step}", trial_id, 1, 0.1 * step)
            assert restored.on_event(event) == original.searcher.on_event(event)
        assert restored.snapshot() == original.searcher.snapshot()


def test_a_determined_style_config_section_builds_the_searcher() -> None:
    from chalicelib.config import parse_experiment_config
    from chalicelib.services.searching import search_spec

    raw = {
        "name": "hb",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "bohb", "metric": "loss", "max_length": {"batches": 27}, "max_trials": 30},
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
    }
    built = search_spec(parse_experiment_config(raw).config)
    assert built.max_length == 27 and built.settings["divisor"] == 3.0
    searcher = searchers.new_searcher(built)
    assert isinstance(searcher, searchers.BOHBSearcher)
    assert [b.num_trials for b in searcher.brackets] == [27, 3]  # 27 + 12 + ... cut at 30
    with pytest.raises(Exception, match="searcher.max_length: required"):
        parse_experiment_config({**raw, "searcher": {"name": "hyperband", "metric": "loss"}})
