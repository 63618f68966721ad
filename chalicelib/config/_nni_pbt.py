"""NNI's `PBTTuner` translated into Stratus' `pbt` searcher (see `chalicelib.config._nni_tuner`).

NNI runs PBT in steps: each step, every member of the population runs the trial command once (the
trial code decides how long: NNI's example trains one epoch), loading its model from the
`load_checkpoint_dir` parameter and saving it to `save_checkpoint_dir`; between steps the worst
`ceil(fraction * population_size)` members take over a best member's checkpoint with perturbed
hyperparameters. NNI has no number of steps: the experiment ends at `maxTrialNumber` trials, each
step using `population_size` of them.

| NNI | Stratus `pbt` searcher |
|---|---|
| one step (one run of the trial command) | one round: `length_per_round: {epochs: 1}` (`ROUND_LENGTH`), which the `nni` stand-in completes when the trial code has reported its final result and exited (`stratus.harness.compat._nni_pbt`) |
| `maxTrialNumber` | `num_rounds` = `maxTrialNumber // population_size` (required: it is NNI's only bound on the steps) |
| `population_size` (default 10) | `population_size` |
| `fraction` (default 0.2) | `replace_function.truncate_fraction` such that the same number of members, `ceil(fraction * population_size)`, is replaced (at most half the population) |
| `factor` (default 0.2; NNI's validator spells it `factors`) | `explore_function.perturb_factor` (Stratus multiplies a value by `1 ± factor`; NNI adds `± factor` times the range) |
| `resample_probability` (default 0.25) | `explore_function.resample_probability` |
| `all_checkpoint_dir` | ignored with a warning: checkpoints live in the platform's storage (S3) |
| `trialConcurrency` | not used: each round starts the whole population, which runs as slots allow |
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from chalicelib.config._nni_versions import NniReader, dotted
from chalicelib.config.nni_space import is_int

# NNI's classArgs of PBTTuner (other than optimize_mode) with NNI's defaults; `factors` is the spelling
# of NNI's classArgs validator, `factor` the tuner's own.
PBT_ARGS: dict[str, Any] = {
    "population_size": 10,
    "factor": 0.2,
    "factors": None,
    "resample_probability": 0.25,
    "fraction": 0.2,
    "all_checkpoint_dir": None,
}
ROUND_LENGTH: dict[str, int] = {"epochs": 1}
"""One NNI PBT step: one run of the trial command, completed by the `nni` stand-in (not a validation
holding an `epochs` metric, which the trial code does not report)."""
_MAX_TRUNCATE_FRACTION = 0.5  # the pbt searcher's bound (replacing more than half makes no sense)


class PbtTranslator(NniReader):
    """The pbt searcher's settings for PBTTuner's `classArgs` and `maxTrialNumber`."""

    def settings(self, path: str, name_key: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The searcher keys for PBTTuner at `path` (`tuner` or `advisor`) with `classArgs` `args`."""
        where = dotted(path, "classArgs")
        values = {k: (d if args.get(k) is None else args[k]) for k, d in PBT_ARGS.items()}
        if args.get("factor") is None and args.get("factors") is not None:
            values["factor"] = args["factors"]
        if values["all_checkpoint_dir"] is not None:
            self.warn(
                dotted(where, "all_checkpoint_dir"),
                "ignored (checkpoints live in the platform's storage: the nni stand-in hands each trial "
                "load_checkpoint_dir and save_checkpoint_dir folders of its own and uploads what it saves)",
            )
        population = values["population_size"]
        if not is_int(population) or population < 1:
            self.problem(
                dotted(where, "population_size"),
                f"must be a whole number of trials (1 or more), got {population!r}",
            )
            return {}
        ok = True
        for key in ("factor", "resample_probability", "fraction"):
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                name = "factors" if key == "factor" and args.get("factor") is None else key
                self.problem(dotted(where, name), f"must be a number between 0 and 1, got {value!r}")
                ok = False
        rounds = self._rounds(int(population))
        if not ok or rounds is None:
            return {}
        self.warn(
            dotted(path, name_key),
            f"PBTTuner runs as Stratus' pbt searcher: {rounds} rounds of {population} members; each round "
            "runs the trial command once per member, and a member that goes on to the next round is the "
            "same trial (NNI starts a new trial for each step)",
        )
        if self.raw.get("trialConcurrency") is not None:
            self.warn(
                "trialConcurrency",
                f"not used with PBTTuner: each round starts the whole population ({population} trials), "
                "which runs as the resource pool's slots allow",
            )
        return {
            "population_size": int(population),
            "num_rounds": rounds,
            "length_per_round": dict(ROUND_LENGTH),
            "replace_function": {
                "truncate_fraction": self._truncate_fraction(where, values, int(population))
            },
            "explore_function": {
                "resample_probability": float(values["resample_probability"]),
                "perturb_factor": float(values["factor"]),
            },
        }

    def _rounds(self, population: int) -> int | None:
        """NNI's steps: `maxTrialNumber` trials, `population_size` per step."""
        key = self.names.max_trials
        value = self.raw.get(key)
        if value is None:
            self.problem(
                key,
                f"required with PBTTuner: Stratus' pbt searcher runs a set number of rounds of population_size "
                f"trials; set {key} to population_size ({population}) times the number of rounds",
            )
            return None
        if not is_int(value) or value < population:
            self.problem(
                key,
                f"must be at least population_size ({population}) with PBTTuner (one round), got {value!r}; "
                f"set it to population_size times the number of rounds",
            )
            return None
        rounds = int(value) // population
        if int(value) % population:
            self.warn(
                key,
                f"{value} is not a whole number of rounds of {population}: Stratus runs {rounds} rounds "
                f"({rounds * population} trial runs); NNI would stop partway through round {rounds + 1}",
            )
        return rounds

    def _truncate_fraction(self, where: str, values: Mapping[str, Any], population: int) -> float:
        """A fraction that replaces NNI's number of members, `ceil(fraction * population_size)`."""
        replaced = math.ceil(float(values["fraction"]) * population - 1e-9)
        if replaced / population > _MAX_TRUNCATE_FRACTION:
            replaced = int(_MAX_TRUNCATE_FRACTION * population)
            self.warn(
                dotted(where, "fraction"),
                f"{values['fraction']} replaces more than half the population; Stratus replaces "
                f"{replaced} of {population} (at most half)",
            )
        fraction = replaced / population
        if int(fraction * population) < replaced:  # float rounding: the searcher floors the product
            fraction = math.nextafter(fraction, 1.0)
        return fraction
