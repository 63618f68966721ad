"""The PBT searcher: rounds, truncation and warm starts, exploring, and its promises under any
interleaving of events (a simulated cluster, as in test_properties.py)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.domain import searchers
from chalicelib.domain.searchers.pbt import _explore_group

SPACE: dict[str, Any] = {
    "lr": {"type": "log", "minval": -4, "maxval": -1},
    "width": {"type": "int", "minval": 4, "maxval": 64},
    "act": {"type": "categorical", "vals": ["relu", "tanh"]},
    "c": {"type": "const", "val": 7},
}


def pbt_spec(
    population: int = 4,
    rounds: int = 3,
    truncate: float = 0.5,
    resample: float = 0.0,
    perturb: float = 0.2,
    length: int | None = 10,
    smaller_is_better: bool = True,
    seed: int = 1,
) -> searchers.SearchSpec:
    settings_ = {
        "name": "pbt",
        "metric": "loss",
        "smaller_is_better": smaller_is_better,
        "population_size": population,
        "num_rounds": rounds,
        "replace_function": {"truncate_fraction": truncate},
        "explore_function": {"resample_probability": resample, "perturb_factor": perturb},
    }
    return searchers.SearchSpec(space=SPACE, settings=settings_, max_length=length, seed=seed)


class Driver:
    """Feeds a PBT searcher the events of trials that do as they are told."""

    def __init__(self, spec: searchers.SearchSpec) -> None:
        self.searcher = searchers.new_searcher(spec)
        assert isinstance(self.searcher, searchers.PBTSearcher)
        self.next_id = 1
        self.creates: dict[int, searchers.CreateTrial] = {}
        self.ops: list[searchers.Operation] = []
        self.n = 0
        self.apply(self.searcher.initial_operations())

    def event_id(self) -> str:
        self.n += 1
        return f"e{self.n}"

    def apply(self, ops: list[searchers.Operation]) -> None:
        self.ops += ops
        for op in ops:
            if isinstance(op, searchers.CreateTrial):
                trial_id, self.next_id = self.next_id, self.next_id + 1
                self.creates[trial_id] = op
                self.searcher.on_event(searchers.TrialCreated(self.event_id(), op.request_id, trial_id))

    def report(self, trial_id: int, length: int, metric: float) -> list[searchers.Operation]:
        ops = self.searcher.on_event(searchers.ValidationReported(self.event_id(), trial_id, length, metric))
        self.apply(ops)
        return ops

    def paused(self, trial_id: int) -> list[searchers.Operation]:
        assert isinstance(self.searcher, searchers.PBTSearcher)
        ops = self.searcher.on_trial_paused(searchers.TrialPaused(self.event_id(), trial_id))
        self.apply(ops)
        return ops

    def exited(self, trial_id: int, failed: bool = False) -> list[searchers.Operation]:
        ops = self.searcher.on_event(searchers.TrialExited(self.event_id(), trial_id, failed))
        self.apply(ops)
        return ops


def test_the_first_round_creates_the_population_with_one_round_each() -> None:
    driver = Driver(pbt_spec(population=4))
    creates = [op for op in driver.ops if isinstance(op, searchers.CreateTrial)]
    assert len(creates) == 4
    assert all(op.length == 10 and op.warm_start_trial_id is None for op in creates)
    assert all(op.hparams["c"] == 7 for op in creates)


def test_a_round_replaces_the_worst_by_warm_started_children_of_the_best() -> None:
    driver = Driver(pbt_spec(population=4, truncate=0.5))
    # Trial 1 is best, then 2, 3, 4: each pauses at its round's end.
    for trial_id, loss in [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)]:
        assert driver.report(trial_id, 10, loss) == [searchers.PauseTrial(trial_id)]
    assert driver.paused(1) == [] and driver.paused(2) == [] and driver.paused(3) == []
    ops = driver.paused(4)  # the last pause decides the round
    creates = [op for op in ops if isinstance(op, searchers.CreateTrial)]
    assert [op.warm_start_trial_id for op in creates] == [1, 2]
    assert all(op.length == 10 for op in creates)  # a warm-started trial counts its own batches
    assert [op for op in ops if isinstance(op, searchers.ContinueTrial)] == [
        searchers.ContinueTrial(1, 20),
        searchers.ContinueTrial(2, 20),
    ]
    assert [op for op in ops if isinstance(op, searchers.StopTrial)] == [
        searchers.StopTrial(3),
        searchers.StopTrial(4),
    ]
    # Children come first: their parents are still paused on their round's checkpoint when created.
    assert isinstance(ops[0], searchers.CreateTrial)
    # The children explore their parents' hyperparameters (perturbed by 1 ± 0.2, within bounds).
    parent = driver.creates[1].hparams
    child = creates[0].hparams
    assert child["lr"] in (pytest.approx(parent["lr"] * 1.2), pytest.approx(parent["lr"] * 0.8)) or child[
        "lr"
    ] in (pytest.approx(1e-4), pytest.approx(1e-1))
    assert child["act"] == parent["act"] and child["c"] == 7


def test_larger_is_better_ranks_the_other_way() -> None:
    driver = Driver(pbt_spec(population=2, truncate=0.5, smaller_is_better=False))
    driver.report(1, 10, 0.9)
    driver.report(2, 10, 0.1)
    driver.paused(1)
    ops = driver.paused(2)
    assert searchers.StopTrial(2) in ops and searchers.ContinueTrial(1, 20) in ops
    assert [op.warm_start_trial_id for op in ops if isinstance(op, searchers.CreateTrial)] == [1]


def test_the_last_round_stops_every_member_and_shuts_down_once_all_exited() -> None:
    driver = Driver(pbt_spec(population=2, rounds=1))
    assert driver.report(1, 10, 0.5) == [searchers.StopTrial(1)]
    assert driver.report(2, 10, 0.6) == [searchers.StopTrial(2)]
    assert driver.exited(1) == []
    assert driver.exited(2) == [searchers.Shutdown(failure=False)]
    assert driver.searcher.progress() == 1.0


def test_a_member_that_exits_early_is_replaced_and_ranks_last() -> None:
    driver = Driver(pbt_spec(population=3, truncate=0.0))
    driver.report(1, 10, 0.5)
    driver.report(2, 10, 0.4)
    driver.exited(3, failed=True)
    driver.paused(1)
    ops = driver.paused(2)
    creates = [op for op in ops if isinstance(op, searchers.CreateTrial)]
    assert [op.warm_start_trial_id for op in creates] == [2]  # the best is the parent
    assert {op.trial_id for op in ops if isinstance(op, searchers.ContinueTrial)} == {1, 2}


def test_a_round_where_no_member_reported_fails_the_search() -> None:
    driver = Driver(pbt_spec(population=2))
    driver.exited(1, failed=True)
    assert driver.exited(2, failed=True) == [searchers.Shutdown(failure=True)]


def test_an_intermediate_validation_keeps_the_round_target() -> None:
    driver = Driver(pbt_spec(population=1))
    assert driver.report(1, 5, 0.5) == []
    assert driver.report(1, 10, 0.4) == [searchers.PauseTrial(1)]


def test_pbt_without_a_round_length_is_refused_with_the_fix() -> None:
    with pytest.raises(searchers.SearcherNotSupportedError, match="length_per_round"):
        searchers.new_searcher(pbt_spec(length=None))


def test_exploring_keeps_values_in_bounds_and_resamples_with_probability_one() -> None:
    rng = random.Random(0)
    params = {"lr": 0.1, "width": 64, "act": "relu", "c": 7}
    for _ in range(50):
        out = _explore_group(SPACE, params, rng, 0.0, 0.5)
        assert 1e-4 <= out["lr"] <= 0.1 + 1e-12 and 4 <= out["width"] <= 64
        assert isinstance(out["width"], int) and out["act"] == "relu"
    resampled = {_explore_group(SPACE, params, rng, 1.0, 0.5)["act"] for _ in range(50)}
    assert resampled == {"relu", "tanh"}


# ---- any interleaving ---------------------------------------------------------------------------


@dataclass
class Member:
    trial_id: int
    target: int
    status: str = "running"  # running | pausing | paused | stopping | exited
    length: int = 0


@st.composite
def pbt_specs(draw: st.DrawFn) -> searchers.SearchSpec:
    return pbt_spec(
        population=draw(st.integers(1, 5)),
        rounds=draw(st.integers(1, 4)),
        truncate=draw(st.sampled_from([0.0, 0.2, 0.25, 0.5])),
        resample=draw(st.sampled_from([0.0, 0.25, 1.0])),
        perturb=draw(st.sampled_from([0.0, 0.2, 0.5])),
        length=draw(st.sampled_from([1, 4, 10])),
        smaller_is_better=draw(st.booleans()),
        seed=draw(st.integers(0, 99)),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=pbt_specs(), data=st.data())
def test_pbt_keeps_its_promises_under_any_interleaving(
    spec: searchers.SearchSpec, data: st.DataObject
) -> None:
    population = int(spec.settings["population_size"])
    rounds = int(spec.settings["num_rounds"])
    searcher = searchers.new_searcher(spec)
    assert isinstance(searcher, searchers.PBTSearcher)
    members: dict[int, Member] = {}
    created: dict[str, int] = {}
    seen: list[tuple[str, Any]] = []  # every event delivered, to deliver some again
    shutdowns = 0
    counter = 0

    def carry_out(ops: list[searchers.Operation]) -> None:
        nonlocal shutdowns, counter
        for op in ops:
            if isinstance(op, searchers.CreateTrial):
                assert op.request_id not in created
                if op.warm_start_trial_id is not None:
                    assert op.warm_start_trial_id in members  # a parent that exists
                trial_id = len(created) + 1
                created[op.request_id] = trial_id
                members[trial_id] = Member(trial_id, int(op.length or 0))
                counter += 1
                assert searcher.on_event(searchers.TrialCreated(f"c{counter}", op.request_id, trial_id)) == []
            elif isinstance(op, searchers.ContinueTrial):
                member = members[op.trial_id]
                assert member.status in ("pausing", "paused") and op.length > member.length
                member.status, member.target = "running", op.length
            elif isinstance(op, searchers.PauseTrial):
                assert members[op.trial_id].status == "running"
                members[op.trial_id].status = "pausing"
            elif isinstance(op, searchers.StopTrial):
                assert members[op.trial_id].status in ("running", "paused", "pausing")
                members[op.trial_id].status = "stopping"
            else:
                shutdowns += 1

    def deliver(kind: str, event: Any) -> None:
        seen.append((kind, event))
        ops = searcher.on_trial_paused(event) if kind == "paused" else searcher.on_event(event)
        # A restored copy answers the next event alike.
        restored = searchers.restore_searcher(json.loads(json.dumps(searcher.snapshot())), spec)
        assert restored.snapshot() == searcher.snapshot()
        carry_out(ops)

    carry_out(searcher.initial_operations())
    steps = 0
    while shutdowns == 0:
        steps += 1
        assert steps < 2000
        counter += 1
        live = [m for m in members.values() if m.status not in ("exited", "paused")]
        assert live, "the search stalled: no trial can move and there was no shutdown"
        member = data.draw(st.sampled_from(live))
        choice = data.draw(st.sampled_from(["advance", "advance", "advance", "fail", "again"]))
        if choice == "again" and seen:
            kind, event = data.draw(st.sampled_from(seen))
            before = searcher.snapshot()
            ops = searcher.on_trial_paused(event) if kind == "paused" else searcher.on_event(event)
            assert ops == [] and searcher.snapshot() == before  # a redelivery changes nothing
        elif choice == "fail" and data.draw(st.integers(0, 9)) == 0:
            member.status = "exited"
            deliver("event", searchers.TrialExited(f"x{counter}", member.trial_id, failed=True))
        elif member.status == "running":
            member.length = member.target
            metric = data.draw(st.floats(-10, 10, allow_nan=False))
            deliver(
                "event", searchers.ValidationReported(f"v{counter}", member.trial_id, member.length, metric)
            )
        elif member.status == "pausing":
            member.status = "paused"
            deliver("paused", searchers.TrialPaused(f"p{counter}", member.trial_id))
        elif member.status == "stopping":
            member.status = "exited"
            deliver("event", searchers.TrialExited(f"x{counter}", member.trial_id, failed=False))
    assert shutdowns == 1
    assert searcher.progress() == 1.0
    assert all(m.status in ("exited", "stopping", "paused") for m in members.values())
    replaced = int(float(spec.settings["replace_function"]["truncate_fraction"]) * population)
    # At most the population, plus a replacement per truncated or exited member per round.
    assert len(created) <= population * rounds
    if replaced == 0 and not any(
        k == "event" and isinstance(e, searchers.TrialExited) and e.failed for k, e in seen
    ):
        assert len(created) == population
