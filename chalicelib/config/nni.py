"""Importing NNI experiment configs: NNI's YAML (legacy v1 and v2) translated into a Stratus config.

Pure (standard library only). `stratus.contract.nni.is_nni_config(raw)` tells an NNI config from a Determined
one by its keys (the CLI asks the same); `translate_nni(raw, search_space)` returns the Determined-style
mapping that `parse_experiment_config` validates, plus a warning for everything that did not translate
exactly.
Problems (no trial command, no search space, a malformed search-space entry) raise
`ConfigInvalidError`, with paths in NNI's own field names (`trialCommand`, `searchSpace.lr._value`).

Translation (v1 name / v2 name -> Stratus; where each version keeps what, and why the fields without
an equivalent have none, is `_nni_versions.py`):

- `experimentName` -> `name`; `trial.command` / `trialCommand` -> `entrypoint`.
- the search space (`searchSpace`, inlined from `searchSpacePath` / `searchSpaceFile` by the CLI)
  -> `hyperparameters`, translated by `chalicelib.config.nni_space` (whose docstring has the table
  of NNI types).
- tuner (`tuner.builtinTunerName` / `tuner.name`, or the advisor; by `_nni_tuner.py`) ->
  `searcher.name`: TPE -> `tpe`, Random -> `random`, GridSearch -> `grid` (int axes of at most `GRID_INT_LIMIT` values in full,
  other axes `GRID_COUNT` evenly spaced values, with a warning), BatchTuner -> `grid` (warning),
  PBTTuner -> `pbt` (rounds from `maxTrialNumber`, by `_nni_pbt.py`);
  Hyperband -> `hyperband`, BOHB -> `bohb` (`R` / `max_budget` -> `max_length`, `eta` -> `divisor`,
  BOHB's `min_budget` -> `max_rungs`, its model arguments as they are; the trial reads its budget as
  `TRIAL_BUDGET`); every other tuner (Anneal, Evolution, SMAC, Metis, GP, DNGO, custom
  tuners, ...) -> `tpe` with a warning naming it; no tuner -> `random` (warning).
  `searcher.metric` is `default` (what `nni.report_final_result(x)` reports);
  `classArgs.optimize_mode: maximize` -> `smaller_is_better: false` (minimize, and unset with a
  warning, -> true); `classArgs.seed` -> `reproducibility.experiment_seed`.
- `maxTrialNum` / `maxTrialNumber` -> `searcher.max_trials` (ignored with GridSearch); unset, the
  random, tpe, hyperband and bohb searchers run `until_stopped` (as NNI: trials keep coming, Hyperband's
  iterations repeat, until the experiment is stopped or its time limit passes); `trialConcurrency` -> `searcher.max_concurrent_trials` (unset:
  Stratus' default, with a warning).
- `maxExperimentDuration` / `maxExecDuration` (`"2h"`, `"30m"`, seconds) -> the experiment's time
  limit, `data.nni.max_experiment_duration_s` (`ExperimentConfig.past_time_limit`).
- `trial.gpuNum` / `trialGpuNumber` -> `resources.slots_per_trial` (0 -> 1, with a note: the slot is
  then a CPU slot); `trial.image` (v1) -> `environment.image`. Kubeflow / FrameworkController
  roles (`trial.worker`, `trial.taskRoles`, ...) are `_nni_roles.py`'s; the AdaptDL training service
  (`trainingServicePlatform: adl`, v2 `trainingService.platform: adl`) makes an elastic trial
  (`elastic`, under `stratus.launchers.adaptdl`): `_nni_adl.py`'s.
- v2 field names are read ignoring case and underscores, as NNI does (`trial_command`,
  `tuner.class_args`: `stratus.contract.nni.canonical_nni_keys`).
- `max_restarts: 0` (NNI does not retry failed trials), and `data.nni` records the origin:
  `{"version": 1 or 2, "tuner": <NNI's tuner name>}` (plus `"assessor"` when one was set).
- An assessor (Medianstop, Curvefitting, ...) -> warning: Stratus stops no trial early; its
  adaptive_asha searcher is the way to early-stop.
- Every other NNI field (durations, training service, annotation, logging, manager address, ...)
  -> a warning naming it and why it has no equivalent, whenever it is given (null means unset, as
  in NNI); keys that are not NNI fields -> a warning. The trial code folder (`trial.codeDir` /
  `trialCodeDirectory`) is the CLI's: it packs it as the context when none is given.
- Top-level sections of a Stratus config other than `entrypoint`, `searcher` and `hyperparameters`
  (`resources`, `environment`, `checkpoint_storage`, `description`, `labels`, ...) may be added to
  an NNI config (e.g. `det e create nni.yml --config resources.resource_pool=gpu`): they are kept
  and win over the translated values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chalicelib.config._nni_adl import AdlTranslator, is_adl
from chalicelib.config._nni_roles import RoleTranslator
from chalicelib.config._nni_tuner import TunerTranslator
from chalicelib.config._nni_versions import PASS_THROUGH, NniReader, dotted
from chalicelib.config.errors import ConfigInvalidError, ConfigProblem
from chalicelib.config.nni_space import GRID_COUNT, GRID_INT_LIMIT, MAX_GRID_POINTS, SpaceTranslator
from stratus.contract.nni import canonical_nni_keys, nni_config_version

__all__ = [
    "GRID_COUNT",
    "GRID_INT_LIMIT",
    "MAX_GRID_POINTS",
    "NniTranslation",
    "translate_nni",
]


@dataclass(frozen=True)
class NniTranslation:
    """A Stratus config mapping translated from an NNI config, and what did not translate."""

    config: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)\s*$", re.IGNORECASE)
_SECONDS_PER = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def nni_duration_seconds(value: Any) -> int | None:
    """Seconds of an NNI duration (`90`, `"30m"`, `"1.5h"`, `"2d"`), or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value) if value > 0 and math.isfinite(value) else None
    match = _DURATION.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    seconds = int(float(match.group(1)) * _SECONDS_PER[match.group(2).lower()])
    return seconds if seconds > 0 else None


