"""One Ray Tune run (`ASHAScheduler`, `HyperBandScheduler` or `PopulationBasedTraining`) on a `bench/sim/functions.py` function,
scored like `bench/sim/simulator.py`. Run it with the interpreter of a virtual environment that has
`ray[tune]` (Ray is not a dependency of the project), e.g.

    python3 -m venv .raybench && .raybench/bin/pip install 'ray[tune]'
    .raybench/bin/python bench/sim/ray_peer.py --scheduler asha --function branin --seed 1

It prints one JSON line, a `RunResult` (see `bench/sim/peers.py`, which runs it).

Each trial draws its configuration with Ray's `BasicVariantGenerator` (seeded), "trains" by jumping
to the next report length (1 and the rung lengths `max_length / divisor**k`), reports the function's
value there plus the simulator's noise, and checkpoints its length, so a trial that HyperBand pauses
resumes where it was. Ray runs `workers` trials at a time (one CPU each, `workers` CPUs). The budget is counted by a `Stopper` in the driver from the lengths the trials
reported (a trial resumed from its checkpoint is charged only what it trains on): it stops the whole
run once the budget is spent, and keeps the incumbent among results at `max_length`.

`--scheduler pbt`: Ray's `PopulationBasedTraining` with the settings of `search_quality.py`'s `pbt` line
(`--population` trials, a perturbation every `--length-per-round`, `synch=True` like Determined's
rounds, `quantile_fraction` = truncate_fraction, `resample_probability` 0.25, factors 1.2 and 0.8), each
trial stopped at `--rounds` x `--length-per-round`. A trial that exploits another resumes from that
trial's checkpoint, so its length (the fidelity its metric is taken at, capped at `max_length`) continues
from the donor's, as the simulator models Stratus' warm-started trials; the budget counts only what a
trial trains itself. Perturbed values are clipped to the function's domain in the trainable.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.sim.functions import FUNCTIONS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scheduler", choices=["asha", "hyperband", "pbt"], required=True)
    parser.add_argument("--function", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--budget", type=float, default=64.0)
    parser.add_argument("--divisor", type=float, default=4.0)
    parser.add_argument("--max-rungs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--population", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--length-per-round", type=int, default=256)
    parser.add_argument("--truncate", type=float, default=0.25)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler, PopulationBasedTraining
    from ray.tune.search.basic_variant import BasicVariantGenerator

    f = FUNCTIONS[args.function]
    max_length = args.max_length
    lowest = max(int(max_length / args.divisor ** (args.max_rungs - 1)), 1)
    lengths = sorted({1, *(max(int(max_length / args.divisor**k), 1) for k in range(args.max_rungs + 2))})
    seed = args.seed
    pbt = args.scheduler == "pbt"
    if pbt:  # a report at the end of every round
        lengths = [args.length_per_round * k for k in range(1, args.rounds + 1)]
    # HyperBand pauses trials and PBT clones them: both resume from a checkpoint of their length
    pauses = args.scheduler in ("hyperband", "pbt")

    def trainable(config: dict[str, Any]) -> None:
        x = tuple(min(max(float(config[f"x{i}"]), lo), hi) for i, (lo, hi) in enumerate(f.bounds))
        number = int(tune.get_context().get_trial_id().rsplit("_", 1)[-1]) + 1
        reached = 0
        checkpoint = tune.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                reached = int(Path(folder, "length").read_text())
        for length in lengths:
            if length <= reached:
                continue
            noise = random.Random(f"noise:{seed}:{number}:{length}").gauss(0.0, f.noise_std)
            z = min(length, max_length) / max_length
            metrics = {
                "loss": f.value(x, z) + noise,
                "step": length,
                "x": list(x),
                "trained": length - reached,
            }
            reached = length
            if not pauses:  # ASHA only stops trials: no checkpoint needed
                tune.report(metrics)
                continue
            with tempfile.TemporaryDirectory() as folder:
                Path(folder, "length").write_text(str(length))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))

    class Budget(tune.Stopper):
        def __init__(self) -> None:
            self.reached: dict[str, int] = {}
            self.compute = 0.0
            self.best: float | None = None
            self.trajectory: list[list[float]] = []
            self.reports = 0
            self.full = 0
            self.done = False

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            if self.done:
                return True
            step = int(result["step"])
            more = int(result["trained"]) / max_length  # not what a clone took from its donor
            if self.compute + more > args.budget + 1e-9:
                self.compute, self.done = args.budget, True  # the budget ran out during this stretch
                return True
            self.compute += more
            self.reached[trial_id] = max(step, self.reached.get(trial_id, 0))
            self.reports += 1
            if step >= max_length:
                self.full += 1
                if self.best is None or result["loss"] < self.best:
                    self.best = float(result["loss"])
                    regret = f.regret(tuple(result["x"]))
                    self.trajectory.append([self.compute, self.compute / args.workers, regret])
            self.done = self.compute >= args.budget - 1e-12
            return False

        def stop_all(self) -> bool:
            return self.done

    if pbt:
        random.seed(seed)  # PBT's exploit and explore draw from the module's generator
        scheduler: Any = PopulationBasedTraining(
            time_attr="step",
            perturbation_interval=args.length_per_round,
            hyperparam_mutations={f"x{i}": tune.uniform(lo, hi) for i, (lo, hi) in enumerate(f.bounds)},
            quantile_fraction=args.truncate,
            resample_probability=0.25,
            perturbation_factors=(1.2, 0.8),
            synch=True,
        )
    elif args.scheduler == "asha":
        scheduler = ASHAScheduler(
            time_attr="step", max_t=max_length, grace_period=lowest, reduction_factor=args.divisor
        )
    else:
        scheduler = HyperBandScheduler(time_attr="step", max_t=max_length, reduction_factor=args.divisor)
    budget = Budget()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    storage = tempfile.mkdtemp(prefix="raybench-")
    tuner = tune.Tuner(
        trainable,
        param_space={f"x{i}": tune.uniform(lo, hi) for i, (lo, hi) in enumerate(f.bounds)},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            scheduler=scheduler,
            # Concurrency comes from the CPUs (one per trial, `workers` of them): a searcher-side limit
            # would count HyperBand's paused trials and starve its brackets, which then never halve.
            search_alg=BasicVariantGenerator(random_state=seed),
            num_samples=args.population if pbt else 100_000,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(stop=budget, verbose=0, storage_path=storage, log_to_file=False),
    )
    warnings: list[str] = []
    try:
        trials = len(tuner.fit())
    except RuntimeError as error:  # Ray 2.60 cannot list trials that never started once the run stops
        trials = len(budget.reached)
        warnings.append(f"Ray's result grid failed ({error}); trials counts those that reported")
    print(
        json.dumps(
            {
                "searcher": f"ray_{args.scheduler}",
                "function": args.function,
                "seed": seed,
                "budget": args.budget,
                "end": "budget" if budget.done else "shutdown",
                "compute": budget.compute,
                "time": budget.compute / args.workers,
                "trials": trials,
                "full_length_reports": budget.full,
                "reports": budget.reports,
                "runs_started": trials,
                "trajectory": budget.trajectory,
                "warnings": warnings,
            }
        )
    )


if __name__ == "__main__":
    main()
