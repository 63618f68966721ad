"""NNI's AdaptDL training service (`adl`, chalicelib/config/_nni_adl.py) and the `elastic` section it
becomes (chalicelib/config/sections.py), which a Determined config may also carry.

The v1 configs are NNI's own examples as they were before NNI removed the service
(examples/trials/cifar10_pytorch/config_adl.yml and mnist-pytorch/config_adl.yml); v2 had only
`trainingService: {platform: adl, dockerImage}`, and the v1 trial fields under it are a Stratus extension.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from chalicelib.config import ConfigInvalidError, parse_experiment_config, translate_nni
from chalicelib.config.sections import DEFAULT_MAX_REPLICAS, MAX_REPLICAS_CAP, ElasticConfig
from chalicelib.domain import keys
from chalicelib.memory import memory_ports
from chalicelib.services import experiments
from stratus.contract.nni import is_nni_config

SPACE = {
    "lr": {"_type": "loguniform", "_value": [0.0001, 0.1]},
    "bs": {"_type": "choice", "_value": [32, 64]},
}

CIFAR10_ADL = """\
authorName: default
experimentName: example_pytorch_cifar10
trialConcurrency: 1
maxExecDuration: 100h
maxTrialNum: 10
nniManagerIp: 10.20.41.69
trainingServicePlatform: adl
searchSpacePath: search_space_adl.json
logCollection: http
useAnnotation: false
tuner:
  builtinTunerName: TPE
  classArgs:
    optimize_mode: maximize
trial:
  namespace: default
  command: python3 /cifar10/main_adl.py
  codeDir: /cifar10
  gpuNum: 1
  image: petuum/nni:cifar-example
  imagePullSecrets:
    - name: stagingsecrets
  adaptive: true
  checkpoint:
    storageClass: microk8s-hostpath
    storageSize: 1Gi
  cpuNum: 1
  memorySize: 1Gi
"""

MNIST_ADL = """\
authorName: default
experimentName: example_mnist_pytorch
trialConcurrency: 1
maxExecDuration: 1h
maxTrialNum: 10
trainingServicePlatform: adl
searchSpacePath: search_space.json
tuner:
  builtinTunerName: TPE
  classArgs:
    optimize_mode: maximize
trial:
  image: petuum/train-demo:mnist-pytorch-adl
  command: python3 mnist.py
  codeDir: .
  gpuNum: 1
"""

V2_ADL = """\
experimentName: adl v2
trialCommand: python3 main_adl.py
trialCodeDirectory: .
trialGpuNumber: 2
trialConcurrency: 2
maxTrialNumber: 8
tuner:
  name: TPE
  classArgs:
    optimize_mode: maximize
trainingService:
  platform: adl
  dockerImage: msranni/nni:latest