def translate_nni(raw: Mapping[str, Any], search_space: Mapping[str, Any] | None = None) -> NniTranslation:
    """The Stratus config for an NNI config, with warnings; ConfigInvalidError lists every problem.

    `search_space` is NNI's search space (the API passes `raw["searchSpace"]`, which the CLI fills
    from the search-space file); None means the config's own `searchSpace` (`search_space`), if any.
    A v2 config's field names may be written in any case, with or without underscores, as NNI allows
    (`trial_command`, `tuner.class_args`).
    """
    if not isinstance(raw, Mapping):
        raise ConfigInvalidError([ConfigProblem("<config>", "an NNI config must be a mapping")])
    version = nni_config_version(raw)
    if version == 2:
        raw = canonical_nni_keys(raw)  # NNI v2 ignores case and underscores in its field names
    if search_space is None:
        search_space = raw.get("searchSpace")
    return _Translator(raw, version).translate(search_space)


class _Translator(NniReader):
    """Translates one NNI config; its tuner and search space are delegated to a `TunerTranslator` and
    a `SpaceTranslator` sharing the same warnings and problems lists."""

    def __init__(self, raw: Mapping[str, Any], version: int) -> None:
        super().__init__(raw, version, [], [])
        self.tuner = TunerTranslator(raw, version, self.warnings, self.problems)
        self.space = SpaceTranslator(self.warnings, self.problems)
        self.roles = RoleTranslator(raw, version, self.warnings, self.problems)
        self.adl = AdlTranslator(raw, version, self.warnings, self.problems) if is_adl(raw, version) else None

    def translate(self, search_space: Mapping[str, Any] | None) -> NniTranslation:
        config: dict[str, Any] = {}
        name = self.raw.get("experimentName")
        if name is not None:
            if isinstance(name, str) and name.strip():
                config["name"] = name
            else:
                self.problem("experimentName", "must be a non-empty string")
        by_role = self.get(self.names.command) is None and self.roles.section() is not None
        role_trial = self.roles.trial() if by_role else None
        config["entrypoint"] = (
            role_trial.entrypoint if role_trial else None if by_role else self._entrypoint()
        )
        before = len(self.problems)
        config["hyperparameters"] = self._search_space(search_space)
        custom = self._custom_algorithm()
        if custom is not None and len(self.problems) > before:
            path, class_name = custom
            message = (
                f"the custom {path.split('.')[0]} {class_name} cannot run on Stratus, so its search space "
                "must be NNI's standard one ({_type, _value} entries), searched by Stratus' tpe searcher"
            )
            self.problems.insert(before, ConfigProblem(path, message))  # the cause first
        searcher, tuner_label, seed = self.tuner.searcher()
        if searcher.get("name") == "grid":
            self.space.grid_counts(config["hyperparameters"])
        config["searcher"] = searcher
        if self.adl is None:
            config["resources"] = {
                "slots_per_trial": role_trial.slots
                if role_trial
                else self.gpu_slots("trial", "resources.slots_per_trial")
            }
        config["max_restarts"] = 0
        if seed is not None:
            config["reproducibility"] = {"experiment_seed": seed}
        image = self.get(("trial", "image")) if self.version == 1 else None
        if role_trial is not None and role_trial.image is not None:
            image = role_trial.image
        if image is not None:
            config["environment"] = {"image": image}
        record: dict[str, Any] = {"version": self.version, "tuner": tuner_label}
        duration = self._max_duration()
        if duration is not None:
            record["max_experiment_duration_s"] = duration
        assessor = self.tuner.assessor()
        if assessor is not None:
            record["assessor"] = assessor
        config["data"] = {"nni": record}
        if self.adl is not None:
            self.adl.apply(config)
        self.unmapped_fields(self.adl.handled() if self.adl is not None else frozenset())
        self._pass_through(config)
        if self.problems:
            raise ConfigInvalidError(self.problems)
        return NniTranslation(config=config, warnings=self.warnings)

    def _entrypoint(self) -> Any:
        path = dotted(*self.names.command)
        command = self.get(self.names.command)
        template = self.get(("frameworkcontrollerConfig", "configPath")) if self.version == 1 else None
        if command is None and template is not None:
            self.problem(
                path,
                f"required: this config's task roles are in the FrameworkController template {template} "
                "(frameworkcontrollerConfig.configPath), which Stratus does not read; give trial.taskRoles "
                "or trial.command",
            )
        elif command is None:
            self.problem(path, "required: the command that runs one trial, e.g. python3 mnist.py")
        elif not isinstance(command, str) or not command.strip():
            self.problem(path, "must be a non-empty command string")
        return command

    def _max_duration(self) -> int | None:
        """NNI's experiment time limit in seconds (`maxExperimentDuration`, v1 `maxExecDuration`):
        checked and recorded in `data.nni`, where `ExperimentConfig.past_time_limit` reads it: the searching
        service ends the experiment at the first trial event after it."""
        key = self.names.max_duration
        value = self.raw.get(key)
        if value is None:
            return None
        seconds = nni_duration_seconds(value)
        if seconds is None:
            self.problem(key, 'must be a duration like "30m", "2h" or "1d" (or a number of seconds)')
            return None
        self.warn(
            key,
            f"the experiment's time limit, {seconds} s (data.nni.max_experiment_duration_s): once it has "
            "passed, the next trial event creates no more trials and stops the running ones",
        )
        return seconds

    def _pass_through(self, config: dict[str, Any]) -> None:
        for key in sorted(PASS_THROUGH & {k for k in self.raw if isinstance(k, str)}):
            value = self.raw[key]
            translated = config.get(key)
            if isinstance(translated, dict) and isinstance(value, Mapping):
                merged = {**translated, **value}
                gpus_given = self.get(self.names.gpus) is not None
                slots = merged.get("slots_per_trial")
                if key == "resources" and gpus_given and slots != translated.get("slots_per_trial"):
                    self.warn(
                        "resources.slots_per_trial",
                        f"overrides {dotted(*self.names.gpus)} (given both)",
                    )
                if key == "data":
                    merged["nni"] = translated["nni"]
                config[key] = merged
            else:
                config[key] = value

    def _custom_algorithm(self) -> tuple[str, str] | None:
        """(path of its className, className) of a custom tuner or advisor (no built-in name), or None."""
        for section in ("advisor", "tuner"):
            node = self.raw.get(section)
            if isinstance(node, Mapping):
                name = node.get(self.names.tuner_name)
                class_name = node.get("className")
                if name is None and isinstance(class_name, str):
                    return f"{section}.className", class_name
                return None
        return None

    def _search_space(self, space: Mapping[str, Any] | None) -> dict[str, Any]:
        file_key = self.names.space_file
        if space is None:
            annotated = self.raw.get("useAnnotation") is True
            if annotated:
                self.problem(
                    "useAnnotation",
                    "Stratus cannot build a search space from NNI annotations; write it with "
                    f"`nnictl ss_gen` and set {file_key}",
                )
            elif self.raw.get(file_key) is not None:
                self.problem(
                    file_key,
                    "the API cannot read files: send the search space inline as searchSpace "
                    "(`det experiment create` does this)",
                )
            else:
                where = "searchSpacePath" if self.version == 1 else "searchSpace"
                self.problem(
                    where,
                    "required: the search space, a mapping of names to {_type, _value} "
                    f"(give searchSpace, or {file_key} with `det experiment create`)",
                )
            return {}
        if self.version == 2 and self.raw.get("searchSpaceFile") is not None and "searchSpace" in self.raw:
            self.problem("searchSpaceFile", "give either searchSpace or searchSpaceFile, not both")
        return self.space.hyperparameters(space)
