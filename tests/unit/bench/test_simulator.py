"""The search-quality benchmark's simulator (`bench/sim/simulator.py`): pauses told to a PBT searcher, and
warm-started trials scored at their lineage's effective length."""

from __future__ import annotations

import math
from typing import Any

from bench.sim.functions import Function
from bench.sim.simulator import Simulator

MAX_LENGTH = 64


def _recording_function(seen: list[float]) -> Function:
    """A 1-D function that records the fidelity of every evaluation and has no noise."""

    def value(x: tuple[float, ...], z: float) -> float:
        seen.append(z)
        return (x[0] - 0.3) ** 2 + (1.0 - z)

    return Function("recording", value, ((0.0, 1.0),), 0.0, 0.0)


def _pbt_settings(population: int, rounds: int) -> dict[str, Any]:
    return {
        "name": "pbt",
        "metric": "loss",
        "smaller_is_better": True,
        "population_size": population,
        "num_rounds": rounds,
        "replace_function": {"truncate_fraction": 0.5},
        "explore_function": {"resample_probability": 0.25, "perturb_factor": 0.2},
    }


def test_pbt_runs_every_round_to_its_shutdown_within_the_budget() -> None:
    sim = Simulator(
        _recording_function([]),
        _pbt_settings(population=4, rounds=3),
        max_length=MAX_LENGTH,
        seed=1,
        workers=2,
        budget=100.0,
        searcher_max_length=16,  # length_per_round
    )
    result = sim.run()
    assert result.end == "shutdown"  # not "stalled": every pause reached the searcher as TrialPaused
    assert result.trials == 4 + 2 * 2  # half the population replaced after each of the first two rounds
    assert math.isclose(result.compute, 4 * 3 * 16 / MAX_LENGTH)
    assert result.reports == 4 * 3


def test_a_warm_started_trial_continues_from_its_parents_effective_length() -> None:
    seen: list[float] = []
    sim = Simulator(
        _recording_function(seen),
        _pbt_settings(population=2, rounds=4),
        max_length=MAX_LENGTH,
        seed=3,
        workers=2,
        budget=100.0,
        searcher_max_length=16,
    )
    result = sim.run()
    # Every trial reports at its own 16, 32, ... but each round takes every lineage 16 further: the
    # fourth round is scored at full fidelity, whichever members were replaced on the way (the regret
    # of an incumbent is evaluated at z = 1 as well).
    assert sorted(z for z in seen if z < 1.0) == [0.25, 0.25, 0.5, 0.5, 0.75, 0.75]
    assert result.reports == 8
    assert result.full_length_reports == 2
    assert result.trajectory and result.trajectory[0].compute == 4 * 2 * 16 / MAX_LENGTH
    replaced = [t for t in sim.trials.values() if t.inherited > 0]
    assert replaced and all(t.length < MAX_LENGTH for t in replaced)


def test_searchers_that_do_not_observe_pauses_never_get_trial_paused() -> None:
    settings = {
        "name": "hyperband",
        "metric": "loss",
        "smaller_is_better": True,
        "max_trials": 64,
        "divisor": 4,
        "max_rungs": 3,
        "max_concurrent_trials": 2,
    }
    sim = Simulator(_recording_function([]), settings, max_length=MAX_LENGTH, seed=1, workers=2, budget=8.0)
    result = sim.run()
    assert not sim.observes_pauses
    assert result.end in ("budget", "shutdown")
    assert result.full_length_reports > 0
    assert not result.warnings
