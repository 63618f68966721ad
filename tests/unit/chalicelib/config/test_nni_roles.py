"""NNI's Kubeflow / FrameworkController configs, whose command lives in a role
(`chalicelib/config/_nni_roles.py`): one process runs as a trial, PyTorch's master + workers as a
distributed trial under stratus.launchers.torch_distributed, and the rest is refused with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.config import ConfigInvalidError, parse_experiment_config, translate_nni

SPACE = {"lr": {"_type": "loguniform", "_value": [0.001, 0.1]}}


def v1_kubeflow(operator: str = "tf-operator", **roles: Any) -> dict[str, Any]:
    return {
        "authorName": "someone",
        "experimentName": "roles",
        "trialConcurrency": 1,
        "maxTrialNum": 2,
        "trainingServicePlatform": "kubeflow",
        "searchSpace": SPACE,
        "tuner": {"builtinTunerName": "Random", "classArgs": {"optimize_mode": "minimize"}},
        "trial": {"codeDir": ".", **roles},
        "kubeflowConfig": {"operator": operator, "storage": "nfs"},
    }


def role(command: str = "python3 fit.py", replicas: int = 1, gpus: int = 0, **extra: Any) -> dict[str, Any]:
    return {"replicas": replicas, "command": command, "gpuNum": gpus, "cpuNum": 2, "memoryMB": 4096, **extra}


def refusal(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigInvalidError) as info:
        translate_nni(raw)
    return {p.path: p.message for p in info.value.problems}


def test_one_worker_runs_as_one_trial_on_its_gpus_and_image() -> None:
    translation = translate_nni(v1_kubeflow(worker=role(gpus=2, image="registry/trainer:1")))

    config = parse_experiment_config(translation.config).config
    assert config.entrypoint == "python3 fit.py"
    assert config.resources.slots_per_trial == 2
    assert config.environment.image == "registry/trainer:1"
    assert (
        "trial.worker: the worker role's one process runs as the trial (python3 fit.py); cpuNum, memoryMB "
        "ignored: Stratus sizes trials by resources.slots_per_trial"
    ) in translation.warnings


def test_pytorch_master_and_workers_become_a_torch_distributed_trial() -> None:
    raw = v1_kubeflow("pytorch-operator", master=role(gpus=1), worker=role(replicas=3, gpus=1))

    config = parse_experiment_config(translate_nni(raw).config).config

    assert config.entrypoint == "python3 -m stratus.launchers.torch_distributed python3 fit.py"
    assert config.resources.slots_per_trial == 4


def test_tensorflow_parameter_servers_are_refused_naming_tf_config() -> None:
    found = refusal(v1_kubeflow(worker=role(replicas=2), ps=role()))

    assert list(found) == ["trial.worker"]
    assert found["trial.worker"].startswith(
        "a distributed job (worker × 2, ps × 1) cannot run on Stratus: TensorFlow's parameter-server and "
        "multi-worker jobs find each other through TF_CONFIG, which Stratus does not set."
    )


@pytest.mark.parametrize(
    "roles",
    [
        {"master": role(), "worker": role("python3 other.py")},  # different commands
        {"master": role(gpus=2), "worker": role()},  # several GPUs per process
        {"master": role(replicas=2), "worker": role()},  # two masters
    ],
)
def test_master_and_workers_that_do_not_fit_the_launcher_are_refused(roles: dict[str, Any]) -> None:
    found = refusal(v1_kubeflow("pytorch-operator", **roles))

    assert list(found) == ["trial.master"] and "cannot run on Stratus" in found["trial.master"]


def test_frameworkcontroller_one_task_runs_and_several_are_refused() -> None:
    one = v1_kubeflow()
    one["trainingServicePlatform"] = "frameworkcontroller"
    one["trial"]["taskRoles"] = [{"name": "worker", "taskNum": 1, "command": "python3 fit.py", "gpuNum": 1}]
    assert translate_nni(one).config["entrypoint"] == "python3 fit.py"

    one["trial"]["taskRoles"][0]["taskNum"] = 2
    found = refusal(one)
    assert (
        "FrameworkController's task roles find each other through its FC_* variables"
        in found["trial.taskRoles[0]"]
    )


def test_a_frameworkcontroller_template_is_named_in_the_refusal() -> None:
    raw = v1_kubeflow()
    raw["frameworkcontrollerConfig"] = {"configPath": "fc_template.yml", "storage": "pvc"}

    assert refusal(raw) == {
        "trial.command": "required: this config's task roles are in the FrameworkController template "
        "fc_template.yml (frameworkcontrollerConfig.configPath), which Stratus does not read; give "
        "trial.taskRoles or trial.command"
    }


def test_a_role_without_a_command_names_the_role() -> None:
    assert refusal(v1_kubeflow(worker={"replicas": 1, "gpuNum": 0})) == {
        "trial.worker.command": "required: the command this role runs, e.g. python3 mnist.py"
    }


def test_v2_kubeflow_roles_under_the_training_service() -> None:
    raw = {
        "experimentName": "v2 roles",
        "searchSpace": SPACE,
        "trialConcurrency": 1,
        "maxTrialNumber": 2,
        "tuner": {"name": "TPE", "classArgs": {"optimize_mode": "maximize"}},
        "trainingService": {
            "platform": "kubeflow",
            "reuseMode": False,
            "worker": {"replicas": 1, "command": "python3 fit.py", "gpuNumber": 1, "dockerImage": "img:2"},
        },
    }

    config = parse_experiment_config(translate_nni(raw).config).config

    assert (config.entrypoint, config.resources.slots_per_trial, config.environment.image) == (
        "python3 fit.py",
        1,
        "img:2",
    )
