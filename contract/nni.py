"""Telling an NNI experiment config from a Determined one, by its keys: the CLI asks before it inlines
the search space and packs the trial code folder, the API before it translates the config
(`chalicelib.config.nni`). One test, so both sides always agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Keys only NNI's current (v2) configs have; a Determined config has none of them.
V2_KEYS = frozenset(
    {"trialCommand", "trialCodeDirectory", "trialGpuNumber", "trialConcurrency", "searchSpace"}
    | {"searchSpaceFile", "maxTrialNumber", "maxExperimentDuration", "maxTrialDuration"}
    | {"trainingService", "experimentName", "useAnnotation", "tuner", "assessor", "advisor"}
    | {"nniManagerIp", "logLevel", "experimentWorkingDirectory", "tunerGpuIndices", "sharedStorage"}
)
#: NNI v1's per-platform sections (`localConfig`, `remoteConfig`, ...).
TRAINING_SERVICE_SECTIONS = (
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
#: Keys only NNI's legacy (v1) configs have.
V1_KEYS = frozenset(
    {"authorName", "trainingServicePlatform", "searchSpacePath", "maxTrialNum", "maxExecDuration"}
    | {"trial", "logDir", "multiThread", "versionCheck", "logCollection", *TRAINING_SERVICE_SECTIONS}
)
#: Sections only a Determined config has: with any of them, a config is Determined's.
DETERMINED_SECTIONS = frozenset({"entrypoint", "searcher", "hyperparameters"})


#: NNI v2's top-level fields, as its reference spells them.
V2_FIELDS = (
    *sorted(V2_KEYS),
    "debug",
    "experimentType",
)
#: The fields of v2's `tuner`, `assessor` and `advisor` sections.
V2_ALGORITHM_FIELDS = ("name", "className", "codeDirectory", "classArgs")


def nni_field_key(key: str) -> str:
    """How NNI v2 compares field names: case and underscores ignored (`trial_command` is `trialCommand`)."""
    return key.lower().replace("_", "")


_V2_BY_KEY = {nni_field_key(name): name for name in V2_FIELDS}
_ALGORITHM_BY_KEY = {nni_field_key(name): name for name in V2_ALGORITHM_FIELDS}


def canonical_nni_keys(raw: Mapping[str, Any]) -> dict[str, Any]:
    """An NNI v2 config with its field names spelled as NNI documents them (`trial_command` ->
    `trialCommand`, `tuner.class_args` -> `tuner.classArgs`), since NNI reads them ignoring case and
    underscores. Other keys (and the search space's names, and `classArgs`' own keys) are kept; a key
    whose canonical name is also given as is stays as it was (the translator reports the pair).
    """
    return _canonical(raw, _V2_BY_KEY, sections=True)


def _canonical(raw: Mapping[str, Any], names: Mapping[str, str], *, sections: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = names.get(nni_field_key(key), key) if isinstance(key, str) else key
        if name != key and name in raw:
            name = key
        if sections and name in ("tuner", "assessor", "advisor") and isinstance(value, Mapping):
            value = _canonical(value, _ALGORITHM_BY_KEY, sections=False)
        out[name] = value
    return out


def is_nni_config(raw: Mapping[str, Any]) -> bool:
    """True for an NNI experiment config (v1 or v2), False for a Determined config or anything else.

    An NNI config has at least one key of NNI's (`trialCommand` or `trial_command`, `searchSpace`,
    `authorName`, a
    `trial` mapping with `command`, ...) and none of Determined's required sections (`entrypoint`,
    `searcher`) nor `hyperparameters`: a Determined config carrying a stray NNI key stays a
    Determined config, and is told about the unknown key.
    """
    if not isinstance(raw, Mapping):
        return False
    keys = {key for key in canonical_nni_keys(raw) if isinstance(key, str)}
    if keys & DETERMINED_SECTIONS:
        return False
    if keys & (V2_KEYS | (V1_KEYS - {"trial"})):
        return True
    trial = raw.get("trial")
    return isinstance(trial, Mapping) and "command" in trial


def nni_config_version(raw: Mapping[str, Any]) -> int:
    """1 for NNI's legacy config (any v1-only key such as `authorName` or `trial`), else 2."""
    return 1 if any(key in raw for key in V1_KEYS) else 2