"""


def load(text: str) -> dict[str, Any]:
    """An NNI config as the CLI sends it: the search-space file inlined as `searchSpace`."""
    raw = yaml.safe_load(text)
    assert isinstance(raw, dict)
    raw.pop("searchSpacePath", None)
    raw["searchSpace"] = SPACE
    return raw


def problems(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigInvalidError) as info:
        translate_nni(raw)
    return {p.path: p.message for p in info.value.problems}


def parse_problems(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigInvalidError) as info:
        parse_experiment_config(raw)
    return {p.path: p.message for p in info.value.problems}


# --- NNI v1: trainingServicePlatform: adl ------------------------------------------------------------


def test_nnis_cifar10_adl_example_becomes_an_elastic_trial_under_the_adaptdl_launcher() -> None:
    translation = translate_nni(load(CIFAR10_ADL))

    assert (
        translation.config["entrypoint"]
        == "python3 -m stratus.launchers.adaptdl -- python3 /cifar10/main_adl.py"
    )
    assert translation.config["elastic"] == {
        "framework": "adaptdl",
        "min_replicas": 1,
        "slots_per_replica": 1,
        "checkpoint_size_limit": "1Gi",
    }
    assert "resources" not in translation.config  # the schema sizes it from elastic
    config = parse_experiment_config(translation.config).config
    assert config.elastic == ElasticConfig(slots_per_replica=1, checkpoint_size_limit="1Gi")
    assert config.elastic.max_replicas is None  # adaptive: as many as the pool holds
    assert config.elastic.checkpoint_size_limit_bytes == 2**30
    assert (config.elastic.min_rescale_interval_s, config.elastic.speedup_threshold) == (300, 1.05)
    assert config.resources.slots_per_trial == 1
    assert config.environment.image == "petuum/nni:cifar-example"
    assert config.name == "example_pytorch_cifar10" and config.searcher.name == "tpe"


def test_every_adl_field_without_an_exact_equivalent_is_warned_about_once() -> None:
    translation = translate_nni(load(CIFAR10_ADL))

    adl = [w for w in translation.warnings if w.startswith("trial.")]
    assert adl == [
        "trial.adaptive: an elastic trial of elastic.min_replicas (1) to elastic.max_replicas replicas "
        f"(unset: as many as its pool holds, at most {MAX_REPLICAS_CAP}; {DEFAULT_MAX_REPLICAS} where the "
        "pool's size is unknown), resized while it runs by the elastic allocator",
        "trial.checkpoint.storageClass: ignored (AdaptDL's checkpoint folder is kept in the trial's S3 "
        "folder and synced around each restart; there are no storage classes)",
        "trial.image: kept as environment.image, which only Batch and SageMaker pools run; agents (local, "
        "ec2) run the trial in their own Python, and the trial's log says so",
        "trial.imagePullSecrets: ignored (images are pulled with the pool's IAM role)",
        "trial.namespace: ignored (Stratus has no Kubernetes namespaces; resources.resource_pool picks "
        "where trials run)",
        "trial.cpuNum: ignored (a replica gets the CPUs and memory of the machine its slots are on)",
        "trial.memorySize: ignored (a replica gets the CPUs and memory of the machine its slots are on)",
    ]
    fields = [w.split(":")[0] for w in translation.warnings]
    assert "trainingServicePlatform" not in fields  # adl is translated, not ignored
    assert len(fields) == len(set(fields))


def test_a_non_adaptive_adl_trial_runs_one_replica_of_its_gpus_still_under_the_launcher() -> None:
    raw = load(MNIST_ADL)
    raw["trial"]["gpuNum"] = 4

    translation = translate_nni(raw)
    config = parse_experiment_config(translation.config).config

    assert config.entrypoint == "python3 -m stratus.launchers.adaptdl -- python3 mnist.py"
    assert config.elastic is not None
    assert (config.elastic.min_replicas, config.elastic.max_replicas, config.elastic.slots_per_replica) == (
        1,
        1,
        4,
    )
    assert config.elastic.checkpoint_size_limit is None
    assert config.resources.slots_per_trial == 4
    assert not any(w.startswith("trial.adaptive") for w in translation.warnings)


def test_zero_gpus_is_one_cpu_slot_per_replica_with_a_note() -> None:
    raw = load(MNIST_ADL)
    raw["trial"]["gpuNum"] = 0

    translation = translate_nni(raw)

    assert translation.config["elastic"]["slots_per_replica"] == 1
    assert (
        "trial.gpuNum: 0 GPUs: each replica gets 1 slot (elastic.slots_per_replica: 1), a CPU slot on a CPU "
        "resource pool; on a GPU pool that slot is a GPU"
    ) in translation.warnings


def test_other_platforms_keep_their_warning() -> None:
    raw = load(MNIST_ADL)
    raw["trainingServicePlatform"] = "local"

    translation = translate_nni(raw)

    assert "elastic" not in translation.config and translation.config["entrypoint"] == "python3 mnist.py"
    assert (
        "trainingServicePlatform: ignored (Stratus runs trials on its own compute backends; "
        "resources.resource_pool picks one)"
    ) in translation.warnings


def test_a_shell_command_runs_whole_under_the_launcher() -> None:
    raw = load(MNIST_ADL)
    raw["trial"]["command"] = "cd src && python3 mnist.py"

    entrypoint = translate_nni(raw).config["entrypoint"]

    assert entrypoint == [
        "python3",
        "-m",
        "stratus.launchers.adaptdl",
        "--",
        "sh",
        "-c",
        "cd src && python3 mnist.py",
    ]


def test_nfs_is_refused_naming_its_path_and_the_share_folder() -> None:
    raw = load(MNIST_ADL)
    raw["trial"]["nfs"] = {"server": "10.20.41.55", "path": "/exports/mnist", "containerMountPath": "/data"}

    assert problems(raw) == {
        "trial.nfs": "no NFS mounts here, so 10.20.41.55:/exports/mnist at /data cannot be mounted; use "
        "ADAPTDL_SHARE_PATH, a folder synced to S3 that every replica and restart of the trial sees, and "
        "remove nfs"
    }


@pytest.mark.parametrize(
    ("field", "value", "path", "message"),
    [
        ("adaptive", "yes", "trial.adaptive", "must be true or false"),
        ("gpuNum", -1, "trial.gpuNum", "must be a whole number of GPUs (0 or more)"),
        ("checkpoint", "1Gi", "trial.checkpoint", "must be a mapping with storageClass and storageSize"),
        ("checkpoint", {"storageSize": "lots"}, "trial.checkpoint.storageSize", 'must be a size like "1Gi"'),
        ("image", "", "trial.image", "must be an image name"),
    ],
)
def test_malformed_adl_fields_are_problems_at_their_nni_paths(
    field: str, value: Any, path: str, message: str
) -> None:
    raw = load(MNIST_ADL)
    raw["trial"][field] = value

    found = problems(raw)

    assert found[path].startswith(message)


def test_elastic_settings_given_with_the_nni_config_win_and_resize_the_trial() -> None:
    raw = load(CIFAR10_ADL)
    raw["elastic"] = {"min_replicas": 2, "max_replicas": 3, "min_rescale_interval_s": 5}  # --config elastic.…

    config = parse_experiment_config(translate_nni(raw).config).config

    assert config.elastic is not None
    assert (config.elastic.min_replicas, config.elastic.max_replicas) == (2, 3)
    assert config.elastic.min_rescale_interval_s == 5 and config.elastic.checkpoint_size_limit == "1Gi"
    assert config.resources.slots_per_trial == 2


# --- NNI v2: trainingService: {platform: adl} --------------------------------------------------------


def test_v2_adl_maps_trial_gpus_and_docker_image() -> None:
    raw = load(V2_ADL)
    assert is_nni_config(raw)

    translation = translate_nni(raw)
    config = parse_experiment_config(translation.config).config

    assert config.entrypoint == "python3 -m stratus.launchers.adaptdl -- python3 main_adl.py"
    assert config.elastic == ElasticConfig(max_replicas=1, slots_per_replica=2)
    assert config.resources.slots_per_trial == 2
    assert config.environment.image == "msranni/nni:latest"
    assert [w.split(":")[0] for w in translation.warnings] == ["trainingService.dockerImage"]


def test_v2_reads_v1s_trial_fields_under_training_service_as_an_extension_and_says_so() -> None:
    raw = load(V2_ADL)
    raw["trainingService"] |= {
        "adaptive": True,
        "checkpoint": {"storage_class": "gp3", "storage_size": "500Mi"},  # v2 spellings
        "image_pull_secrets": [{"name": "s"}],
        "command": "python3 other.py",
    }

    translation = translate_nni(raw)

    assert translation.config["elastic"] == {
        "framework": "adaptdl",
        "min_replicas": 1,
        "slots_per_replica": 2,
        "checkpoint_size_limit": "500Mi",
    }
    assert translation.config["entrypoint"] == "python3 -m stratus.launchers.adaptdl -- python3 main_adl.py"
    assert translation.warnings[:3] == [
        "trainingService: adaptive, checkpoint, imagePullSecrets read as a Stratus extension: NNI v2's adl "
        "training service has only platform and dockerImage (these are NNI v1's trial fields)",
        "trainingService.command: ignored (not a field of NNI's adl training service; NNI v2 names it "
        "trialCommand)",
        "trainingService.adaptive: an elastic trial of elastic.min_replicas (1) to elastic.max_replicas "
        f"replicas (unset: as many as its pool holds, at most {MAX_REPLICAS_CAP}; {DEFAULT_MAX_REPLICAS} "
        "where the pool's size is unknown), resized while it runs by the elastic allocator",
    ]
    assert [w.split(":")[0] for w in translation.warnings[3:]] == [
        "trainingService.checkpoint.storageClass",
        "trainingService.dockerImage",
        "trainingService.imagePullSecrets",
    ]


def test_v2_nfs_is_refused_at_training_service_nfs() -> None:
    raw = load(V2_ADL)
    raw["trainingService"]["nfs"] = {"server": "nas", "path": "/x", "containerMountPath": "/mnt"}

    assert list(problems(raw)) == ["trainingService.nfs"]


# --- the elastic section, in any config -------------------------------------------------------------

DETERMINED = {
    "name": "elastic",
    "entrypoint": "python3 -m stratus.launchers.adaptdl -- python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
}


def test_a_determined_config_may_be_elastic_and_its_slots_follow_min_replicas() -> None:
    raw = {**DETERMINED, "elastic": {"min_replicas": 2, "max_replicas": 4, "slots_per_replica": 2}}

    parsed = parse_experiment_config(raw)

    assert parsed.warnings == []
    assert parsed.config.resources.slots_per_trial == 4
    stored = parsed.config.model_dump(mode="json")
    assert stored["elastic"] == {
        "framework": "adaptdl",
        "min_replicas": 2,
        "max_replicas": 4,
        "slots_per_replica": 2,
        "min_rescale_interval_s": 300,
        "speedup_threshold": 1.05,
        "checkpoint_size_limit": None,
    }
    assert parse_experiment_config(stored).config == parsed.config  # what the service reads back
    assert parse_experiment_config(DETERMINED).config.elastic is None


def test_bad_elastic_values_are_problems_with_their_paths() -> None:
    elastic = {
        "framework": "horovod",
        "min_replicas": 0,
        "slots_per_replica": 0,
        "min_rescale_interval_s": -1,
        "speedup_threshold": 0.9,
        "checkpoint_size_limit": "a lot",
    }

    assert parse_problems({**DETERMINED, "elastic": elastic}) == {
        "elastic.framework": 'must be "adaptdl", got "horovod"',
        "elastic.min_replicas": "must be ≥ 1",
        "elastic.slots_per_replica": "must be ≥ 1",
        "elastic.min_rescale_interval_s": "must be ≥ 0",
        "elastic.speedup_threshold": "must be ≥ 1",
        "elastic.checkpoint_size_limit": 'must be a size like "1Gi" or "500M" (or a number of bytes), '
        'got "a lot"',
    }
    assert parse_problems({**DETERMINED, "elastic": {"min_replicas": 3, "max_replicas": 2}}) == {
        "elastic.max_replicas": "must be ≥ min_replicas (3), got 2"
    }
    assert parse_problems({**DETERMINED, "elastic": {"max_replicas": 0}}) == {
        "elastic.max_replicas": "must be ≥ 1"
    }
    assert parse_problems({**DETERMINED, "elastic": {"min_replicas": "2"}}) == {
        "elastic.min_replicas": 'must be an integer, got "2"'
    }


def test_slots_per_trial_other_than_the_starting_size_is_refused() -> None:
    raw = {**DETERMINED, "elastic": {"min_replicas": 2}, "resources": {"slots_per_trial": 3}}

    assert parse_problems(raw) == {
        "resources.slots_per_trial": "an elastic trial starts at elastic.min_replicas × "
        "elastic.slots_per_replica = 2 slots; set slots_per_trial to 2 or leave it out"
    }
    same = {**raw, "resources": {"slots_per_trial": 2, "priority": 3}}
    assert parse_experiment_config(same).config.resources.priority == 3


@pytest.mark.parametrize(
    ("elastic", "pool_max_slots", "limit"),
    [
        ({"max_replicas": 3}, 64, 3),  # given: kept
        ({}, None, DEFAULT_MAX_REPLICAS),  # the pool's size unknown
        ({"slots_per_replica": 2}, 6, 3),  # what the pool holds
        ({}, 1000, MAX_REPLICAS_CAP),  # capped
        ({"min_replicas": 5}, 2, 5),  # never below min_replicas
    ],
)
def test_the_replica_limit_is_max_replicas_or_what_the_pool_holds(
    elastic: dict[str, int], pool_max_slots: int | None, limit: int
) -> None:
    assert ElasticConfig.model_validate(elastic).replica_limit(pool_max_slots) == limit


@pytest.mark.parametrize(
    ("size", "size_bytes"),
    [("1Gi", 2**30), ("500M", 500 * 10**6), ("64KiB", 64 * 1024), ("10GB", 10**10), (7, 7)],
)
def test_checkpoint_size_limits_are_kubernetes_quantities(size: str | int, size_bytes: int) -> None:
    assert ElasticConfig(checkpoint_size_limit=size).checkpoint_size_limit_bytes == size_bytes


# --- through the control plane ----------------------------------------------------------------------


def test_an_adl_config_is_validated_and_created_as_an_elastic_experiment() -> None:
    raw = load(CIFAR10_ADL)
    raw["trial"]["gpuNum"] = 2
    ports = memory_ports()
    sha = "c" * 64
    ports.blobs.put(keys.context_key(sha), b"ctx")

    parsed = experiments.validate(copy.deepcopy(raw))
    created = experiments.create(ports, raw, sha)

    assert parsed.config.elastic is not None and parsed.config.elastic.slots_per_replica == 2
    assert any(w.startswith("trial.adaptive: an elastic trial") for w in parsed.warnings)
    experiment = created.experiment
    assert experiment is not None and experiment.state == "ACTIVE"
    assert experiment.config["elastic"]["slots_per_replica"] == 2
    assert (
        experiment.config["entrypoint"]
        == "python3 -m stratus.launchers.adaptdl -- python3 /cifar10/main_adl.py"
    )
    (trial,) = ports.trials.for_experiment(experiment.id)
    execution = ports.workflows.executions[keys.execution_name(trial.id, 0)]
    assert execution["slots"] == 2 and execution["max_restarts"] == 0
