"""Importing NNI experiment configs: NNI's YAML (legacy v1 and v2) translated into a Stratus config.

Pure (standard library only). `contract.nni.is_nni_config(raw)` tells an NNI config from a Determined
one by its keys (the CLI asks the same); `translate_nni(raw, search_space)` returns the Determined-style
mapping that `parse_experiment_config` validates, plus a warning for everything that did not translate
exactly.
Problems (no trial command, no search space, a malformed search-space entry) raise
`ConfigInvalidError`, with paths in NNI's own field names (`trialCommand`, `searchSpace.lr._value`).

Translation (v1 name / v2 name -> Stratus):

- `experimentName` -> `name`; `trial.command` / `trialCommand` -> `entrypoint`.
- the search space (`searchSpace`, inlined from `searchSpacePath` / `searchSpaceFile` by the CLI)
  -> `hyperparameters`, translated by `chalicelib.config.nni_space` (whose docstring has the table
  of NNI types).
- tuner (`tuner.builtinTunerName` / `tuner.name`, or the advisor) -> `searcher.name`: TPE -> `tpe`,
  Random -> `random`, GridSearch -> `grid` (int axes of at most `GRID_INT_LIMIT` values in full,
  other axes `GRID_COUNT` evenly spaced values, with a warning), BatchTuner -> `grid` (warning);
  every other tuner (Anneal, Evolution, SMAC, BOHB, Hyperband, Metis, GP, PBT, DNGO, custom
  tuners, ...) -> `tpe` with a warning naming it; no tuner -> `random` (warning).
  `searcher.metric` is `default` (what `nni.report_final_result(x)` reports);
  `classArgs.optimize_mode: maximize` -> `smaller_is_better: false` (minimize, and unset with a
  warning, -> true); `classArgs.seed` -> `reproducibility.experiment_seed`.
- `maxTrialNum` / `maxTrialNumber` -> `searcher.max_trials` (required, except with GridSearch);
  `trialConcurrency` -> `searcher.max_concurrent_trials` (unset: Stratus' default, with a warning).
- `trial.gpuNum` / `trialGpuNumber` -> `resources.slots_per_trial` (0 -> 1, with a note: the slot is
  then a CPU slot); `trial.image` (v1) -> `environment.image`.
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chalicelib.config.errors import ConfigInvalidError, ConfigProblem
from chalicelib.config.nni_space import GRID_COUNT, GRID_INT_LIMIT, MAX_GRID_POINTS, SpaceTranslator, is_int
from chalicelib.config.schema import MAX_SEED, ExperimentConfig
from contract.nni import DETERMINED_SECTIONS, TRAINING_SERVICE_SECTIONS, nni_config_version

__all__ = [
    "GRID_COUNT",
    "GRID_INT_LIMIT",
    "MAX_GRID_POINTS",
    "NniTranslation",
    "translate_nni",
]

METRIC = "default"

# Stratus sections an NNI config may carry through (see the module docstring).
# (`debug` is NNI's too, where it means the NNI manager's debug mode: warned about, not kept.)
_PASS_THROUGH = frozenset(ExperimentConfig.model_fields) - DETERMINED_SECTIONS - {"debug"}

_COMPUTE = "Stratus runs trials on its own compute backends; resources.resource_pool picks one"
_NO_EXPERIMENT_LIMIT = "Stratus has no experiment time limit; the experiment ends after {trials} trials"
_LOGS = "trial logs go to CloudWatch and checkpoints to S3"

# NNI field -> why it has no equivalent. `{trials}` is the version's max-trials field.
_IGNORED_V2: dict[str, str] = {
    "maxExperimentDuration": _NO_EXPERIMENT_LIMIT,
    "maxTrialDuration": "Stratus has no per-trial time limit; let the trial script stop itself",
    "trainingService": _COMPUTE,
    "nniManagerIp": "trials talk to the Stratus API, there is no NNI manager",
    "useAnnotation": "Stratus cannot read NNI annotations; give the search space in searchSpace or "
    "searchSpaceFile (`nnictl ss_gen` writes it from the annotations)",
    "debug": "NNI's debug mode has no Stratus equivalent",
    "logLevel": "Stratus' log level is not set per experiment; " + _LOGS,
    "experimentWorkingDirectory": _LOGS,
    "tunerGpuIndices": "the searcher runs in the control plane, on no GPU",
    "sharedStorage": "trials share files through S3 (checkpoints), not a mounted storage",
    "experimentType": "only hyperparameter searches are imported",
}
_IGNORED_V1: dict[str, str] = {
    "authorName": "the submitting user is recorded as the experiment's owner",
    "maxExecDuration": _NO_EXPERIMENT_LIMIT,
    "maxTrialDuration": _IGNORED_V2["maxTrialDuration"],
    "trainingServicePlatform": _COMPUTE,
    "nniManagerIp": _IGNORED_V2["nniManagerIp"],
    "useAnnotation": _IGNORED_V2["useAnnotation"].replace(
        "searchSpace or searchSpaceFile", "searchSpacePath"
    ),
    "debug": _IGNORED_V2["debug"],
    "logLevel": _IGNORED_V2["logLevel"],
    "logDir": _LOGS,
    "logCollection": "trial logs always go to CloudWatch",
    "multiThread": "the searcher has no dispatcher threads",
    "versionCheck": "there is no NNI trial keeper whose version could be checked",
}
for _section in TRAINING_SERVICE_SECTIONS:
    _IGNORED_V1[_section] = "training-service settings; " + _COMPUTE

# Normalised tuner name (lower case, letters and digits only) -> Stratus searcher.
_TUNERS: dict[str, str] = {
    "tpe": "tpe",
    "random": "random",
    "randomsearch": "random",
    "gridsearch": "grid",
    "batchtuner": "grid",
    "batch": "grid",
}
_EARLY_STOPPING_TUNERS = frozenset({"hyperband", "bohb", "pbt", "pbttuner"})
_ASSESSORS_WITH_ASHA_HINT = frozenset({"medianstop", "curvefitting"})


@dataclass(frozen=True)
class NniTranslation:
    """A Stratus config mapping translated from an NNI config, and what did not translate."""

    config: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def translate_nni(raw: Mapping[str, Any], search_space: Mapping[str, Any] | None = None) -> NniTranslation:
    """The Stratus config for an NNI config, with warnings; ConfigInvalidError lists every problem.

    `search_space` is NNI's search space (the API passes `raw["searchSpace"]`, which the CLI fills
    from the search-space file); None means the config gives none.
    """
    if not isinstance(raw, Mapping):
        raise ConfigInvalidError([ConfigProblem("<config>", "an NNI config must be a mapping")])
    return _Translator(raw, nni_config_version(raw)).translate(search_space)


# -- the translation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Names:
    """Where each translated setting lives in one version of NNI's config."""

    command: tuple[str, ...]
    code_dir: tuple[str, ...]
    gpus: tuple[str, ...]
    max_trials: str
    space_file: str
    tuner_name: str
    assessor_name: str
    advisor_name: str
    custom_class: tuple[str, ...]


