"""Importing NNI experiment configs: NNI's YAML (legacy v1 and v2) translated into a Stratus config.

Pure (standard library only). `is_nni_config(raw)` tells an NNI config from a Determined one by its
keys; `translate_nni(raw, search_space)` returns the Determined-style mapping that
`parse_experiment_config` validates, plus a warning for everything that did not translate exactly.
Problems (no trial command, no search space, a malformed search-space entry) raise
`ConfigInvalidError`, with paths in NNI's own field names (`trialCommand`, `searchSpace.lr._value`).

Translation (v1 name / v2 name -> Stratus):

- `experimentName` -> `name`; `trial.command` / `trialCommand` -> `entrypoint`.
- the search space (`searchSpace`, inlined from `searchSpacePath` / `searchSpaceFile` by the CLI)
  -> `hyperparameters`:

  ============================  ==============================================================
  NNI `_type` and `_value`      Stratus hyperparameter
  ============================  ==============================================================
  choice [v, ...]               categorical, vals [v, ...]
  choice with `_name` options   categorical of the `_name`s; warning (the trial receives the
                                name, and the options' own parameters are not sampled)
  randint [lower, upper]        int, minval lower, maxval upper - 1 (upper is exclusive since
                                NNI 1.x; the older one-value form [upper] means [0, upper))
  uniform [low, high]           double, minval low, maxval high
  loguniform [low, high]        log, base 10, minval log10(low), maxval log10(high)
  quniform [low, high, q]       int [low, high] when low, high and q are integers and q is 1;
                                else categorical of its grid points when there are at most
                                `MAX_GRID_POINTS` (warning: unordered); else the unquantised
                                double (int when all three are integers) (warning)
  qloguniform [low, high, q]    categorical of the grid points when at most `MAX_GRID_POINTS`
                                (warning), else the unquantised log (warning)
  normal [mu, sigma]            double over mu ± 3 sigma (warning)
  qnormal [mu, sigma, q]        as quniform over mu ± 3 sigma, snapped to multiples of q (warning)
  lognormal [mu, sigma]         log, base 10, over exp(mu ± 3 sigma) (warning)
  qlognormal [mu, sigma, q]     as qloguniform over exp(mu ± 3 sigma) (warning)
  ============================  ==============================================================

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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chalicelib.config.errors import ConfigInvalidError, ConfigProblem
from chalicelib.config.schema import MAX_SEED, ExperimentConfig

__all__ = [
    "GRID_COUNT",
    "GRID_INT_LIMIT",
    "MAX_GRID_POINTS",
    "NniTranslation",
    "is_nni_config",
    "nni_config_version",
    "translate_nni",
]

MAX_GRID_POINTS = 32
"""A quantised axis with at most this many grid points becomes a categorical of them."""
GRID_COUNT = 5
"""Values per continuous axis when NNI's GridSearch becomes Stratus' grid searcher."""
GRID_INT_LIMIT = 10
"""An int axis with at most this many values is searched in full by the grid searcher."""

NORMAL_SIGMAS = 3.0
"""normal / lognormal become a bounded range of mu ± this many sigmas."""

METRIC = "default"

# Keys only NNI configs have; a Determined config has none of them.
_V2_MARKERS = frozenset(
    {
        "trialCommand",
        "trialCodeDirectory",
        "trialGpuNumber",
        "trialConcurrency",
        "searchSpace",
        "searchSpaceFile",
        "maxTrialNumber",
        "maxExperimentDuration",
        "maxTrialDuration",
        "trainingService",
        "experimentName",
        "useAnnotation",
        "tuner",
        "assessor",
        "advisor",
        "nniManagerIp",
        "logLevel",
        "experimentWorkingDirectory",
        "tunerGpuIndices",
        "sharedStorage",
    }
)
_V1_ONLY = frozenset(
    {
        "authorName",
        "trainingServicePlatform",
        "searchSpacePath",
        "maxTrialNum",
        "maxExecDuration",
        "trial",
        "logDir",
        "multiThread",
        "versionCheck",
        "logCollection",
        "localConfig",
        "remoteConfig",
        "machineList",
        "paiConfig",
        "paiYarnConfig",
        "kubeflowConfig",
        "frameworkcontrollerConfig",
        "dltsConfig",
        "amlConfig",
        "adlConfig",
        "hybridConfig",
    }
)
_DETERMINED_MARKERS = frozenset({"entrypoint", "searcher", "hyperparameters"})
# Stratus sections an NNI config may carry through (see the module docstring).
# (`debug` is NNI's too, where it means the NNI manager's debug mode: warned about, not kept.)
_PASS_THROUGH = frozenset(ExperimentConfig.model_fields) - _DETERMINED_MARKERS - {"debug"}

_SPACE_TYPES = (
    "choice",
    "randint",
    "uniform",
    "quniform",
    "loguniform",
    "qloguniform",
    "normal",
    "qnormal",
    "lognormal",
    "qlognormal",
)

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
_TRAINING_SERVICE_SECTIONS = (
    "localConfig",
    "remoteConfig",
    "machineList",
    "paiConfig",
    "paiYarnConfig",
    "kubeflowConfig",
    "frameworkcontrollerConfig",
    "dltsConfig",
    "amlConfig",
    "adlConfig",
    "hybridConfig",
)
for _section in _TRAINING_SERVICE_SECTIONS:
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


def is_nni_config(raw: Mapping[str, Any]) -> bool:
    """True for an NNI experiment config (v1 or v2), False for a Determined config or anything else.

    An NNI config has at least one key of NNI's (`trialCommand`, `searchSpace`, `authorName`, a
    `trial` mapping with `command`, ...) and none of Determined's required sections (`entrypoint`,
    `searcher`) nor `hyperparameters`: a Determined config carrying a stray NNI key stays a
    Determined config, and is told about the unknown key.
    """
    if not isinstance(raw, Mapping):
        return False
    keys = {key for key in raw if isinstance(key, str)}
    if keys & _DETERMINED_MARKERS:
        return False
    if keys & (_V2_MARKERS | (_V1_ONLY - {"trial"})):
        return True
    trial = raw.get("trial")
    return isinstance(trial, Mapping) and "command" in trial


def nni_config_version(raw: Mapping[str, Any]) -> int:
    """1 for NNI's legacy config (any v1-only key such as `authorName` or `trial`), else 2."""
    return 1 if any(key in raw for key in _V1_ONLY) else 2


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


