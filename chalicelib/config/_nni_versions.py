"""NNI's two config versions: where each translated setting lives (v1 `trial.command`, v2
`trialCommand`, ...), which fields are translated, and why every other field has no Stratus
equivalent; `NniReader`, what every part of a translator reads one config with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.config.errors import ConfigProblem
from chalicelib.config.nni_space import TranslationNotes, is_int
from chalicelib.config.schema import ExperimentConfig
from stratus.contract.nni import DETERMINED_SECTIONS, TRAINING_SERVICE_SECTIONS, V2_FIELDS, nni_field_key

# Stratus sections an NNI config may carry through (see `chalicelib.config.nni`).
# (`debug` is NNI's too, where it means the NNI manager's debug mode: warned about, not kept.)
PASS_THROUGH = frozenset(ExperimentConfig.model_fields) - DETERMINED_SECTIONS - {"debug"}

_COMPUTE = "Stratus runs trials on its own compute backends; resources.resource_pool picks one"
_LOGS = "trial logs go to CloudWatch and checkpoints to S3"

# NNI field -> why it has no equivalent. `{trials}` is the version's max-trials field.
IGNORED_V2: dict[str, str] = {
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
IGNORED_V1: dict[str, str] = {
    "authorName": "the submitting user is recorded as the experiment's owner",
    "maxTrialDuration": IGNORED_V2["maxTrialDuration"],
    "trainingServicePlatform": _COMPUTE,
    "nniManagerIp": IGNORED_V2["nniManagerIp"],
    "useAnnotation": IGNORED_V2["useAnnotation"].replace("searchSpace or searchSpaceFile", "searchSpacePath"),
    "debug": IGNORED_V2["debug"],
    "logLevel": IGNORED_V2["logLevel"],
    "logDir": _LOGS,
    "logCollection": "trial logs always go to CloudWatch",
    "multiThread": "the searcher has no dispatcher threads",
    "versionCheck": "there is no NNI trial keeper whose version could be checked",
}
#: Fields whose value given is NNI's default, which asks for nothing Stratus lacks: no warning.
NNI_DEFAULTS: dict[str, object] = {
    "useAnnotation": False,
    "debug": False,
    "multiThread": False,
    "versionCheck": True,
}
V2_SPELLINGS = {nni_field_key(name): name for name in V2_FIELDS}
for _section in TRAINING_SERVICE_SECTIONS:
    IGNORED_V1[_section] = "training-service settings; " + _COMPUTE


@dataclass(frozen=True)
class VersionNames:
    """Where each translated setting lives in one version of NNI's config."""

    command: tuple[str, ...]
    code_dir: tuple[str, ...]
    gpus: tuple[str, ...]
    max_trials: str
    max_duration: str
    space_file: str
    tuner_name: str
    assessor_name: str
    advisor_name: str
    custom_class: tuple[str, ...]


V1_NAMES = VersionNames(
    command=("trial", "command"),
    code_dir=("trial", "codeDir"),
    gpus=("trial", "gpuNum"),
    max_trials="maxTrialNum",
    max_duration="maxExecDuration",
    space_file="searchSpacePath",
    tuner_name="builtinTunerName",
    assessor_name="builtinAssessorName",
    advisor_name="builtinAdvisorName",
    custom_class=("className", "classFileName", "codeDir"),
)
V2_NAMES = VersionNames(
    command=("trialCommand",),
    code_dir=("trialCodeDirectory",),
    gpus=("trialGpuNumber",),
    max_trials="maxTrialNumber",
    max_duration="maxExperimentDuration",
    space_file="searchSpaceFile",
    tuner_name="name",
    assessor_name="name",
    advisor_name="name",
    custom_class=("className", "codeDirectory"),
)