_V1_NAMES = _Names(
    command=("trial", "command"),
    code_dir=("trial", "codeDir"),
    gpus=("trial", "gpuNum"),
    max_trials="maxTrialNum",
    space_file="searchSpacePath",
    tuner_name="builtinTunerName",
    assessor_name="builtinAssessorName",
    advisor_name="builtinAdvisorName",
    custom_class=("className", "classFileName", "codeDir"),
)
_V2_NAMES = _Names(
    command=("trialCommand",),
    code_dir=("trialCodeDirectory",),
    gpus=("trialGpuNumber",),
    max_trials="maxTrialNumber",
    space_file="searchSpaceFile",
    tuner_name="name",
    assessor_name="name",
    advisor_name="name",
    custom_class=("className", "codeDirectory"),
)

# Fields translated (or used by the CLI), per version: never warned about.
_MAPPED_V1 = frozenset(
    {"experimentName", "trialConcurrency", "maxTrialNum", "searchSpacePath", "searchSpace", "trial"}
    | {"tuner", "assessor", "advisor"}
)
_MAPPED_V2 = frozenset(
    {"experimentName", "trialConcurrency", "maxTrialNumber", "searchSpaceFile", "searchSpace"}
    | {"trialCommand", "trialCodeDirectory", "trialGpuNumber", "tuner", "assessor", "advisor"}
)
_V1_TRIAL_MAPPED = frozenset({"command", "codeDir", "gpuNum", "image"})


def _path(*parts: str) -> str:
    return ".".join(parts)


