"""One Ray Tune run (`ASHAScheduler` or `HyperBandScheduler`) on a `bench/sim/functions.py` function,
scored like `bench/sim/simulator.py`. Run it with the interpreter of a virtual environment that has
`ray[tune]` (Ray is not a dependency of the project), e.g.

    python3 -m venv /tmp/raybench && /tmp/raybench/bin/pip install 'ray[tune]'
    /tmp/raybench/bin/python bench/sim/ray_peer.py --scheduler asha --function branin --seed 1

It prints one JSON line, a `RunResult` (see `bench/sim/peers.py`, which runs it).

Each trial draws its configuration with Ray's `BasicVariantGenerator` (seeded), "trains" by jumping
to the next report length (1 and the rung lengths `max_length / divisor**k`), reports the function's
value there plus the simulator's noise, and checkpoints its length, so a trial that HyperBand pauses
resumes where it was. Ray runs `workers` trials at a time (one CPU each, `workers` CPUs). The budget is counted by a `Stopper` in the driver from the lengths the trials
reported (a trial resumed from its checkpoint is charged only what it trains on): it stops the whole
run once the budget is spent, and keeps the incumbent among results at `max_length`.
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
    parser.add_argument("--scheduler", choices=["asha", "hyperband"], required=True)
    parser.add_argument("--function", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--budget", type=float, default=64.0)
    parser.add_argument("--divisor", type=float, default=4.0)
    parser.add_argument("--max-rungs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    f = FUNCTIONS[args.function]
    max_length = args.max_length
    lowest = max(int(max_length / args.divisor ** (args.max_rungs - 1)), 1)
    lengths = sorted({1, *(max(int(max_length / args.divisor**k), 1) for k in range(args.max_rungs + 2))})
    seed = args.seed
    pauses = args.scheduler == "hyperband"  # HyperBand pauses trials and resumes them from a checkpoint

    def trainable(config: dict[str, Any]) -> None:
        x = tuple(float(config[f"x{i}"]) for i in range(f.dim))
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
            metrics = {"loss": f.value(x, length / max_length) + noise, "step": length, "x": list(x)}
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
            more = max(step - self.reached.get(trial_id, 0), 0) / max_length
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

    if args.scheduler == "asha":
        scheduler: Any = ASHAScheduler(
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
            num_samples=100_000,
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
