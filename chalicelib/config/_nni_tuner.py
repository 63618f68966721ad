"""NNI's tuner, advisor and assessor translated into a Stratus searcher (see `chalicelib.config.nni`):
TPE -> `tpe`, Random -> `random`, GridSearch and BatchTuner -> `grid`, PBTTuner -> `pbt` (its own
`classArgs` by `_nni_pbt.py`), Hyperband -> `hyperband`, BOHB -> `bohb` (their own arguments by
`_bracket_settings`), every other tuner -> `tpe` with a warning; `classArgs` -> the metric's direction
and the seed; an assessor -> a warning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from chalicelib.config._nni_pbt import PBT_ARGS, PbtTranslator
from chalicelib.config._nni_versions import NniReader, dotted
from chalicelib.config.nni_space import is_int
from chalicelib.config.sections import MAX_SEED

METRIC = "default"
"""The searcher metric: what `nni.report_final_result(x)` reports."""


# Normalised tuner name (lower case, letters and digits only) -> Stratus searcher.
_TUNERS: dict[str, str] = {
    "tpe": "tpe",
    "random": "random",
    "randomsearch": "random",
    "gridsearch": "grid",
    "batchtuner": "grid",
    "batch": "grid",
    "hyperband": "hyperband",
    "bohb": "bohb",
    "pbt": "pbt",
    "pbttuner": "pbt",
}
# NNI's classArgs of Hyperband and BOHB with their defaults (NNI's), read by `_bracket_settings`.
_BRACKET_ARGS: dict[str, dict[str, Any]] = {
    "hyperband": {"R": 60, "eta": 3, "exec_mode": "parallelism"},
    "bohb": {
        "min_budget": 1,
        "max_budget": 3,
        "eta": 3,
        "min_points_in_model": None,
        "top_n_percent": 15,
        "num_samples": 64,
        "random_fraction": 1 / 3,
        "bandwidth_factor": 3.0,
        "min_bandwidth": 0.001,
    },
}
# Searchers that can run without a number of trials (NNI's default: no maxTrialNumber).
UNTIL_STOPPED_SEARCHERS = frozenset({"random", "tpe", "hyperband", "bohb"})
_ASSESSORS_WITH_ASHA_HINT = frozenset({"medianstop", "curvefitting"})


class TunerTranslator(NniReader):
    """The `searcher` section (and seed, and tuner label) for an NNI config's tuning algorithm."""

    def searcher(self) -> tuple[dict[str, Any], str | None, int | None]:
        path, section, name_key = self._algorithm()
        if self.raw.get(path) is not None and section is None:
            self.problem(path, f"must be a mapping with {name_key} and classArgs")
        section = section or {}
        name = section.get(name_key)
        custom = next((section[k] for k in self.names.custom_class if section.get(k)), None)
        label: str | None
        if name is not None and not isinstance(name, str):
            self.problem(dotted(path, name_key), "must be the name of a tuner, e.g. TPE")
            name = None
        if name is not None:
            label = name
            searcher = self._searcher_for(path, name_key, name)
        elif custom is not None:
            label = str(section.get("className") or custom)
            self.warn(path, f"the custom tuner {label} cannot run on Stratus; using the tpe searcher")
            searcher = "tpe"
        else:
            label = None
            self.warn(path, "no tuner given; using the random searcher")
            searcher = "random"
        for key in section:
            if section[key] is None or key in (name_key, "classArgs"):
                continue
            if key in self.names.custom_class:
                if name is not None:  # a built-in tuner is named: the custom class is not used
                    self.warn(
                        dotted(path, key),
                        f"ignored (the built-in tuner {name} is used, as {name_key} names it)",
                    )
                continue
            why = (
                "the searcher runs in the control plane, on no GPU"
                if key in ("gpuIndices", "gpuNum")
                else "Stratus has no assessor, so no intermediate result is sent to the searcher"
                if key == "includeIntermediateResults"
                else "not a tuner setting Stratus knows"
            )
            self.warn(dotted(path, key), f"ignored ({why})")
        smaller_is_better, seed = self._class_args(path, section.get("classArgs"), searcher)
        out: dict[str, Any] = {"name": searcher, "metric": METRIC, "smaller_is_better": smaller_is_better}
        out.update(self._bracket_settings(path, section.get("classArgs"), searcher))
        if searcher == "pbt":  # rounds of a population instead of a number of trials
            args = section.get("classArgs")
            pbt = PbtTranslator(self.raw, self.version, self.warnings, self.problems)
            return out | pbt.settings(path, name_key, args if isinstance(args, Mapping) else {}), label, seed
        max_trials = self._max_trials(searcher)
        if max_trials is not None:
            out["max_trials"] = max_trials
        elif searcher in UNTIL_STOPPED_SEARCHERS and self.raw.get(self.names.max_trials) is None:
            out["until_stopped"] = True
        concurrency = self._concurrency()
        if concurrency is not None:
            out["max_concurrent_trials"] = concurrency
        return out, label, seed

    def _max_trials(self, searcher: str) -> int | None:
        key = self.names.max_trials
        value = self.raw.get(key)
        if searcher == "grid":
            if value is not None:
                self.warn(key, "ignored with GridSearch: the grid searcher runs every grid point once")
            return None
        if value is None and searcher not in UNTIL_STOPPED_SEARCHERS:
            self.problem(key, f"required by Stratus' {searcher} searcher: the number of trials to run")
            return None
        if value is None:
            self.warn(
                key,
                "not set: as in NNI, trials are created (trialConcurrency at a time) until the experiment "
                "is stopped with `det experiment cancel` or `det experiment kill`",
            )
            return None
        if not is_int(value) or value < 1:
            self.problem(key, "must be a whole number of trials (1 or more)")
            return None
        return int(value)

    def _concurrency(self) -> int | None:
        value = self.raw.get("trialConcurrency")
        if value is None:
            self.warn("trialConcurrency", "not set; Stratus runs up to 16 trials at once")
            return None
        if not is_int(value) or value < 1:
            self.problem("trialConcurrency", "must be a whole number of trials (1 or more)")
            return None
        return int(value)

    def _algorithm(self) -> tuple[str, Mapping[str, Any] | None, str]:
        """(path, section, name key) of the tuning algorithm: the advisor if set, else the tuner."""
        advisor = self.raw.get("advisor")
        if advisor is not None:
            if self.raw.get("tuner") is not None:
                self.warn("tuner", "ignored (the advisor is used instead, as NNI does)")
            return "advisor", advisor if isinstance(advisor, Mapping) else None, self.names.advisor_name
        tuner = self.raw.get("tuner")
        return "tuner", tuner if isinstance(tuner, Mapping) else None, self.names.tuner_name

    def _searcher_for(self, path: str, name_key: str, name: str) -> str:
        key = "".join(ch for ch in name.lower() if ch.isalnum())
        where = dotted(path, name_key)
        searcher = _TUNERS.get(key)
        if searcher is None:
            self.warn(where, f"the {name} tuner is not available in Stratus; using the tpe searcher")
            return "tpe"
        if key in ("batchtuner", "batch"):
            self.warn(
                where,
                "BatchTuner runs as the grid searcher: each value of its choice becomes one trial, "
                "found under that hyperparameter's name (NNI passes the value's keys at the top level)",
            )
        return searcher

    def _class_args(self, path: str, args: Any, searcher: str) -> tuple[bool, int | None]:
        where = dotted(path, "classArgs")
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            self.problem(where, "must be a mapping of the tuner's arguments")
            args = {}
        mode = args.get("optimize_mode")
        smaller_is_better = True
        if mode is None:
            self.warn(
                dotted(where, "optimize_mode"),
                f"not set; Stratus assumes minimize (a smaller `{METRIC}` metric is better); "
                "set optimize_mode: maximize if larger is better",
            )
        elif mode in ("maximize", "minimize"):
            smaller_is_better = mode == "minimize"
        else:
            self.problem(dotted(where, "optimize_mode"), "must be maximize or minimize")
        seed: int | None = None
        for key, value in args.items():
            if (
                key == "optimize_mode"
                or value is None
                or key in _BRACKET_ARGS.get(searcher, {})
                or (searcher == "pbt" and key in PBT_ARGS)
            ):
                continue
            if key == "seed" and is_int(value) and 0 <= value <= MAX_SEED:
                seed = int(value)
                continue
            why = (
                f"must be a whole number between 0 and {MAX_SEED} to become reproducibility.experiment_seed"
                if key == "seed"
                else f"no equivalent in Stratus' {searcher} searcher"
            )
            self.warn(dotted(where, str(key)), f"ignored ({why})")
        return smaller_is_better, seed

    def _bracket_settings(self, path: str, args: Any, searcher: str) -> dict[str, Any]:
        """Hyperband's `R` / BOHB's `max_budget` -> `max_length` (in the unit of NNI's `TRIAL_BUDGET`,
        which the trial reads from its parameters), `eta` -> `divisor`, BOHB's `min_budget` ->
        `max_rungs`, BOHB's model arguments as they are."""
        if searcher not in _BRACKET_ARGS:
            return {}
        where = dotted(path, "classArgs")
        given = args if isinstance(args, Mapping) else {}
        values = {
            k: (default if given.get(k) is None else given[k])
            for k, default in _BRACKET_ARGS[searcher].items()
        }
        for key, value in values.items():
            if key == "exec_mode":
                if value not in ("serial", "parallelism"):
                    self.problem(dotted(where, key), "must be serial or parallelism")
                elif value == "serial":
                    self.warn(
                        dotted(where, key),
                        "serial: Stratus runs brackets side by side within trialConcurrency, as parallelism",
                    )
            elif value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                self.problem(dotted(where, key), f"must be a number, got {value!r}")
                return {}
        top = "R" if searcher == "hyperband" else "max_budget"
        if not is_int(values[top]) or values[top] < 1:
            self.problem(dotted(where, top), "must be a whole number of budget units (1 or more)")
            return {}
        if values["eta"] < 2:
            self.problem(dotted(where, "eta"), "must be at least 2")
            return {}
        out: dict[str, Any] = {"max_length": {"batches": int(values[top])}, "divisor": float(values["eta"])}
        if searcher == "bohb":
            low = values["min_budget"]
            if not 0 < low <= values[top]:
                self.problem(
                    dotted(where, "min_budget"), f"must be above 0 and at most max_budget ({values[top]})"
                )
                return {}
            out["max_rungs"] = (
                int(math.floor(math.log(values[top] / low) / math.log(values["eta"]) + 1e-9)) + 1
            )
            for key in ("top_n_percent", "num_samples", "min_points_in_model"):
                if values[key] is not None:
                    out[key] = int(values[key])
            for key in ("random_fraction", "bandwidth_factor", "min_bandwidth"):
                out[key] = float(values[key])
        if self.raw.get(self.names.max_trials) is not None:
            self.warn(
                self.names.max_trials,
                f"counts configurations: with {searcher}, a configuration promoted to a larger budget goes on "
                "as the same trial (NNI starts a new trial for it)",
            )
        return out

    def assessor(self) -> str | None:
        assessor = self.raw.get("assessor")
        if assessor is None:
            return None
        name_key = self.names.assessor_name
        name = assessor.get(name_key) if isinstance(assessor, Mapping) else None
        if not isinstance(name, str) and isinstance(assessor, Mapping):
            name = assessor.get("className")
        label = name if isinstance(name, str) else "custom"
        key = "".join(ch for ch in label.lower() if ch.isalnum())
        why = f"Stratus has no assessor, so the {label} assessor stops no trial early"
        if key in _ASSESSORS_WITH_ASHA_HINT:
            why += "; for early stopping, use Stratus' adaptive_asha searcher instead"
        self.warn("assessor", f"ignored ({why})")
        return label