# Fields translated (or used by the CLI), per version: never warned about.
MAPPED_V1 = frozenset(
    {"experimentName", "trialConcurrency", "maxTrialNum", "maxExecDuration", "searchSpacePath"}
    | {"searchSpace", "trial"}
    | {"tuner", "assessor", "advisor"}
)
MAPPED_V2 = frozenset(
    {"experimentName", "trialConcurrency", "maxTrialNumber", "maxExperimentDuration", "searchSpaceFile"}
    | {"searchSpace"}
    | {"trialCommand", "trialCodeDirectory", "trialGpuNumber", "tuner", "assessor", "advisor"}
)
V1_TRIAL_MAPPED = frozenset({"command", "codeDir", "gpuNum", "image", "master", "worker", "ps", "taskRoles"})


def dotted(*parts: str) -> str:
    """The dotted path of an NNI field, for warnings and problems."""
    return ".".join(parts)


class NniReader(TranslationNotes):
    """Reads one NNI config of `version`; warnings and problems go to the lists it is given."""

    def __init__(
        self, raw: Mapping[str, Any], version: int, warnings: list[str], problems: list[ConfigProblem]
    ) -> None:
        super().__init__(warnings, problems)
        self.raw = raw
        self.version = version
        self.names = V1_NAMES if version == 1 else V2_NAMES

    def get(self, keys: Sequence[str]) -> Any:
        node: Any = self.raw
        for key in keys:
            if not isinstance(node, Mapping):
                return None
            node = node.get(key)
        return node

    def gpu_slots(self, each: str, setting: str) -> int:
        """The slots the config's GPU count (`gpuNum`, `trialGpuNumber`) gives `each` (a trial, a
        replica) as `setting` names them: 1 when absent or 0 (a CPU slot on a CPU pool, said so)."""
        path = dotted(*self.names.gpus)
        gpus = self.get(self.names.gpus)
        if gpus is None:
            return 1
        if not is_int(gpus) or gpus < 0:
            self.problem(path, "must be a whole number of GPUs (0 or more)")
            return 1
        if gpus == 0:
            self.warn(
                path,
                f"0 GPUs: each {each} gets 1 slot ({setting}: 1), a CPU slot on a CPU resource pool; on a "
                "GPU pool that slot is a GPU",
            )
            return 1
        return int(gpus)

    def unmapped_fields(self, handled: frozenset[str] = frozenset()) -> None:
        """Warn about every field given that has no Stratus equivalent (v1: `trial`'s settings too),
        except the `handled` ones (dotted paths: `trainingService`, `trial.adaptive`), which a part of the
        translator reads and warns about itself (the adl training service, `_nni_adl.py`)."""
        ignored = IGNORED_V1 if self.version == 1 else IGNORED_V2
        mapped = MAPPED_V1 if self.version == 1 else MAPPED_V2
        trials = self.names.max_trials
        for key, value in self.raw.items():
            if key in mapped or key in PASS_THROUGH or key in handled or value is None:
                continue
            if key in NNI_DEFAULTS and value is NNI_DEFAULTS[key]:
                continue  # `useAnnotation: false` and the like: NNI's default, nothing to warn about
            if not isinstance(key, str):
                self.warn(str(key), f"ignored (not a field of NNI's v{self.version} config)")
                continue
            twin = V2_SPELLINGS.get(nni_field_key(key)) if self.version == 2 else None
            if twin is not None and twin != key:
                self.problem(key, f"is {twin}, given twice (NNI ignores case and underscores); keep one")
            elif key in ignored:
                self.warn(key, f"ignored ({ignored[key].format(trials=trials)})")
            else:
                self.warn(key, f"ignored (not a field of NNI's v{self.version} config)")
        if self.version == 1:
            trial = self.raw.get("trial")
            if trial is not None and not isinstance(trial, Mapping):
                self.problem("trial", "must be a mapping with command, codeDir and gpuNum")
            elif isinstance(trial, Mapping):
                for key, value in trial.items():
                    if key not in V1_TRIAL_MAPPED and f"trial.{key}" not in handled and value is not None:
                        self.warn(
                            f"trial.{key}",
                            "ignored (training-service setting; Stratus sizes trials by "
                            "resources.slots_per_trial)",
                        )
