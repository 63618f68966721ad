"""The peers' own multi-fidelity searchers on the same functions, noise, budget and rung lengths as
`bench/sim/simulator.py`, scored the same way (compute in `max_length` units, noiseless full-fidelity
regret of the incumbent, the best reported metric at `max_length`).

- `optuna_bohb`: Optuna's `TPESampler` with its `HyperbandPruner` (min_resource = the lowest rung
  length, max_resource = `max_length`, reduction_factor = the divisor), Optuna's documented way of
  running BOHB. A trial reports at each rung length; a pruned trial's compute is the length it reached.
- `ray_asha` / `ray_hyperband`: Ray Tune's `ASHAScheduler` and `HyperBandScheduler`, run by
  `bench/sim/ray_peer.py` in a separate virtual environment (Ray is not a dependency of the project).

The peers run their trials one after another in this process (Optuna) or under Ray's own concurrency
(4 trials), not on the simulated clock, so only compute is comparable; their "simulated time" is
reported as compute / workers, what perfect parallelism on the same workers would give.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.sim.functions import FUNCTIONS, Function
from bench.sim.simulator import Point, RunResult

PEERS = ("optuna_bohb", "ray_asha", "ray_hyperband")
ROOT = Path(__file__).resolve().parents[2]


def noise(function: Function, seed: int, trial: int, length: int) -> float:
    """The simulator's observation noise for (seed, trial, length)."""
    return random.Random(f"noise:{seed}:{trial}:{length}").gauss(0.0, function.noise_std)


def rung_lengths(max_length: int, divisor: float, max_rungs: int) -> list[int]:
    lengths = {max(int(max_length / divisor**k), 1) for k in range(max_rungs)}
    return sorted(lengths)


class Scorer:
    """Compute, incumbent and trajectory, updated as results arrive."""

    def __init__(self, function: Function, max_length: int, budget: float, workers: int) -> None:
        self.f = function
        self.max_length = max_length
        self.budget = budget
        self.workers = workers
        self.compute = 0.0
        self.best: float | None = None
        self.trajectory: list[Point] = []
        self.reports = 0
        self.full = 0

    @property
    def exhausted(self) -> bool:
        return self.compute >= self.budget - 1e-12

    def train(self, length: float) -> float:
        """Train `length` more; returns how much of it the budget allowed."""
        allowed = min(length / self.max_length, self.budget - self.compute)
        self.compute += max(allowed, 0.0)
        return allowed * self.max_length

    def report(self, x: tuple[float, ...], length: int, metric: float) -> None:
        self.reports += 1
        if length >= self.max_length:
            self.full += 1
            if self.best is None or metric < self.best:
                self.best = metric
                self.trajectory.append(Point(self.compute, self.compute / self.workers, self.f.regret(x)))


def optuna_bohb(
    function_name: str,
    seed: int,
    *,
    max_length: int,
    budget: float,
    divisor: float,
    max_rungs: int,
    workers: int,
) -> RunResult:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    f = FUNCTIONS[function_name]
    lengths = rung_lengths(max_length, divisor, max_rungs)
    scorer = Scorer(f, max_length, budget, workers)
    pruner = optuna.pruners.HyperbandPruner(
        min_resource=lengths[0], max_resource=max_length, reduction_factor=int(divisor)
    )
    study = optuna.create_study(
        direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed), pruner=pruner
    )

    def objective(trial: optuna.Trial) -> float:
        x = tuple(trial.suggest_float(f"x{i}", lo, hi) for i, (lo, hi) in enumerate(f.bounds))
        reached = 0
        metric = float("inf")
        for length in lengths:
            trained = scorer.train(length - reached)
            if trained < length - reached - 1e-9:
                study.stop()  # the budget ran out on the way
                raise optuna.TrialPruned()
            reached = length
            metric = f.value(x, length / max_length) + noise(f, seed, trial.number + 1, length)
            scorer.report(x, length, metric)
            if length >= max_length:
                break
            trial.report(metric, length)
            if trial.should_prune():
                raise optuna.TrialPruned()
        if scorer.exhausted:
            study.stop()
        return metric

    study.optimize(objective, n_trials=100_000, gc_after_trial=False)
    return RunResult(
        searcher="optuna_bohb",
        function=function_name,
        seed=seed,
        budget=budget,
        end="budget" if scorer.exhausted else "shutdown",
        compute=scorer.compute,
        time=scorer.compute / workers,
        trials=len(study.trials),
        full_length_reports=scorer.full,
        reports=scorer.reports,
        runs_started=len(study.trials),
        trajectory=scorer.trajectory,
    )


def ray_run(
    python: str,
    scheduler: str,
    function_name: str,
    seed: int,
    *,
    max_length: int,
    budget: float,
    divisor: float,
    max_rungs: int,
    workers: int,
) -> RunResult:
    """One Ray Tune run through `ray_peer.py` under `python` (the interpreter of Ray's venv)."""
    command = [
        python,
        str(ROOT / "bench" / "sim" / "ray_peer.py"),
        *("--scheduler", scheduler, "--function", function_name, "--seed", str(seed)),
        *("--max-length", str(max_length), "--budget", str(budget), "--divisor", str(divisor)),
        *("--max-rungs", str(max_rungs), "--workers", str(workers)),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    data: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    trajectory = [Point(*p) for p in data.pop("trajectory")]
    return RunResult(**data, trajectory=trajectory)


if __name__ == "__main__":  # a quick look: python bench/sim/peers.py FUNCTION SEED
    sys.path.insert(0, str(ROOT))
    result = optuna_bohb(
        sys.argv[1], int(sys.argv[2]), max_length=1024, budget=64, divisor=4, max_rungs=5, workers=4
    )
    print(result.end, result.trials, result.compute, result.final_regret)