class _Translator:
    """Translates one NNI config; its search space is delegated to a `SpaceTranslator`
    sharing the same warnings and problems lists."""

    def __init__(self, raw: Mapping[str, Any], version: int) -> None:
        self.raw = raw
        self.version = version
        self.names = _V1_NAMES if version == 1 else _V2_NAMES
        self.warnings: list[str] = []
        self.problems: list[ConfigProblem] = []
        self.space = SpaceTranslator(self.warnings, self.problems)

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(f"{path}: {message}")

    def problem(self, path: str, message: str) -> None:
        self.problems.append(ConfigProblem(path, message))

    def get(self, keys: Sequence[str]) -> Any:
        node: Any = self.raw
        for key in keys:
            if not isinstance(node, Mapping):
                return None
            node = node.get(key)
        return node

    # -- top level ------------------------------------------------------------------------------

    def translate(self, search_space: Mapping[str, Any] | None) -> NniTranslation:
        config: dict[str, Any] = {}
        name = self.raw.get("experimentName")
        if name is not None:
            if isinstance(name, str) and name.strip():
                config["name"] = name
            else:
                self.problem("experimentName", "must be a non-empty string")
        config["entrypoint"] = self._entrypoint()
        config["hyperparameters"] = self._search_space(search_space)
        searcher, tuner_label, seed = self._searcher()
        if searcher.get("name") == "grid":
            self.space.grid_counts(config["hyperparameters"])
        config["searcher"] = searcher
        config["resources"] = {"slots_per_trial": self._slots()}
        config["max_restarts"] = 0
        if seed is not None:
            config["reproducibility"] = {"experiment_seed": seed}
        image = self.get(("trial", "image")) if self.version == 1 else None
        if image is not None:
            config["environment"] = {"image": image}
        record: dict[str, Any] = {"version": self.version, "tuner": tuner_label}
        assessor = self._assessor()
        if assessor is not None:
            record["assessor"] = assessor
        config["data"] = {"nni": record}
        self._unmapped_fields()
        self._pass_through(config)
        if self.problems:
            raise ConfigInvalidError(self.problems)
        return NniTranslation(config=config, warnings=self.warnings)

    def _entrypoint(self) -> Any:
        path = _path(*self.names.command)
        command = self.get(self.names.command)
        if command is None:
            self.problem(path, "required: the command that runs one trial, e.g. python3 mnist.py")
        elif not isinstance(command, str) or not command.strip():
            self.problem(path, "must be a non-empty command string")
        return command

    def _slots(self) -> int:
        path = _path(*self.names.gpus)
        gpus = self.get(self.names.gpus)
        if gpus is None:
            return 1
        if not is_int(gpus) or gpus < 0:
            self.problem(path, "must be a whole number of GPUs (0 or more)")
            return 1
        if gpus == 0:
            self.warn(
                path,
                "0 GPUs: each trial gets 1 slot (resources.slots_per_trial: 1), a CPU slot on a "
                "CPU resource pool; on a GPU pool that slot is a GPU",
            )
            return 1
        return int(gpus)

    def _max_trials(self, searcher: str) -> int | None:
        key = self.names.max_trials
        value = self.raw.get(key)
        if searcher == "grid":
            if value is not None:
                self.warn(key, "ignored with GridSearch: the grid searcher runs every grid point once")
            return None
        if value is None:
            self.problem(
                key,
                "required: Stratus has no experiment time limit, so it needs the number of trials to run",
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

    # -- tuner -> searcher ----------------------------------------------------------------------

    def _algorithm(self) -> tuple[str, Mapping[str, Any] | None, str]:
        """(path, section, name key) of the tuning algorithm: the advisor if set, else the tuner."""
        advisor = self.raw.get("advisor")
        if advisor is not None:
            if self.raw.get("tuner") is not None:
                self.warn("tuner", "ignored (the advisor is used instead, as NNI does)")
            return "advisor", advisor if isinstance(advisor, Mapping) else None, self.names.advisor_name
        tuner = self.raw.get("tuner")
        return "tuner", tuner if isinstance(tuner, Mapping) else None, self.names.tuner_name

    def _searcher(self) -> tuple[dict[str, Any], str | None, int | None]:
        path, section, name_key = self._algorithm()
        if self.raw.get(path) is not None and section is None:
            self.problem(path, f"must be a mapping with {name_key} and classArgs")
        section = section or {}
        name = section.get(name_key)
        custom = next((section[k] for k in self.names.custom_class if section.get(k)), None)
        label: str | None
        if name is not None and not isinstance(name, str):
            self.problem(_path(path, name_key), "must be the name of a tuner, e.g. TPE")
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
            if key in (name_key, "classArgs", *self.names.custom_class):
                continue
            if section[key] is None:
                continue
            why = (
                "the searcher runs in the control plane, on no GPU"
                if key in ("gpuIndices", "gpuNum")
                else "Stratus has no assessor, so no intermediate result is sent to the searcher"
                if key == "includeIntermediateResults"
                else "not a tuner setting Stratus knows"
            )
            self.warn(_path(path, key), f"ignored ({why})")
        smaller_is_better, seed = self._class_args(path, section.get("classArgs"), searcher)
        out: dict[str, Any] = {"name": searcher, "metric": METRIC, "smaller_is_better": smaller_is_better}
        max_trials = self._max_trials(searcher)
        if max_trials is not None:
            out["max_trials"] = max_trials
        concurrency = self._concurrency()
        if concurrency is not None:
            out["max_concurrent_trials"] = concurrency
        return out, label, seed

    def _searcher_for(self, path: str, name_key: str, name: str) -> str:
        key = "".join(ch for ch in name.lower() if ch.isalnum())
        where = _path(path, name_key)
        searcher = _TUNERS.get(key)
        if searcher is None:
            hint = (
                "; for early stopping, use Stratus' adaptive_asha searcher"
                if key in _EARLY_STOPPING_TUNERS
                else ""
            )
            self.warn(where, f"the {name} tuner is not available in Stratus; using the tpe searcher{hint}")
            return "tpe"
        if key in ("batchtuner", "batch"):
            self.warn(
                where,
                "BatchTuner runs as the grid searcher: each value of its choice becomes one trial, "
                "found under that hyperparameter's name (NNI passes the value's keys at the top level)",
            )
        return searcher

    def _class_args(self, path: str, args: Any, searcher: str) -> tuple[bool, int | None]:
        where = _path(path, "classArgs")
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            self.problem(where, "must be a mapping of the tuner's arguments")
            args = {}
        mode = args.get("optimize_mode")
        smaller_is_better = True
        if mode is None:
            self.warn(
                _path(where, "optimize_mode"),
                f"not set; Stratus assumes minimize (a smaller `{METRIC}` metric is better); "
                "set optimize_mode: maximize if larger is better",
            )
        elif mode in ("maximize", "minimize"):
            smaller_is_better = mode == "minimize"
        else:
            self.problem(_path(where, "optimize_mode"), "must be maximize or minimize")
        seed: int | None = None
        for key, value in args.items():
            if key == "optimize_mode" or value is None:
                continue
            if key == "seed" and is_int(value) and 0 <= value <= MAX_SEED:
                seed = int(value)
                continue
            why = (
                f"must be a whole number between 0 and {MAX_SEED} to become reproducibility.experiment_seed"
                if key == "seed"
                else f"no equivalent in Stratus' {searcher} searcher"
            )
            self.warn(_path(where, str(key)), f"ignored ({why})")
        return smaller_is_better, seed

    def _assessor(self) -> str | None:
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

    # -- fields without equivalent --------------------------------------------------------------

    def _unmapped_fields(self) -> None:
        ignored = _IGNORED_V1 if self.version == 1 else _IGNORED_V2
        mapped = _MAPPED_V1 if self.version == 1 else _MAPPED_V2
        trials = self.names.max_trials
        for key, value in self.raw.items():
            if key in mapped or key in _PASS_THROUGH or value is None:
                continue
            if not isinstance(key, str):
                self.warn(str(key), f"ignored (not a field of NNI's v{self.version} config)")
                continue
            if key in ignored:
                self.warn(key, f"ignored ({ignored[key].format(trials=trials)})")
            else:
                self.warn(key, f"ignored (not a field of NNI's v{self.version} config)")
        if self.version == 1:
            trial = self.raw.get("trial")
            if trial is not None and not isinstance(trial, Mapping):
                self.problem("trial", "must be a mapping with command, codeDir and gpuNum")
            elif isinstance(trial, Mapping):
                for key, value in trial.items():
                    if key not in _V1_TRIAL_MAPPED and value is not None:
                        self.warn(
                            f"trial.{key}",
                            "ignored (training-service setting; Stratus sizes trials by "
                            "resources.slots_per_trial)",
                        )

    def _pass_through(self, config: dict[str, Any]) -> None:
        for key in sorted(_PASS_THROUGH & {k for k in self.raw if isinstance(k, str)}):
            value = self.raw[key]
            translated = config.get(key)
            if isinstance(translated, dict) and isinstance(value, Mapping):
                merged = {**translated, **value}
                gpus_given = self.get(self.names.gpus) is not None
                slots = merged.get("slots_per_trial")
                if key == "resources" and gpus_given and slots != translated.get("slots_per_trial"):
                    self.warn(
                        "resources.slots_per_trial",
                        f"overrides {_path(*self.names.gpus)} (given both)",
                    )
                if key == "data":
                    merged["nni"] = translated["nni"]
                config[key] = merged
            else:
                config[key] = value

    # -- search space -> hyperparameters --------------------------------------------------------

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