def _fmt(value: float) -> str:
    return f"{value:g}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return _is_number(value) and float(value).is_integer()


class _Translator:
    def __init__(self, raw: Mapping[str, Any], version: int) -> None:
        self.raw = raw
        self.version = version
        self.names = _V1_NAMES if version == 1 else _V2_NAMES
        self.warnings: list[str] = []
        self.problems: list[ConfigProblem] = []

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
            self._grid_counts(config["hyperparameters"])
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
        if not _is_int(gpus) or gpus < 0:
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
        if not _is_int(value) or value < 1:
            self.problem(key, "must be a whole number of trials (1 or more)")
            return None
        return int(value)

    def _concurrency(self) -> int | None:
        value = self.raw.get("trialConcurrency")
        if value is None:
            self.warn("trialConcurrency", "not set; Stratus runs up to 16 trials at once")
            return None
        if not _is_int(value) or value < 1:
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
            if key == "seed" and _is_int(value) and 0 <= value <= MAX_SEED:
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
        if not isinstance(space, Mapping):
            self.problem("searchSpace", "must be a mapping of names to {_type, _value}")
            return {}
        out: dict[str, Any] = {}
        for name, spec in space.items():
            where = f"searchSpace.{name}"
            if not isinstance(name, str) or not name:
                self.problem(where, "names must be non-empty strings")
                continue
            hp = self._hyperparameter(where, spec)
            if hp is not None:
                out[name] = hp
        return out

    def _hyperparameter(self, where: str, spec: Any) -> dict[str, Any] | None:
        if not isinstance(spec, Mapping) or "_type" not in spec:
            self.problem(
                where, "must be a mapping with _type and _value, e.g. {_type: uniform, _value: [0, 1]}"
            )
            return None
        kind = spec["_type"]
        value = spec.get("_value")
        if kind not in _SPACE_TYPES:
            shown = kind if isinstance(kind, str) else repr(kind)
            self.problem(
                f"{where}._type", f'unknown type "{shown}"; expected one of {", ".join(_SPACE_TYPES)}'
            )
            return None
        if not isinstance(value, list):
            self.problem(f"{where}._value", "required: a list of the type's arguments")
            return None
        handler: Callable[[str, list[Any]], dict[str, Any] | None] = getattr(self, f"_hp_{kind}")
        return handler(where, value)

    def _numbers(self, where: str, value: list[Any], names: Sequence[str]) -> list[float] | None:
        if len(value) != len(names) or not all(_is_number(v) for v in value):
            self.problem(f"{where}._value", f"must be [{', '.join(names)}] (numbers)")
            return None
        return list(value)

    def _hp_choice(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        if not value:
            self.problem(f"{where}._value", "must list at least one option")
            return None
        nested = [v for v in value if isinstance(v, Mapping) and "_name" in v]
        if not nested:
            return {"type": "categorical", "vals": list(value)}
        names: list[Any] = []
        conditional: list[str] = []
        for index, option in enumerate(value):
            if isinstance(option, Mapping) and "_name" in option:
                names.append(option["_name"])
                conditional += [f"{option['_name']}.{k}" for k in option if k != "_name"]
            else:
                names.append(option)
                if isinstance(option, Mapping):
                    self.problem(f"{where}._value[{index}]", "a nested option needs _name, like the others")
        message = "nested search space: each trial receives the chosen option's _name, not NNI's {_name: ...} mapping"
        if conditional:
            message += f"; the options' own parameters ({', '.join(conditional)}) are not sampled"
        self.warn(where, message)
        return {"type": "categorical", "vals": names}

    def _hp_randint(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        if len(value) == 1:  # NNI before 1.x: [upper] meant [0, upper)
            value = [0, *value]
        if len(value) != 2 or not all(_is_int(v) for v in value):
            self.problem(f"{where}._value", "must be [lower, upper] (whole numbers; upper is exclusive)")
            return None
        lower, upper = int(value[0]), int(value[1])
        if upper <= lower:
            self.problem(
                f"{where}._value", f"upper ({upper}) is exclusive, so it must be greater than lower ({lower})"
            )
            return None
        return {"type": "int", "minval": lower, "maxval": upper - 1}

    def _bounds(self, where: str, low: float, high: float) -> bool:
        if low > high:
            self.problem(f"{where}._value", f"low ({_fmt(low)}) must be ≤ high ({_fmt(high)})")
            return False
        return True

    def _hp_uniform(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._numbers(where, value, ("low", "high"))
        if numbers is None or not self._bounds(where, *numbers):
            return None
        return {"type": "double", "minval": float(numbers[0]), "maxval": float(numbers[1])}

    def _hp_loguniform(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._numbers(where, value, ("low", "high"))
        if numbers is None or not self._bounds(where, *numbers):
            return None
        if numbers[0] <= 0:
            self.problem(f"{where}._value", "low must be > 0 for a log-uniform range")
            return None
        return _log_hp(numbers[0], numbers[1])

    def _hp_quniform(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._numbers(where, value, ("low", "high", "q"))
        if (
            numbers is None
            or not self._bounds(where, numbers[0], numbers[1])
            or not self._q(where, numbers[2])
        ):
            return None
        low, high, q = numbers
        return self._quantised(where, "quniform", low, high, q, log=False, clip=True, note="")

    def _hp_qloguniform(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._numbers(where, value, ("low", "high", "q"))
        if (
            numbers is None
            or not self._bounds(where, numbers[0], numbers[1])
            or not self._q(where, numbers[2])
        ):
            return None
        low, high, q = numbers
        if low <= 0:
            self.problem(f"{where}._value", "low must be > 0 for a log-uniform range")
            return None
        return self._quantised(where, "qloguniform", low, high, q, log=True, clip=True, note="")

    def _normal(self, where: str, value: list[Any], names: Sequence[str]) -> list[float] | None:
        numbers = self._numbers(where, value, names)
        if numbers is None:
            return None
        if numbers[1] <= 0:
            self.problem(f"{where}._value", "sigma must be > 0")
            return None
        if len(numbers) == 3 and not self._q(where, numbers[2]):
            return None
        return numbers

    def _hp_normal(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._normal(where, value, ("mu", "sigma"))
        if numbers is None:
            return None
        low, high = _sigma_range(numbers[0], numbers[1])
        self.warn(where, f"normal: {_approximation(low, high, log=False)}")
        return {"type": "double", "minval": low, "maxval": high}

    def _hp_qnormal(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._normal(where, value, ("mu", "sigma", "q"))
        if numbers is None:
            return None
        mu, sigma, q = numbers
        low, high = _sigma_range(mu, sigma)
        low, high = _tidy(round(low / q) * q), _tidy(round(high / q) * q)
        note = _approximation(low, high, log=False)
        return self._quantised(where, "qnormal", low, high, q, log=False, clip=False, note=note)

    def _hp_lognormal(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._normal(where, value, ("mu", "sigma"))
        if numbers is None:
            return None
        low, high = _sigma_range(numbers[0], numbers[1])
        self.warn(where, f"lognormal: {_approximation(math.exp(low), math.exp(high), log=True)}")
        return {"type": "log", "base": 10.0, "minval": low / math.log(10), "maxval": high / math.log(10)}

    def _hp_qlognormal(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._normal(where, value, ("mu", "sigma", "q"))
        if numbers is None:
            return None
        mu, sigma, q = numbers
        low, high = (math.exp(x) for x in _sigma_range(mu, sigma))
        note = _approximation(low, high, log=True)
        return self._quantised(where, "qlognormal", low, high, q, log=True, clip=False, note=note)

    def _q(self, where: str, q: float) -> bool:
        if q <= 0:
            self.problem(f"{where}._value", "q must be > 0")
            return False
        return True

    def _quantised(
        self, where: str, kind: str, low: float, high: float, q: float, *, log: bool, clip: bool, note: str
    ) -> dict[str, Any]:
        """A quantised axis: an exact int, a categorical of its grid points, or the unquantised range.

        `note` says how an unbounded (normal) distribution became [low, high]; empty for quniform
        and qloguniform.
        """
        prefix = f"{kind}: {note}, " if note else f"{kind}: "
        # Without clipping every point is a multiple of q; with it, low and high are points too.
        integral = all(float(x).is_integer() for x in ((low, high, q) if clip else (q,)))
        if not log and integral and q == 1:
            if note:
                self.warn(where, f"{prefix}as an int")
            return {"type": "int", "minval": int(low), "maxval": int(high)}
        points = _grid_points(low, high, q, clip=clip, integral=integral)
        if points is not None and len(points) <= MAX_GRID_POINTS:
            lost = " and the log-scale weighting is lost" if log else ""
            self.warn(
                where,
                f"{prefix}sampled as one of its {len(points)} grid points (a categorical: the "
                f"searcher treats them as unordered{lost})",
            )
            return {"type": "categorical", "vals": points}
        self.warn(where, f"{prefix}values are not rounded to multiples of q={_fmt(q)}")
        if log:
            return _log_hp(low, high)
        if integral:
            return {"type": "int", "minval": int(low), "maxval": int(high)}
        return {"type": "double", "minval": float(low), "maxval": float(high)}

    # -- grid search ----------------------------------------------------------------------------

    def _grid_counts(self, hyperparameters: dict[str, Any]) -> None:
        for name, hp in hyperparameters.items():
            kind = hp.get("type")
            where = f"searchSpace.{name}"
            if kind == "int":
                size = hp["maxval"] - hp["minval"] + 1
                if size <= GRID_INT_LIMIT:
                    hp["count"] = size
                else:
                    hp["count"] = GRID_INT_LIMIT
                    self.warn(
                        where,
                        f"GridSearch: {size} integers; the grid takes {GRID_INT_LIMIT} evenly spaced ones "
                        "(use choice for an exact grid)",
                    )
            elif kind in ("double", "log"):
                hp["count"] = GRID_COUNT
                self.warn(
                    where,
                    f"GridSearch: a continuous range; the grid takes {GRID_COUNT} evenly spaced values "
                    "(use choice or quniform for an exact grid)",
                )


def _approximation(low: float, high: float, *, log: bool) -> str:
    if log:
        return f"sampled log-uniformly over exp(mu ± 3·sigma) = [{_fmt(low)}, {_fmt(high)}], not log-normally"
    return f"sampled uniformly over mu ± 3·sigma = [{_fmt(low)}, {_fmt(high)}], not normally"


def _sigma_range(mu: float, sigma: float) -> tuple[float, float]:
    return mu - NORMAL_SIGMAS * sigma, mu + NORMAL_SIGMAS * sigma


def _log_hp(low: float, high: float) -> dict[str, Any]:
    return {"type": "log", "base": 10.0, "minval": math.log10(low), "maxval": math.log10(high)}


def _tidy(value: float) -> float:
    """A multiple of q without the float noise of `k * q` (0.30000000000000004 -> 0.3)."""
    return float(f"{value:.12g}")


def _grid_points(low: float, high: float, q: float, *, clip: bool, integral: bool) -> list[Any] | None:
    """The values `clip(round(x / q) * q, low, high)` takes for x in [low, high]; None if too many."""
    first, last = round(low / q), round(high / q)
    if last - first + 1 > MAX_GRID_POINTS:
        return None
    points: list[Any] = []
    for k in range(first, last + 1):
        value = _tidy(k * q)
        if clip:
            value = min(max(value, low), high)
        shown: Any = int(value) if integral else value
        if shown not in points:
            points.append(shown)
    return points
